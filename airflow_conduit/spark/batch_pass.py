"""One micro-batch in one pass over its input: fates, counts, DLQ records and the first write together.

The batch's plan (read, parse, processors, fates; see ``runner``) is
executed by the first destination's write, which carries an observation
(``DataFrame.observe``): the counts, the nacked records' DLQ entries (the
first ``DLQ_COLLECT_LIMIT`` in read order, so that the bad records come back
from the same pass; an entry holds what varies per record, ``dlq.dlq_entry``,
and the batch's own DLQ columns are added after the pass), and what the nack
window needs (the read-order numbers of the nacked records and the records
per partition). The DLQ is then written from those entries, and only then is
the first destination's write committed (nacked records are safe before any
destination commits). Other destinations read the batch again, each in one job, from memory: the pass
keeps the batch (``reads_again``) when a write after it reads it.

A second pass for the DLQ happens only when a batch holds more nacked
records than ``DLQ_COLLECT_LIMIT``; the nack window orders records only
when it is enabled and the batch has nacked records.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID
from airflow_conduit.spark import columns as C
from airflow_conduit.spark import expectations, source_lines
from airflow_conduit.spark.analysed_plan import AnalysedPlan
from airflow_conduit.spark.destinations import Destination
from airflow_conduit.spark.dlq import BATCH_COLUMN_TYPES, DLQ_COLUMNS, ENTRY_FIELDS, ORIGINAL, dlq_entry
from airflow_conduit.spark.fates import FILTERED_ALL, NACKED, Branch, written
from airflow_conduit.spark.observed import ObservedMetrics, observe
from airflow_conduit.spark.parsing import PENDING_REASON
from airflow_conduit.spark.sources import FILE, PARTITION_SHIFT, POSITION_MASK, SPLIT

# A nacked record's fields the report counts it by (``PassResult.dlq_kinds``), and the class a rejected JSON line
# whose reason is worked out after the pass is counted under.
DLQ_KINDS = ("source_id", "stage", "exception_class")
PENDING_KIND = "airflow_conduit.spark.RejectedJsonLine"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_conduit.pipeline.model import PipelineSpec
    from airflow_conduit.runs.report import RunReport
    from airflow_conduit.spark.batch_intents import BatchIntents
    from airflow_conduit.spark.commits import CommitLog
    from airflow_conduit.spark.dlq import PendingReasons
    from airflow_conduit.spark.fates import Fates
    from airflow_conduit.spark.sources import SourcePlan
    from airflow_conduit.spark.stage import StageTracker
    from airflow_conduit.spark.window import WindowStore

DLQ_COLLECT_LIMIT = 50_000  # nacked records per batch gathered in the first pass (bounded driver memory)
PARTITION_BINS = 10_000  # histogram_numeric is exact up to this many distinct partitions
DLQ_ENTRY = "__ac_dlq_entry"
# What the observation's order-keeping aggregates read, computed as columns in the generated projection
# below it: an observation evaluates its aggregates' inputs interpreted, record by record (see _metrics).
NACKED_SEQ = "__ac_nacked_seq"
READ_PARTITION = "__ac_read_partition"


def in_tasks_per_core(status: DataFrame) -> DataFrame:
    """The batch in at most one task per core (Spark's ``defaultParallelism``), without a shuffle.

    Files are read one per partition (their record numbers come from it), so a batch of many files
    ran one task per file: each with its own observation buffer, Parquet writer and output file.
    ``coalesce`` groups consecutive partitions into one task; record numbers are computed below it,
    per file. ``spark.default.parallelism`` sets the count.

    ``BatchPass`` puts it above the DLQ entry column, not above the whole record: ``Coalesce`` is
    not code-generated, so every column that crosses it is written out for every record. Below it,
    the wide columns a DLQ record is built from (the error struct, the rejected text, the source id)
    are folded into one struct that is NULL for every good record; above it, only that, the flags,
    the sequence number, the observation's inputs (``BatchPass._observed_inputs``) and the destinations'
    fields cross (docs/architecture.md, the data path: one task per core).
    """
    return status.coalesce(status.sparkSession.sparkContext.defaultParallelism)


def _partition_of(seq):
    """The partition a record was read in (monotonically_increasing_id keeps it in the upper bits)."""
    return F.shiftright(seq, PARTITION_SHIFT)


def rows_for(dest: Destination, branch: Branch, status: DataFrame, fates: "Fates") -> DataFrame:
    """What ``dest`` writes: the branch's records, with their read-order number when it dedups on it (Kafka)."""
    return fates.rows(branch, status, (C.SEQ,) if dest.wants_record_id else ())


def reads_again(todo: list) -> bool:
    """Whether a write after the pass reads the batch again: a second destination, or a first one whose write
    cannot carry the pass (Delta, Kafka). The pass then keeps the batch (``persist``) for them: they read it
    from memory instead of reading and parsing the source's records again."""
    return len(todo) > 1 or (bool(todo) and not todo[0][0].carries_a_pass)


@dataclass
class PassResult:
    counts: dict[str, int]
    written: dict[str, int] = field(default_factory=dict)
    already: list[str] = field(default_factory=list)
    # rows of the batch a killed attempt had written (found by a deduplicating writer), not in ``written``
    earlier_attempt_wrote: dict[str, int] = field(default_factory=dict)
    dlq_written: int | None = None  # None: committed by an earlier attempt
    crossed: int | None = None  # index of the record that exceeded the nack threshold
    replayed: bool = False  # the window of this batch was saved by an earlier attempt
    generator_done: bool = False
    expectations: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # processor -> rule -> counts
    expectation_failed: Exception | None = None  # a fail rule failed in this batch (raised once it is committed)
    dlq_kinds: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # source -> stage -> class -> nacked


class BatchContext(Protocol):
    """What a batch pass uses of the run it belongs to (``runner.PipelineRunner`` passes itself).

    The pass moves ``stage`` as it writes, so that a failure is reported where it happened.
    """

    spark: "SparkSession"
    spec: "PipelineSpec"
    run_id: str
    plans: "list[SourcePlan]"
    keep_originals: bool
    rules: list  # the expect processors' rules (spark/expectations.py)
    destinations: "list[Destination]"
    dlq: "Destination"
    commits: "CommitLog"
    windows: "WindowStore"
    intents: "BatchIntents"
    report: "RunReport"
    stage: "StageTracker"
    crash_hook: Callable[[str, int], None]  # called after each commit (fault injection in tests)
    crash_before_commit: Callable[[str, int], None]  # called after each write, before its commit (the same)
    fates: "Fates"  # the fate columns and each destination's select list, built once per run
    pass_columns: dict  # what every pass builds the same (columns, JVM lists), built by the first (BatchPass._once)

    @property
    def dlq_may_hold_pending_reasons(self) -> bool: ...

    def committed(self, dest: "Destination", batch_id: int) -> bool: ...  # in the target already (marker or its own log)

    def mark_committed(self, dest: "Destination", batch_id: int, rows: int) -> None: ...

    @property
    def pending_reasons(self) -> "PendingReasons": ...


class BatchPass:
    def __init__(self, runner: BatchContext, status: DataFrame, branches: list[Branch], batch_id: int, at: str):
        self.runner = runner
        self.status = status
        self.branches = branches
        self.batch_id = batch_id
        self.at = at
        self.spec = runner.spec
        carried = self._once(("dlq_carried",), lambda: runner.dlq.carried_in_entry(status.columns))
        self.dlq_carried = tuple(carried)  # kept in the DLQ's rows after its own columns (a Kafka DLQ's original record)
        self.dlq_entry = self._once(("dlq_entry",), lambda: [
            *dlq_entry(self.spec, runner.plans, keep_originals=runner.keep_originals),
            *[column.alias(name) for name, column in carried.items()]])

    def _once(self, key: tuple, build: Callable[[], Any]) -> Any:
        """What every batch of the run builds the same, built by the first (each Column call is a JVM round trip)."""
        cache = self.runner.pass_columns
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def _in_tasks_per_core(self, status: DataFrame) -> DataFrame:
        """``in_tasks_per_core``, the core count read once per run, over only the columns read above it."""
        cores = self._once(("cores",), lambda: status.sparkSession.sparkContext.defaultParallelism)
        return self._crossing(status).coalesce(cores)

    def _crossing(self, status: DataFrame) -> DataFrame:
        """``status`` without the columns only read below the coalesce: the record's error, rejected text, fields as
        read and origin go into the DLQ entry and the fate flags there. ``Coalesce`` and the observation are not
        code-generated: every column that crosses them is written into the row of every record (the select list
        built once per run per shape, as SQL text: one JVM round trip at any width)."""
        columns = tuple(status.columns)
        below = self._once(("below",), self._read_below_only)
        kept = [c for c in columns if c not in below and not c.startswith(C.ORIGINAL)]
        if len(kept) == len(columns):
            return status
        return C.select_expr(status, self._once(("crossing", columns), lambda: C.jvm_strings([C.quote(c) for c in kept])))

    def _read_below_only(self) -> frozenset[str]:
        """The internal columns nothing above the coalesce reads (``_crossing``): the observation reads the source
        and position only for a generator's last offset, the read order only for an expectation's first offender
        (the DLQ's and the window's come in ``NACKED_SEQ``), a write only where it dedups on it (Kafka)."""
        r = self.runner
        below = {C.RAW, C.ERROR, C.FILTERED, C.SOURCE_INDEX, FILE, SPLIT}
        if not any(plan.records is not None for plan in r.plans):
            below |= {C.SOURCE_ID, C.POSITION}
        if not r.rules and not any(dest.wants_record_id for dest in r.destinations):
            below.add(C.SEQ)
        return frozenset(below)

    def _over(self, key: tuple, leaf: DataFrame, build: Callable[[DataFrame], DataFrame]) -> DataFrame:
        """``build(leaf)``, analysed once per run where it can be: an earlier batch's, put over ``leaf`` when ``leaf``
        is that batch's plan put over this batch (``analysed_plan``: same output attributes); built otherwise."""
        cache = self.runner.pass_columns
        kept = cache.get(("analysed", *key))
        if kept is not None:
            try:
                frame = kept.over(leaf)
            except Exception:  # noqa: BLE001 - reuse is an optimisation: the frame is then built as usual
                frame = None
            if frame is not None:
                return frame
        frame = build(leaf)
        try:  # checked ahead once: a plan kept again, after a batch that could not reuse it, is checked at its reuse
            cache[("analysed", *key)] = AnalysedPlan(frame, leaf, check_ahead=kept is None)
        except Exception:  # noqa: BLE001 - as above
            cache.pop(("analysed", *key), None)
        return frame

    # -- what the pass observes -------------------------------------------------------------------------

    def _window_enabled(self, window_needed: bool) -> bool:
        return window_needed and self.spec.dead_letter_queue.window_size > 0

    def _observed_inputs(self, dlq_needed: bool, *, window_needed: bool) -> dict[str, Column]:
        """The columns ``_metrics`` reads, each only where it is read: the DLQ entry, the nacked records'
        sequence numbers (NULL for the others), the partition each record was read in, and where a record
        that fails an expectation's fail rule came from. Added in one projection (one plan analysis).

        ``min_by`` and ``histogram_numeric`` are imperative aggregates: an observation evaluates their inputs
        with Spark's interpreted evaluator for every record. As columns of the code-generated projection
        below, what they evaluate is a column reference (docs/architecture.md, the data path: the observation's inputs).
        """
        columns: dict[str, Column] = {}
        if dlq_needed:  # built before the observation: only this (NULL for good records) crosses into it
            entry = F.struct(F.col(C.SEQ).alias("seq"), *self.dlq_entry)
            columns[DLQ_ENTRY] = F.when(F.col(NACKED), entry)
        window = self._window_enabled(window_needed)
        if dlq_needed or window:
            columns[NACKED_SEQ] = F.when(F.col(NACKED), F.col(C.SEQ))
        if window:
            columns[READ_PARTITION] = _partition_of(F.col(C.SEQ))
        if self.runner.rules:
            columns.update(expectations.offender_columns(self.runner.rules, self.runner.plans))
        return columns

    @staticmethod
    def _jvm_columns(columns: dict[str, Column]) -> C.JvmColumns:
        return C.JvmColumns(list(columns.values()), list(columns))

    def _metrics(self, dlq_needed: bool, *, window_needed: bool) -> list:
        """The observation's aggregates. With one destination its written count is not one of them: every record has
        exactly one fate (``fates``), so it is read − nacked − filtered (``_counts``). Whether a nacked record's reason
        is pending is read from its entry, not counted (``_pending``)."""
        nacked_seq = F.col(NACKED_SEQ)
        metrics = [
            F.count(F.lit(1)).alias("read"),
            F.count_if(F.col(NACKED)).alias("nacked"),
            F.count_if(F.col(FILTERED_ALL)).alias("filtered"),
            *[F.count_if(F.col(written(b.index))).alias(f"w{b.index}") for b in self.branches if len(self.branches) > 1],
        ]
        if dlq_needed:
            metrics.append(F.min_by(F.col(DLQ_ENTRY), nacked_seq, DLQ_COLLECT_LIMIT).alias("dlq"))
        if self._window_enabled(window_needed):
            if not dlq_needed:
                metrics.append(F.min_by(nacked_seq, nacked_seq, DLQ_COLLECT_LIMIT).alias("seqs"))
            metrics.append(F.histogram_numeric(F.col(READ_PARTITION), F.lit(PARTITION_BINS)).alias("partitions"))
        if self.runner.rules:
            metrics += expectations.metrics(self.runner.rules)
        for plan in self.runner.plans:
            if plan.records is not None:
                metrics.append(F.max(F.when(F.col(C.SOURCE_ID) == F.lit(plan.id), F.col(C.POSITION))).alias(f"g{plan.index}"))
        return metrics

    # -- the pass ---------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Build what the run's first pass builds, on an empty stand-in of a batch while the query starts: its columns,
        the observation's, the writes' and the DLQ's select lists, and the pass's frames analysed (``_over``), so that
        the first batch puts them over its own rows as any later batch does. Nothing runs, nothing is written, nothing
        is observed. A first pass has no DLQ commit and no saved window yet."""
        r = self.runner
        shape = (True, self._window_enabled(True), len(self.branches))
        inputs = self._once(("inputs", *shape), lambda: self._jvm_columns(self._observed_inputs(True, window_needed=True)))
        status = self._over(("inputs", *shape), self.status, lambda s: self._in_tasks_per_core(C.with_columns(s, inputs) if inputs else s))
        metrics = self._once(("metrics", *shape), lambda: C.JvmColumns(self._metrics(True, window_needed=True)))
        todo = sorted(zip(r.destinations, self.branches), key=lambda pair: not pair[0].carries_a_pass)  # as run orders them
        kept = reads_again(todo)
        for position, (dest, branch) in enumerate(todo):
            if position == 0 and dest.carries_a_pass:  # its rows over the observed pass (an observation never used)
                observed = observe(status, Observation(f"conduit-plan-ahead-{uuid.uuid4().hex}"), metrics)
                self._over(("rows", dest.id, "observed"), observed, lambda o: rows_for(dest, branch, o, r.fates))
            else:
                self._over(("rows", dest.id, kept), status if kept else self.status,
                           lambda s: rows_for(dest, branch, s if kept else self._in_tasks_per_core(s), r.fates))
        r.pending_reasons  # noqa: B018 - cached_property: the DLQ rows' columns

    def run(self) -> PassResult:
        r = self.runner
        b = self.batch_id
        dlq_needed = not r.committed(r.dlq, b)
        committed = {d.id for d in r.destinations if r.committed(d, b)}
        todo = [(d, br) for d, br in zip(r.destinations, self.branches) if d.id not in committed]
        # the pass is carried by a write that runs as one action (a log destination iterates lazily)
        todo.sort(key=lambda pair: not pair[0].carries_a_pass)
        result = PassResult(counts={}, already=[d.id for d in r.destinations if d.id in committed])
        if b >= 0:  # a pipeline's batch (a DLQ replay's is negative): finished under the spec it started with
            r.intents.begin(b, ([] if dlq_needed else [DEAD_LETTER_QUEUE_ID]) + result.already)
        saved_window = r.windows.get(b)  # read once: the window of a batch an earlier attempt finished
        window_needed = saved_window is None
        observation = Observation(f"conduit-batch-{b}-{uuid.uuid4().hex}")
        shape = (dlq_needed, self._window_enabled(window_needed), len(self.branches))
        inputs = self._once(("inputs", *shape), lambda: self._jvm_columns(self._observed_inputs(dlq_needed, window_needed=window_needed)))
        # the observation's inputs, then the batch in one task per core above the DLQ entry (see in_tasks_per_core)
        status = self._over(("inputs", *shape), self.status,
                            lambda s: self._in_tasks_per_core(C.with_columns(s, inputs) if inputs else s))
        kept = reads_again(todo)
        if kept:
            status = status.persist()  # filled by the pass, read by the writes after it (then dropped)
        try:
            return self._run(result, todo, status, observation, dlq_needed, window_needed, saved_window, kept, shape)
        finally:
            if kept:
                status.unpersist()

    def _run(self, result: PassResult, todo, status: DataFrame, observation: Observation, dlq_needed: bool,
             window_needed: bool, saved_window, kept: bool, shape: tuple) -> PassResult:
        r = self.runner
        b = self.batch_id
        metrics_columns = self._once(("metrics", *shape), lambda: C.JvmColumns(self._metrics(dlq_needed, window_needed=window_needed)))
        observed = observe(status, observation, metrics_columns)
        if todo and todo[0][0].carries_a_pass:  # it carries the pass; its commit waits for the DLQ's
            dest, branch = todo[0]
            r.stage.at("destination", dest.id, dest.plugin)
            dest.write_in_pass(self._over(("rows", dest.id, "observed"), observed, lambda o: rows_for(dest, branch, o, r.fates)), b)
        else:
            r.stage.reset()
            observed.write.format("noop").mode("overwrite").save()
        origins = dlq_needed and (r.source_lines.needed or r.dlq.wants_origins)
        read = ((*source_lines.KEYS,) if origins else ()) + (("seq",) if shape[1] else ())
        if dlq_needed and r.dlq_may_hold_pending_reasons:  # whether a reason is pending (_pending)
            read += ("exception_class",)
        if dlq_needed and self._dlq_on_driver():  # the whole entries, to write the DLQ from the driver
            read += tuple(f for f in ENTRY_FIELDS if f not in read and (f != ORIGINAL or self._originals_with_counts()))
        if dlq_needed:  # what the nacked records are, for the report (lineage's DLQ facet)
            read += tuple(f for f in DLQ_KINDS if f not in read)
        # the DLQ rows stay in the JVM; the origins and the window's read order come with the counts
        metrics = ObservedMetrics(r.spark, observation, heavy=("dlq",), fields=tuple(("dlq", f) for f in read),
                                  selects=self._once(("observed",), dict), wait_seconds=self.spec.batch_deadline_seconds)
        result.counts = counts = self._counts(metrics)
        result.generator_done = self._generator_done(metrics)
        if r.rules:
            result.expectations = expectations.counts(r.rules, metrics)
            result.expectation_failed = expectations.first_failure(r.rules, metrics, b)

        r.stage.at("dlq", DEAD_LETTER_QUEUE_ID, r.dlq.plugin)
        result.crossed, result.replayed, window = self._advance_window(metrics, counts, saved_window)
        if counts["nacked"]:
            result.dlq_kinds = self._dlq_kinds(metrics, counts["nacked"])
        if dlq_needed:
            result.dlq_written = self._write_dlq(metrics, counts["nacked"])
        else:
            result.already.append(DEAD_LETTER_QUEUE_ID)
        written_now: dict[str, int] = {}
        for position, (dest, branch) in enumerate(todo):
            r.stage.at("destination", dest.id, dest.plugin)
            n = counts[f"w{branch.index}"]
            if position == 0 and dest.carries_a_pass:
                dest.commit(b)  # what its write in the pass wrote (a Delta transaction), now that the DLQ has committed
            elif n:
                dest.write(self._over(("rows", dest.id, kept), status if kept else self.status,
                                      lambda s: rows_for(dest, branch, s if kept else self._in_tasks_per_core(s), r.fates)), b)
            r.crash_before_commit(dest.id, b)
            r.mark_committed(dest, b, n)  # the batch's rows in the target, whoever wrote them
            earlier = dest.found_from_earlier_attempts()
            if earlier:
                result.earlier_attempt_wrote[dest.id] = earlier
            written_now[dest.id] = n - earlier
            r.crash_hook(dest.id, b)
        result.written = {d.id: written_now.get(d.id, 0) for d in r.destinations}
        r.stage.reset()
        if window is not None:  # saved only once every write of the batch is committed
            r.windows.save(b, window, result.crossed)
        return result

    def _counts(self, metrics: ObservedMetrics) -> dict[str, int]:
        """The batch's counts: read, nacked, filtered and per destination written (``w<index>``)."""
        skipped = len(self._skipped_lines)  # read by no pass: each one's fate is the DLQ
        counts = {"read": int(metrics["read"]) + skipped, "nacked": int(metrics["nacked"]) + skipped,
                  "filtered": int(metrics["filtered"])}
        if len(self.branches) == 1:  # its one fate left (see _metrics)
            counts[f"w{self.branches[0].index}"] = counts["read"] - counts["nacked"] - counts["filtered"]
        else:
            counts.update({f"w{br.index}": int(metrics[f"w{br.index}"]) for br in self.branches})
        return counts

    # -- DLQ --------------------------------------------------------------------------------------------

    def _write_dlq(self, metrics: ObservedMetrics, nacked: int) -> int:
        """Write the batch's nacked records to the DLQ and commit it; returns the rows written."""
        r = self.runner
        skipped = self._skipped_lines
        passed = nacked - len(skipped)
        try:
            if passed and not self._write_dlq_from_driver(metrics, passed):
                frame = self._dlq_frame(metrics, passed)
                if skipped:
                    frame = frame.unionByName(self._skipped_lines_frame(metrics), allowMissingColumns=True)
                    if r.dlq.wants_origins and r.dlq.nacked_origins is not None:  # (source id, file, split, position)
                        r.dlq.nacked_origins = [*r.dlq.nacked_origins, *((e[0], e[1], e[3], e[2]) for e in skipped)]
                r.dlq.write(frame, self.batch_id)
            elif skipped and not passed:
                rows = self._skipped_lines_rows()
                types = self._dlq_types(metrics)
                if types is None or not r.dlq.write_rows(DLQ_COLUMNS, types, rows, self.batch_id):
                    r.dlq.write(self._skipped_lines_frame(metrics), self.batch_id)
        except BaseException:
            r.report.add_counters(deadletterqueue_produce_failures=nacked)
            raise
        r.crash_before_commit(DEAD_LETTER_QUEUE_ID, self.batch_id)
        r.mark_committed(r.dlq, self.batch_id, nacked)
        r.crash_hook(DEAD_LETTER_QUEUE_ID, self.batch_id)
        return nacked - (r.dlq.found_from_earlier_attempts() if nacked else 0)  # what this run produced

    def _dlq_kinds(self, metrics: ObservedMetrics, nacked: int) -> dict[str, dict[str, dict[str, int]]]:
        """The batch's nacked records counted per source, stage and error class: from the entries that came with
        the counts, or (over the number the pass gathers, or a batch whose DLQ an earlier attempt committed) one more
        Spark job over just them. A JSON line whose reason is worked out after the pass counts as ``PENDING_KIND``."""
        skipped = self._skipped_lines
        passed = nacked - len(skipped)
        at = [ENTRY_FIELDS.index(key) for key in DLQ_KINDS]
        counted: list[tuple[tuple, int]] = [(tuple(entry[i] for i in at), 1) for entry in skipped]
        if passed and "dlq" in metrics.heavy and metrics.size("dlq") == passed:
            counted += [(key, 1) for key in metrics.fields("dlq", DLQ_KINDS)]
        elif passed:
            rows = self.status.where(F.col(NACKED)).select(*self.dlq_entry).groupBy(*DLQ_KINDS).count().collect()
            counted += [(tuple(row[:3]), int(row[3])) for row in rows]
        kinds: dict[str, dict[str, dict[str, int]]] = {}
        for (source_id, stage, error_class), n in counted:
            error_class = PENDING_KIND if error_class == PENDING_REASON else str(error_class)
            per_stage = kinds.setdefault(str(source_id), {}).setdefault(str(stage), {})
            per_stage[error_class] = per_stage.get(error_class, 0) + n
        return kinds

    def _dlq_on_driver(self) -> bool:
        """Whether the DLQ may be written from the driver (``Destination.write_rows``): a local json or parquet file
        DLQ (one whose records' origins go to its writer, a Kafka DLQ, is not)."""
        return self._once(("dlq on driver",), lambda: self.runner.dlq.writes_rows and not self.runner.dlq.wants_origins)

    def _write_dlq_from_driver(self, metrics: ObservedMetrics, nacked: int) -> bool:
        """Write the DLQ's rows from the entries the observation brought to the driver, without a Spark job, when
        every nacked record is among them and none has a reason still to work out (``PendingReasons``); False
        when it cannot (then ``_dlq_frame`` and a Spark write)."""
        r = self.runner
        if not self._dlq_on_driver() or metrics.size("dlq") != nacked or self._pending(metrics, nacked):
            return False
        types = self._dlq_types(metrics)
        if types is None:
            return False
        lines = r.source_lines.lines_of(r.spark, metrics.fields("dlq", source_lines.KEYS)) if r.source_lines.needed else None
        entries = self._driver_entries(metrics, lines)
        rows = r.pending_reasons.driver_rows(entries, lines, run_id=r.run_id, batch_id=self.batch_id, time_of_error=self.at)
        return r.dlq.write_rows(DLQ_COLUMNS, types, rows + self._skipped_lines_rows(), self.batch_id)

    @property
    def _skipped_lines(self) -> list[tuple]:
        """The DLQ entries of the batch's lines too long to read (``oversized_lines``): no pass saw them."""
        return list(getattr(self.runner, "oversized_entries", None) or ()) if self.batch_id >= 0 else []

    def _skipped_lines_rows(self) -> list[tuple]:
        r = self.runner
        return r.pending_reasons.driver_rows(self._skipped_lines, None, run_id=r.run_id, batch_id=self.batch_id,
                                             time_of_error=self.at)

    def _skipped_lines_frame(self, metrics: ObservedMetrics) -> DataFrame:
        """The skipped lines' DLQ rows as a local DataFrame, typed as the pass's DLQ rows."""
        types = self._dlq_types(metrics) or tuple(
            BATCH_COLUMN_TYPES.get(name, "long" if name in ("source_position", "source_split_start") else
                                   "integer" if name == "attempt" else "string") for name in DLQ_COLUMNS)
        schema = ", ".join(f"`{name}` {kind}" for name, kind in zip(DLQ_COLUMNS, types, strict=True))
        return self.runner.spark.createDataFrame(self._skipped_lines_rows(), schema=schema)

    def _originals_with_counts(self) -> bool:
        """Whether the entries' record text comes with the counts for the driver's DLQ write: only where a DLQ row's
        ``record`` is it. Without messages it is no row's; a file source's found line replaces it (``source_lines``),
        so there it is read after the pass, and only when a line was not found (its file changed or gone)."""
        return self.spec.dead_letter_queue.include_messages and not self.runner.source_lines.needed

    def _driver_entries(self, metrics: ObservedMetrics, lines: list | None) -> list[tuple]:
        """The gathered entries (``ENTRY_FIELDS``) for ``PendingReasons.driver_rows``; their record text read only where
        a row takes it (``_originals_with_counts``), else None."""
        at = ENTRY_FIELDS.index(ORIGINAL)
        rest = metrics.fields("dlq", ENTRY_FIELDS[:at] + ENTRY_FIELDS[at + 1:])
        messages = self.spec.dead_letter_queue.include_messages
        if messages and (lines is None or None in lines):
            originals = metrics.field("dlq", ORIGINAL)
        else:
            originals = [None] * len(rest)
        return [(*entry[:at], original, *entry[at:]) for entry, original in zip(rest, originals, strict=True)]

    def _pending(self, metrics: ObservedMetrics, nacked: int) -> bool:
        """Whether a nacked record's reason is still to be worked out (``PendingReasons``; the pass works out most):
        read from the gathered entries' classes, which come with the counts; assumed when not all were gathered."""
        if not self.runner.dlq_may_hold_pending_reasons:
            return False
        if metrics.size("dlq") != nacked:
            return True
        return PENDING_REASON in metrics.field("dlq", "exception_class")

    def _dlq_types(self, metrics: ObservedMetrics) -> tuple[str, ...] | None:
        """The DLQ columns' Spark type names (the entries' from the observed array's type), built once per run."""
        def build():
            element = metrics.frame.schema["dlq"].dataType.elementType
            types = {**{f.name: f.dataType.typeName() for f in element.fields}, **BATCH_COLUMN_TYPES}
            return tuple(types[name] for name in DLQ_COLUMNS) if all(name in types for name in DLQ_COLUMNS) else None

        return self._once(("dlq types",), build)

    def _dlq_frame(self, metrics: ObservedMetrics, nacked: int) -> DataFrame:
        r = self.runner
        gathered = metrics.size("dlq") == nacked
        lines = r.source_lines.needed
        ordinal = source_lines.ORDINAL if gathered and lines else None
        if gathered and r.dlq.wants_local_rows and not ordinal:  # a local relation: the DLQ reads it without a Spark job
            entries = metrics.local_elements("dlq")
        elif gathered:  # min_by returns them in read order
            entries = metrics.elements("dlq", ordinal=ordinal)
        else:  # more nacked records than the first pass gathers: a second pass reads just them
            entries = self.status.where(F.col(NACKED)).select(*self.dlq_entry)
        pending = self._pending(metrics, nacked)
        rows = r.pending_reasons.rows(entries, run_id=r.run_id, batch_id=self.batch_id, time_of_error=self.at, pending=pending,
                                      keep=((ordinal,) if ordinal else ()) + self.dlq_carried)
        if r.dlq.wants_origins:  # read with the counts: no Spark job (a Kafka DLQ: how many, and a replay's read-back)
            r.dlq.nacked_origins = self._origins(metrics, entries, gathered)
        if not lines:
            return rows
        return r.source_lines.apply(r.spark, rows, self._origins(metrics, entries, gathered), ordinal=ordinal)

    @staticmethod
    def _origins(metrics: ObservedMetrics, entries: DataFrame, gathered: bool) -> list[tuple]:
        """The nacked records' origins (``source_lines.KEYS``), read from the observation without a Spark job."""
        if gathered:
            return metrics.fields("dlq", source_lines.KEYS)
        return [tuple(row) for row in entries.select(*source_lines.KEYS).collect()]

    # -- nack window ------------------------------------------------------------------------------------

    def _nacked_indices(self, metrics: ObservedMetrics, nacked: int) -> list[int]:
        """0-based read-order indices of the batch's nacked records (partition by partition, record by record)."""
        seqs = metrics.field("dlq", "seq") if "dlq" in metrics.heavy else list(metrics.get("seqs") or [])
        if len(seqs) != nacked:
            seqs = [row[0] for row in self.status.where(F.col(NACKED)).select(C.SEQ).collect()]
        bins = metrics.get("partitions") or []
        if len(bins) >= PARTITION_BINS:  # the histogram may have merged partitions: count them exactly
            sizes = {int(row[0]): int(row[1]) for row in self.status.groupBy(_partition_of(F.col(C.SEQ))).count().collect()}
        else:
            sizes = {int(entry["x"]): int(entry["y"]) for entry in bins}
        offsets: dict[int, int] = {}
        total = 0
        for partition in sorted(sizes):
            offsets[partition] = total
            total += sizes[partition]
        return sorted(offsets.get(seq >> PARTITION_SHIFT, 0) + (seq & POSITION_MASK) for seq in seqs)

    def _advance_window(self, metrics: ObservedMetrics, counts: dict[str, int], saved: dict[str, Any] | None):
        """Advance the nack window over this batch: (index of the crossing record or None, replayed, window).

        A batch whose window was saved by an earlier attempt (saved after all its writes) keeps that
        verdict, which that attempt already reported: (crossed, True, None).
        """
        dlq = self.spec.dead_letter_queue
        if saved is not None:
            return saved.get("crossed_at_record"), True, None
        window = self.runner.windows.before(self.batch_id, dlq.window_size, dlq.window_nack_threshold)
        indices: list[int] = []
        skipped = len(self._skipped_lines)  # after the pass's records in read order
        if counts["nacked"] and window.size:
            passed = counts["read"] - skipped
            indices = self._nacked_indices(metrics, counts["nacked"] - skipped) + list(range(passed, counts["read"]))
        crossed = window.apply_batch(counts["read"], indices)
        return crossed, False, window

    def _generator_done(self, metrics: ObservedMetrics) -> bool:
        plans = [p for p in self.runner.plans if p.records is not None]
        if not plans or self.spec.mode != "available-now":
            return False
        return all(metrics.get(f"g{p.index}") is not None and metrics[f"g{p.index}"] >= p.records - 1 for p in plans)
