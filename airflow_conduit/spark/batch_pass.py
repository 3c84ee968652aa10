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
from airflow_conduit.spark.destinations import Destination
from airflow_conduit.spark.dlq import BATCH_COLUMN_TYPES, DLQ_COLUMNS, ENTRY_FIELDS, ORIGINAL
from airflow_conduit.spark.fates import FILTERED_ALL, NACKED, Branch, written
from airflow_conduit.spark.observed import ObservedMetrics, observe
from airflow_conduit.spark.parsing import PENDING_REASON
from airflow_conduit.spark.run_plan import FrameKey, PassShape, RunPlan, ShapeColumns
from airflow_conduit.spark.sources import PARTITION_SHIFT, POSITION_MASK

# A nacked record's fields the report counts it by (``PassResult.dlq_kinds``), and the class a rejected JSON line
# whose reason is worked out after the pass is counted under.
DLQ_KINDS = ("source_id", "stage", "exception_class")
PENDING_KIND = "airflow_conduit.spark.RejectedJsonLine"

if TYPE_CHECKING:
    from airflow_conduit.spark.commits import CommitLog
    from airflow_conduit.spark.fates import Fates
    from airflow_conduit.spark.window import NackWindow

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


# -- the ports: what a pass does outside Spark, each as narrow as its use (Conduit's pkg/lifecycle services) --------


class Commits(Protocol):
    """Exactly once is about commits: whether a destination (or the DLQ) has the batch already, and its commit once
    written. A destination that answers for its own commits (a Delta table's log) is asked; the others have markers."""

    def committed(self, dest: Destination, batch_id: int) -> bool: ...

    def mark(self, dest: Destination, batch_id: int, rows: int) -> None: ...


@dataclass(frozen=True)
class MarkedCommits:
    """A run's ``Commits``: a destination's own answer (a Delta table's log), else its commit marker (``CommitLog``)."""

    log: "CommitLog"
    run_id: str

    def committed(self, dest: Destination, batch_id: int) -> bool:
        answer = dest.committed(batch_id)
        return self.log.get(dest.id, batch_id) is not None if answer is None else answer

    def mark(self, dest: Destination, batch_id: int, rows: int) -> None:
        """The commit marker, for a destination that cannot answer for its own commits."""
        if not dest.answers_commits:
            self.log.mark(dest.id, batch_id, rows=rows, run_id=self.run_id)


class NackWindows(Protocol):
    """The nack window across batches (``window.WindowStore``): the window before a batch, the one an earlier attempt
    of the batch saved (its verdict stands), and the window saved once every write of the batch is committed."""

    def get(self, batch_id: int) -> dict[str, Any] | None: ...

    def before(self, batch_id: int, size: int, threshold: int) -> "NackWindow": ...

    def save(self, batch_id: int, window: "NackWindow", crossed_at: int | None) -> None: ...


class Intents(Protocol):
    """The spec a batch began under, recorded before its first commit (``batch_intents.BatchIntents``): a half-committed
    batch is finished under it."""

    def begin(self, batch_id: int, committed: list[str]) -> None: ...


class Stage(Protocol):
    """Where the pass is (``stage.StageTracker``): a failure is classified and reported where it happened."""

    def at(self, stage: str, component_id: str | None = None, component_type: str | None = None) -> None: ...

    def reset(self) -> None: ...


@dataclass(frozen=True)
class CrashPoints:
    """Fault injection (``faults.crash_point``: tests, the chaos harness) after a write before its commit, and after
    its commit: where a killed driver leaves a batch half done."""

    before_commit: Callable[[str, int], None]
    after_commit: Callable[[str, int], None]


@dataclass(frozen=True)
class PassPorts:
    """Everything a pass reaches outside its plan and Spark: its commits, the nack window, the batch's intent, the stage
    tracker, the crash points and the run report's count of DLQ records that failed to be produced."""

    commits: Commits
    windows: NackWindows
    intents: Intents
    stage: Stage
    crash: CrashPoints
    dlq_produce_failed: Callable[[int], None]  # records of the batch the DLQ failed to take (KIP-298's counter)


@dataclass(frozen=True)
class PlannedBatch:
    """One batch, planned (``runner``): its records with their fates (no Spark job run yet), each destination's branch,
    its number (a DLQ replay's is negative), when its records failed, and the DLQ entries of its lines too long to
    read (``oversized_lines``: no pass sees them)."""

    status: DataFrame
    branches: list[Branch]
    batch_id: int
    at: str
    skipped_lines: tuple = ()


class BatchPass:
    """Runs one batch (``run``) through the run's plan and its ports; one per batch."""

    def __init__(self, plan: RunPlan, ports: PassPorts):
        self.plan = plan
        self.ports = ports
        self.spec = plan.spec

    def _start(self, batch: PlannedBatch) -> None:
        self.status = batch.status
        self.branches = batch.branches
        self.batch_id = batch.batch_id
        self.at = batch.at
        self._skipped_lines = list(batch.skipped_lines)
        self.dlq_entry, self.dlq_carried = self.plan.dlq_entry(batch.status)

    def _in_tasks_per_core(self, status: DataFrame) -> DataFrame:
        """``in_tasks_per_core``, the core count read once per run, over only the columns read above it."""
        return self._crossing(status).coalesce(self.plan.cores)

    def _crossing(self, status: DataFrame) -> DataFrame:
        """``status`` without the columns only read below the coalesce: the record's error, rejected text, fields as
        read and origin go into the DLQ entry and the fate flags there. ``Coalesce`` and the observation are not
        code-generated: every column that crosses them is written into the row of every record (the select list
        built once per run per shape, as SQL text: one JVM round trip at any width)."""
        columns = tuple(status.columns)
        below = self.plan.read_below_only()
        kept = [c for c in columns if c not in below and not c.startswith(C.ORIGINAL)]
        if len(kept) == len(columns):
            return status
        return C.select_expr(status, self.plan.columns.crossing(columns, lambda: C.jvm_strings([C.quote(c) for c in kept])))

    def _over(self, key: tuple, leaf: DataFrame, build: Callable[[DataFrame], DataFrame]) -> DataFrame:
        """``build(leaf)``, analysed once per run where it can be (``run_plan.KeptPlans.frame``); ``key``: which frame."""
        return self.plan.kept.frame(FrameKey(key[0], tuple(key[1:])), leaf, build)

    def _shape_columns(self, shape: PassShape):
        """The observation's inputs and aggregates of a pass of ``shape``, built by the first such pass of the run."""
        def build():
            observed = self._observed_inputs(shape.dlq, window_needed=shape.window)
            return ShapeColumns(inputs=C.JvmColumns(list(observed.values()), list(observed)),
                                 metrics=C.JvmColumns(self._metrics(shape.dlq, window_needed=shape.window)))

        return self.plan.columns.of_shape(shape, build)

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
        if self.plan.rules:
            columns.update(expectations.offender_columns(list(self.plan.rules), list(self.plan.sources)))
        return columns

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
        if self.plan.rules:
            metrics += expectations.metrics(list(self.plan.rules))
        for plan in self.plan.generators:
            metrics.append(F.max(F.when(F.col(C.SOURCE_ID) == F.lit(plan.id), F.col(C.POSITION))).alias(f"g{plan.index}"))
        return metrics

    # -- the pass ---------------------------------------------------------------------------------------

    def prepare(self, batch: PlannedBatch) -> None:
        """Build what the run's first pass builds, on an empty stand-in of a batch while the query starts: its columns,
        the observation's, the writes' and the DLQ's select lists, and the pass's frames analysed (``_over``), so that
        the first batch puts them over its own rows as any later batch does. Nothing runs, nothing is written, nothing
        is observed. A first pass has no DLQ commit and no saved window yet."""
        self._start(batch)
        p = self.plan
        shape = PassShape(True, self._window_enabled(True), len(self.branches))
        columns = self._shape_columns(shape)
        status = self._over(("inputs", *shape), self.status,
                            lambda s: self._in_tasks_per_core(C.with_columns(s, columns.inputs) if columns.inputs else s))
        todo = sorted(zip(p.destinations, self.branches), key=lambda pair: not pair[0].carries_a_pass)  # as run orders them
        kept = reads_again(todo)
        for position, (dest, branch) in enumerate(todo):
            if position == 0 and dest.carries_a_pass:  # its rows over the observed pass (an observation never used)
                observed = observe(status, Observation(f"conduit-plan-ahead-{uuid.uuid4().hex}"), columns.metrics)
                self._over(("rows", dest.id, "observed"), observed, lambda o: rows_for(dest, branch, o, p.fates))
            else:
                self._over(("rows", dest.id, kept), status if kept else self.status,
                           lambda s: rows_for(dest, branch, s if kept else self._in_tasks_per_core(s), p.fates))

    def run(self, batch: PlannedBatch) -> PassResult:
        """The batch's pass, its DLQ and its commits: what is committed already is skipped (exactly once)."""
        self._start(batch)
        p, commits = self.plan, self.ports.commits
        b = self.batch_id
        dlq_needed = not commits.committed(p.dlq, b)
        committed = {d.id for d in p.destinations if commits.committed(d, b)}
        todo = [(d, br) for d, br in zip(p.destinations, self.branches) if d.id not in committed]
        # the pass is carried by a write that runs as one action (a log destination iterates lazily)
        todo.sort(key=lambda pair: not pair[0].carries_a_pass)
        result = PassResult(counts={}, already=[d.id for d in p.destinations if d.id in committed])
        if b >= 0:  # a pipeline's batch (a DLQ replay's is negative): finished under the spec it started with
            self.ports.intents.begin(b, ([] if dlq_needed else [DEAD_LETTER_QUEUE_ID]) + result.already)
        saved_window = self.ports.windows.get(b)  # read once: the window of a batch an earlier attempt finished
        shape = PassShape(dlq_needed, self._window_enabled(saved_window is None), len(self.branches))
        columns = self._shape_columns(shape)
        # the observation's inputs, then the batch in one task per core above the DLQ entry (see in_tasks_per_core)
        status = self._over(("inputs", *shape), self.status,
                            lambda s: self._in_tasks_per_core(C.with_columns(s, columns.inputs) if columns.inputs else s))
        kept = reads_again(todo)
        if kept:
            status = status.persist()  # filled by the pass, read by the writes after it (then dropped)
        try:
            observation = Observation(f"conduit-batch-{b}-{uuid.uuid4().hex}")
            metrics = self._observe(status, observation, todo, columns.metrics, shape)
            self._read_outcome(metrics, result, saved_window, dlq_needed=shape.dlq)
            self._write_and_commit(todo, status, kept, metrics, result)
        finally:
            if kept:
                status.unpersist()
        return result

    def _observe(self, status: DataFrame, observation: Observation, todo: list, metrics_columns, shape: PassShape):
        """The pass: the batch observed, executed by the first destination's write when it can carry it (its commit
        waits for the DLQ's), else by a no-op write; returns what it observed, read in one collect."""
        p, stage = self.plan, self.ports.stage
        observed = observe(status, observation, metrics_columns)
        if todo and todo[0][0].carries_a_pass:
            dest, branch = todo[0]
            stage.at("destination", dest.id, dest.plugin)
            dest.write_in_pass(self._over(("rows", dest.id, "observed"), observed, lambda o: rows_for(dest, branch, o, p.fates)),
                               self.batch_id)
        else:
            stage.reset()
            observed.write.format("noop").mode("overwrite").save()
        origins = shape.dlq and (p.source_lines.needed or p.dlq.wants_origins)
        read = ((*source_lines.KEYS,) if origins else ()) + (("seq",) if shape.window else ())
        if shape.dlq and p.dlq_may_hold_pending_reasons:  # whether a reason is pending (_pending)
            read += ("exception_class",)
        if shape.dlq and self._dlq_on_driver():  # the whole entries, to write the DLQ from the driver
            read += tuple(f for f in ENTRY_FIELDS if f not in read and (f != ORIGINAL or self._originals_with_counts()))
        if shape.dlq:  # what the nacked records are, for the report (lineage's DLQ facet)
            read += tuple(f for f in DLQ_KINDS if f not in read)
        # the DLQ rows stay in the JVM; the origins and the window's read order come with the counts
        return ObservedMetrics(p.spark, observation, heavy=("dlq",), fields=tuple(("dlq", f) for f in read),
                               selects=p.columns.observed_selects, wait_seconds=self.spec.batch_deadline_seconds)

    def _read_outcome(self, metrics: ObservedMetrics, result: PassResult, saved_window, *, dlq_needed: bool) -> None:
        """The batch's counts, expectations and nack window from the observation, then its DLQ written and committed."""
        rules = list(self.plan.rules)
        result.counts = counts = self._counts(metrics)
        result.generator_done = self._generator_done(metrics)
        if rules:
            result.expectations = expectations.counts(rules, metrics)
            result.expectation_failed = expectations.first_failure(rules, metrics, self.batch_id)
        self.ports.stage.at("dlq", DEAD_LETTER_QUEUE_ID, self.plan.dlq.plugin)
        result.crossed, result.replayed, self._window = self._advance_window(metrics, counts, saved_window)
        if counts["nacked"]:
            result.dlq_kinds = self._dlq_kinds(metrics, counts["nacked"])
        if dlq_needed:
            result.dlq_written = self._write_dlq(metrics, counts["nacked"])
        else:
            result.already.append(DEAD_LETTER_QUEUE_ID)

    def _write_and_commit(self, todo: list, status: DataFrame, kept: bool, metrics: ObservedMetrics, result: PassResult) -> None:
        """Each destination written (the first one's write, in the pass, committed) and committed, after the DLQ; the
        nack window saved once every write of the batch is committed."""
        p, ports, b = self.plan, self.ports, self.batch_id
        counts = result.counts
        written_now: dict[str, int] = {}
        for position, (dest, branch) in enumerate(todo):
            ports.stage.at("destination", dest.id, dest.plugin)
            n = counts[f"w{branch.index}"]
            if position == 0 and dest.carries_a_pass:
                dest.commit(b)  # what its write in the pass wrote (a Delta transaction), now that the DLQ has committed
            elif n:
                dest.write(self._over(("rows", dest.id, kept), status if kept else self.status,
                                      lambda s: rows_for(dest, branch, s if kept else self._in_tasks_per_core(s), p.fates)), b)
            ports.crash.before_commit(dest.id, b)
            ports.commits.mark(dest, b, n)  # the batch's rows in the target, whoever wrote them
            earlier = dest.found_from_earlier_attempts()
            if earlier:
                result.earlier_attempt_wrote[dest.id] = earlier
            written_now[dest.id] = n - earlier
            ports.crash.after_commit(dest.id, b)
        result.written = {d.id: written_now.get(d.id, 0) for d in p.destinations}
        ports.stage.reset()
        if self._window is not None:  # saved only once every write of the batch is committed
            ports.windows.save(b, self._window, result.crossed)

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
        p = self.plan
        skipped = self._skipped_lines
        passed = nacked - len(skipped)
        try:
            if passed and not self._write_dlq_from_driver(metrics, passed):
                frame = self._dlq_frame(metrics, passed)
                if skipped:
                    frame = frame.unionByName(self._skipped_lines_frame(metrics), allowMissingColumns=True)
                    if p.dlq.wants_origins and p.dlq.nacked_origins is not None:  # (source id, file, split, position)
                        p.dlq.nacked_origins = [*p.dlq.nacked_origins, *((e[0], e[1], e[3], e[2]) for e in skipped)]
                p.dlq.write(frame, self.batch_id)
            elif skipped and not passed:
                rows = self._skipped_lines_rows()
                types = self._dlq_types(metrics)
                if types is None or not p.dlq.write_rows(DLQ_COLUMNS, types, rows, self.batch_id):
                    p.dlq.write(self._skipped_lines_frame(metrics), self.batch_id)
        except BaseException:
            self.ports.dlq_produce_failed(nacked)
            raise
        self.ports.crash.before_commit(DEAD_LETTER_QUEUE_ID, self.batch_id)
        self.ports.commits.mark(p.dlq, self.batch_id, nacked)
        self.ports.crash.after_commit(DEAD_LETTER_QUEUE_ID, self.batch_id)
        return nacked - (p.dlq.found_from_earlier_attempts() if nacked else 0)  # what this run produced

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
        return self.plan.dlq_on_driver

    def _write_dlq_from_driver(self, metrics: ObservedMetrics, nacked: int) -> bool:
        """Write the DLQ's rows from the entries the observation brought to the driver, without a Spark job, when
        every nacked record is among them and none has a reason still to work out (``PendingReasons``); False
        when it cannot (then ``_dlq_frame`` and a Spark write)."""
        p = self.plan
        if not self._dlq_on_driver() or metrics.size("dlq") != nacked or self._pending(metrics, nacked):
            return False
        types = self._dlq_types(metrics)
        if types is None:
            return False
        lines = p.source_lines.lines_of(p.spark, metrics.fields("dlq", source_lines.KEYS)) if p.source_lines.needed else None
        entries = self._driver_entries(metrics, lines)
        rows = p.pending_reasons.driver_rows(entries, lines, run_id=p.run_id, batch_id=self.batch_id, time_of_error=self.at)
        return p.dlq.write_rows(DLQ_COLUMNS, types, rows + self._skipped_lines_rows(), self.batch_id)

    def _skipped_lines_rows(self) -> list[tuple]:
        p = self.plan
        return p.pending_reasons.driver_rows(self._skipped_lines, None, run_id=p.run_id, batch_id=self.batch_id,
                                             time_of_error=self.at)

    def _skipped_lines_frame(self, metrics: ObservedMetrics) -> DataFrame:
        """The skipped lines' DLQ rows as a local DataFrame, typed as the pass's DLQ rows."""
        types = self._dlq_types(metrics) or tuple(
            BATCH_COLUMN_TYPES.get(name, "long" if name in ("source_position", "source_split_start") else
                                   "integer" if name == "attempt" else "string") for name in DLQ_COLUMNS)
        schema = ", ".join(f"`{name}` {kind}" for name, kind in zip(DLQ_COLUMNS, types, strict=True))
        return self.plan.spark.createDataFrame(self._skipped_lines_rows(), schema=schema)

    def _originals_with_counts(self) -> bool:
        """Whether the entries' record text comes with the counts for the driver's DLQ write: only where a DLQ row's
        ``record`` is it. Without messages it is no row's; a file source's found line replaces it (``source_lines``),
        so there it is read after the pass, and only when a line was not found (its file changed or gone)."""
        return self.spec.dead_letter_queue.include_messages and not self.plan.source_lines.needed

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
        if not self.plan.dlq_may_hold_pending_reasons:
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

        return self.plan.columns.dlq_types(build)

    def _dlq_frame(self, metrics: ObservedMetrics, nacked: int) -> DataFrame:
        p = self.plan
        gathered = metrics.size("dlq") == nacked
        lines = p.source_lines.needed
        ordinal = source_lines.ORDINAL if gathered and lines else None
        if gathered and p.dlq.wants_local_rows and not ordinal:  # a local relation: the DLQ reads it without a Spark job
            entries = metrics.local_elements("dlq")
        elif gathered:  # min_by returns them in read order
            entries = metrics.elements("dlq", ordinal=ordinal)
        else:  # more nacked records than the first pass gathers: a second pass reads just them
            entries = self.status.where(F.col(NACKED)).select(*self.dlq_entry)
        pending = self._pending(metrics, nacked)
        rows = p.pending_reasons.rows(entries, run_id=p.run_id, batch_id=self.batch_id, time_of_error=self.at, pending=pending,
                                      keep=((ordinal,) if ordinal else ()) + self.dlq_carried)
        if p.dlq.wants_origins:  # read with the counts: no Spark job (a Kafka DLQ: how many, and a replay's read-back)
            p.dlq.nacked_origins = self._origins(metrics, entries, gathered)
        if not lines:
            return rows
        return p.source_lines.apply(p.spark, rows, self._origins(metrics, entries, gathered), ordinal=ordinal)

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
        window = self.ports.windows.before(self.batch_id, dlq.window_size, dlq.window_nack_threshold)
        indices: list[int] = []
        skipped = len(self._skipped_lines)  # after the pass's records in read order
        if counts["nacked"] and window.size:
            passed = counts["read"] - skipped
            indices = self._nacked_indices(metrics, counts["nacked"] - skipped) + list(range(passed, counts["read"]))
        crossed = window.apply_batch(counts["read"], indices)
        return crossed, False, window

    def _generator_done(self, metrics: ObservedMetrics) -> bool:
        plans = self.plan.generators
        if not plans or self.spec.mode != "available-now":
            return False
        return all(metrics.get(f"g{p.index}") is not None and metrics[f"g{p.index}"] >= p.records - 1 for p in plans)
