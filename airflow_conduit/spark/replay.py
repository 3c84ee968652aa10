"""DLQ replay: run the payloads of dead-lettered records through the pipeline's current spec, after a fix.

A replay is one batch with its own, negative batch id (replay ``k`` is batch
``-k``: never one of the pipeline's own batch ids, which start at 0), run by
the pipeline's own batch pass, so the same per-destination commit protocol
applies: destinations and the DLQ are written once each, commit markers in
``STATE_DIR/replays/<k>/commits``.

1. The replay's records are chosen first (DLQ records with a payload, that no
   earlier replay took, matching the filters) and saved with their payloads in
   ``STATE_DIR/replays/<k>/plan.json`` before anything is written. That plan
   is the mark: a later replay never takes them again. A replay that was
   interrupted (killed) is resumed by the next replay command with the same
   records and batch id: what was committed is not written again.
2. Each payload is parsed with its source's *current* schema (as the
   generator source parses its records), then goes through the source's,
   the pipeline's and the destinations' processors (expectations included).
3. Records that now pass are written to the destinations; records that still
   fail go to the DLQ again, with their new error, their original origin
   (source, file, position) and ``replay_count`` one more than before.

Payloads are the records as they arrived (the DLQ's ``record``: a file
source's line, byte for byte), parsed as their source parses them (JSON, or
CSV for a CSV source). A line that is not UTF-8 is not replayable (its
payload is its bytes, base64-encoded) and is left in the DLQ.

A replay settles: a record is taken again only when the spec that decides
its fate (``pipeline.fingerprint``) changed since it failed, or when the
replay is forced; a replay that cannot change an outcome writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.pipeline.fingerprint import FINGERPRINTS_FILE, spec_fingerprints
from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID, PipelineSpec
from airflow_conduit.pipeline.replay_request import ReplayFilter  # noqa: F401 - the filters live with the request (pure Python)
from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic
from airflow_conduit.runs.status import RunStatus
from airflow_conduit.spark import columns as C
from airflow_conduit.spark import expectations
from airflow_conduit.spark.destinations import Destination, FileDestination, JdbcDestination, make_destination
from airflow_conduit.spark.fates import FILTERED_ALL, NACKED
from airflow_conduit.spark.parsing import INVALID_UTF8
from airflow_conduit.spark.processors import ProcessorContext

log = logging.getLogger(__name__)

REPLAYS = "replays"
REPLAY_COUNT = "replay_count"  # DLQ column: how many replays the record went through (NULL: none)


@dataclass
class ReplayResult:
    replay: int | None  # None: nothing to replay (or a dry run)
    batch_id: int | None
    selected: int = 0
    written: dict[str, int] = field(default_factory=dict)  # per destination
    passed: int = 0  # records written to at least one destination
    filtered: int = 0
    still_failing: int = 0  # back in the DLQ
    skipped: dict[str, int] = field(default_factory=dict)  # DLQ records not taken, by reason
    errors: dict[str, int] = field(default_factory=dict)  # dry run: what would still fail, grouped by error
    resumed: bool = False
    dry_run: bool = False
    batch: dict[str, Any] | None = None  # the replay batch's run report entry (counts, expectation counts)
    counters: dict[str, Any] = field(default_factory=dict)  # the replay's KIP-298 counters
    expectations: dict[str, Any] = field(default_factory=dict)  # per-rule counts (processor -> rule -> counts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def identity(row: dict[str, Any]) -> str:
    """A DLQ record's identity: its DLQ batch and its origin (the same record re-run after a crash has the same)."""
    return json.dumps([row.get("batch_id"), row.get("source_id"), row.get("source_file"), row.get("source_split_start"),
                       row.get("source_position")])


def _replays_root(state_dir: Path) -> Path:
    return state_dir / REPLAYS


def _plans(state_dir: Path) -> dict[int, dict[str, Any]]:
    root = _replays_root(state_dir)
    out: dict[int, dict[str, Any]] = {}
    if root.is_dir():
        for child in root.iterdir():
            if child.name.isdigit():
                plan = read_json(child / "plan.json")
                if plan is not None:
                    out[int(child.name)] = plan
    return out


# -- reading the DLQ -------------------------------------------------------------------------------------


def read_kafka_dlq(spark: SparkSession, dlq: Destination) -> list[dict[str, Any]]:
    """Every record of a Kafka DLQ topic (spark/kafka_sink.py says which range and how)."""
    from airflow_conduit.spark import kafka_sink

    return kafka_sink.read_kafka_dlq(spark, dlq)


def read_dlq(spark: SparkSession, dlq: Destination) -> list[dict[str, Any]]:
    """Every record of a file, JDBC or Kafka DLQ, as dicts (the DLQ's columns)."""
    if isinstance(dlq, FileDestination):
        root = Path(str(dlq.settings["path"]).removeprefix("file:"))
        if not root.exists() or not any(root.rglob("part-*")):
            return []
        fmt = dlq.settings.get("format", "json")
        # every row holds its batch_id: no partition discovery from the batch_id=<n> folders, whose column
        # would clash with it (Spark logged COLUMN_ALREADY_EXISTS at every replay)
        reader = spark.read.format(fmt).option("recursiveFileLookup", "true")
        if fmt == "csv":
            reader = reader.option("header", str(bool(dlq.settings.get("header", True))).lower())
        if fmt == "json":  # a DLQ record may hold a value over the reader's default limit (RecordTooLargeError)
            reader = reader.option("maxStringLen", str(2**31 - 1))
        frame = reader.load(str(dlq.settings["path"]))
    elif isinstance(dlq, JdbcDestination):
        try:
            frame = spark.read.jdbc(str(dlq.settings["url"]), str(dlq.settings["table"]), properties=dlq._properties())
        except Exception as exc:  # noqa: BLE001 - no table yet: nothing was dead-lettered
            if "does not exist" in str(exc):
                return []
            raise
    elif dlq.plugin == "kafka":
        return read_kafka_dlq(spark, dlq)
    elif hasattr(dlq, "read_all"):  # a Delta table (delta_sink)
        frame = dlq.read_all()
        if frame is None:
            return []
    else:
        raise ValueError(f"a {dlq.plugin!r} dead letter queue keeps no records to replay: use a file, jdbc, kafka or delta DLQ")
    return [row.asDict(recursive=True) for row in frame.collect()]


def _replayable(row: dict[str, Any], spec: PipelineSpec) -> str | None:
    """Why the record cannot be replayed (None: it can)."""
    if row.get("record") is None:
        return "no payload (include-messages was false)"
    if not any(source.id == row.get("source_id") for source in spec.sources):
        return "its source is no longer in the spec"
    if row.get("exception_class") == INVALID_UTF8:
        return "a line that is not UTF-8 (its payload is its bytes, base64-encoded)"
    return None


UNCHANGED = "spec unchanged since it failed"


def select(
    rows: list[dict[str, Any]], spec: PipelineSpec, taken: set[str], filters: ReplayFilter,
    failed_under: Callable[[dict[str, Any]], str | None] = lambda row: None, *, force: bool = False,
) -> tuple[list[dict], dict[str, int]]:
    """The DLQ records a new replay takes, and how many were left out, by reason.

    ``failed_under(row)``: the fingerprint (``pipeline.fingerprint``) of the spec the record failed under, None
    when unknown. A record whose source's fingerprint is still that one is not taken (the replay would fail it the
    same way) unless ``force``.
    """
    current = spec_fingerprints(spec)
    chosen: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    for row in rows:
        if identity(row) in taken:
            reason = "already replayed"
        elif not filters.matches(row):
            reason = "not matching the filters"
        else:
            reason = _replayable(row, spec)
        if reason is None and not force and failed_under(row) == current.get(row.get("source_id")):
            reason = UNCHANGED
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            chosen.append(row)
    return chosen, skipped


class FailedUnder:
    """The fingerprint of the spec a DLQ record failed under: a replay's from its plan (batch ``-k``), a pipeline
    run's from ``runs/<run-id>/spec-fingerprints.json`` (written by the runner); None when unknown (kept by
    a version that wrote none), so such a record is taken."""

    def __init__(self, state_dir: Path, plans: dict[int, dict[str, Any]]):
        self.state_dir = state_dir
        self.plans = plans
        self._runs: dict[str, dict[str, str]] = {}

    def __call__(self, row: dict[str, Any]) -> str | None:
        batch, source = row.get("batch_id"), row.get("source_id")
        if batch is not None and int(batch) < 0:
            return (self.plans.get(-int(batch)) or {}).get("fingerprints", {}).get(source)
        run_id = str(row.get("run_id") or "")
        if run_id not in self._runs:
            saved = read_json(self.state_dir / "runs" / run_id / FINGERPRINTS_FILE) if run_id else None
            self._runs[run_id] = saved or {}
        return self._runs[run_id].get(source)


# -- running a replay ------------------------------------------------------------------------------------


def _replay_spec(spec: PipelineSpec) -> PipelineSpec:
    """The spec a replay runs: the same, except the nack window never stops it (failures are expected)."""
    dlq = dataclasses.replace(spec.dead_letter_queue, window_size=0)
    return dataclasses.replace(spec, dead_letter_queue=dlq)


def _batch_frame(spark: SparkSession, records: list[dict[str, Any]], plans) -> DataFrame:
    """The replay's input shaped like the pipeline's unioned stream: the payload as RAW, and as position the
    record's index in the replay (``_ReplayDlq`` puts its original origin back on a DLQ row from it)."""
    index_of = {p.id: p.index for p in plans}
    schema = T.StructType([
        T.StructField(C.SOURCE_ID, T.StringType()),
        T.StructField(C.SOURCE_INDEX, T.IntegerType()),
        T.StructField(C.POSITION, T.LongType()),
        T.StructField(C.RAW, T.StringType()),
    ])
    rows = [(r["source_id"], index_of[r["source_id"]], i, r["record"]) for i, r in enumerate(records)]
    frame = spark.createDataFrame(rows, schema=schema).coalesce(1)  # one partition: read order = the DLQ's order
    for name, value, kind in (("FILE", None, "string"), ("SPLIT", 0, "long")):  # origin columns, where the stream has them
        if hasattr(C, name):
            frame = frame.withColumn(getattr(C, name), F.lit(value).cast(kind))
    return frame


ORIGIN = ("source_file", "source_split_start", "source_position")


class _ReplayDlq(Destination):
    """The DLQ as a replay writes it: each record with its original origin and ``replay_count`` one more."""

    def __init__(self, inner: Destination, records: list[dict[str, Any]]):
        super().__init__(inner.spark, inner.id, inner.plugin, {})
        self.inner = inner
        self.settings = inner.settings
        self.answers_commits = inner.answers_commits
        self.origins = [
            (r["source_id"], i, r.get("source_file"), r.get("source_split_start"), r.get("source_position"),
             int(r.get(REPLAY_COUNT) or 0) + 1)
            for i, r in enumerate(records)
        ]

    def write(self, df: DataFrame, batch_id: int) -> None:
        keys = T.StructType([
            T.StructField("k_source", T.StringType()),
            T.StructField("k_index", T.LongType()),
            T.StructField("k_source_file", T.StringType()),
            T.StructField("k_source_split_start", T.LongType()),
            T.StructField("k_source_position", T.LongType()),
            T.StructField(REPLAY_COUNT, T.IntegerType()),
        ])
        mapping = F.broadcast(self.spark.createDataFrame(self.origins, schema=keys))
        on = (df["source_id"] == mapping["k_source"]) & (df["source_position"] == mapping["k_index"])
        joined = df.join(mapping, on, "left")
        columns = [F.col(f"k_{c}").alias(c) if c in ORIGIN else df[c] for c in df.columns]
        out = joined.select(*columns, F.col(REPLAY_COUNT))
        if isinstance(self.inner, JdbcDestination):
            _add_replay_count_column(self.inner)
        self.inner.write(out, batch_id)

    def committed(self, batch_id: int) -> bool | None:
        return self.inner.committed(batch_id)

    def close(self) -> None:
        self.inner.close()


def _replay_scope(spec: PipelineSpec, number: int, plan: dict[str, Any]) -> str:
    """A replay's identity in a target's own transaction log (Delta): its number and when its plan was made,
    so a replay numbered again after its state was deleted is not taken for the earlier one."""
    return f"{spec.id}/replay-{number}-{plan.get('started_at')}"


def _add_replay_count_column(dlq: JdbcDestination) -> None:
    """A DLQ table created before its first replay has no replay_count column yet (PostgreSQL syntax)."""
    from airflow_conduit.spark.destinations import _quote_ident

    conn = dlq.connect()
    try:
        stmt = conn.createStatement()
        table = str(dlq.settings["table"])
        exists = stmt.executeQuery(f"SELECT to_regclass('{table.replace(chr(39), chr(39) * 2)}') IS NOT NULL")
        if exists.next() and exists.getBoolean(1):
            stmt.executeUpdate(f"ALTER TABLE {_quote_ident(table)} ADD COLUMN IF NOT EXISTS {REPLAY_COUNT} INTEGER")
    finally:
        conn.close()


def replay(
    spark: SparkSession,
    spec: PipelineSpec,
    *,
    state_dir: str | Path,
    filters: ReplayFilter = ReplayFilter(),
    dry_run: bool = False,
    run_id: str | None = None,
    faults: dict[str, Any] | None = None,
    crash: Callable[[], None] | None = None,
    force: bool = False,
) -> ReplayResult:
    """Replay the pipeline's DLQ records (see the module docstring); a dry run writes nothing.

    ``force``: also take records whose source's spec is unchanged since they failed (see ``select``).
    """
    from airflow_conduit.spark.runner import PipelineRunner, files_read_one_per_partition

    state_dir = Path(state_dir)
    plans = _plans(state_dir)
    pending = sorted(k for k, p in plans.items() if p.get("status") != "done")
    replay_spec = _replay_spec(spec)
    resumed = bool(pending) and not dry_run
    if resumed:
        number = pending[0]
        plan = plans[number]
        records, skipped = plan["records"], {}
        log.info("resuming replay %s (batch %s): it was interrupted; the filters given now are not used", number, -number)
    else:
        number = max(plans, default=0) + 1
        taken = {i for p in plans.values() for i in p.get("taken", [])}
        dlq = make_destination(spark, DEAD_LETTER_QUEUE_ID, spec.dead_letter_queue.plugin, spec.dead_letter_queue.settings)
        records, skipped = select(read_dlq(spark, dlq), spec, taken, filters, FailedUnder(state_dir, plans), force=force)
    batch_id = -number
    result = ReplayResult(None if dry_run else number, None if dry_run else batch_id, selected=len(records),
                          skipped=skipped, resumed=resumed, dry_run=dry_run)
    if not records:
        result.replay = result.batch_id = None
        if skipped.get(UNCHANGED):
            log.info("%s DLQ record(s) not replayed: their spec is unchanged since they failed, a replay would fail "
                     "them the same way (force the replay to take them anyway)", skipped[UNCHANGED])
        return result
    if not dry_run and not resumed:
        plan = {"replay": number, "batch_id": batch_id, "status": "running", "started_at": utc_now_iso(),
                "filters": dataclasses.asdict(filters), "force": force, "fingerprints": spec_fingerprints(spec),
                "taken": [identity(r) for r in records],
                "records": [{k: r.get(k) for k in ("batch_id", "source_id", "source_file", "source_split_start",
                                                   "source_position", "record", REPLAY_COUNT)} for r in records]}
        write_json_atomic(state_dir / REPLAYS / str(number) / "plan.json", plan)  # the mark, before any write

    folder = state_dir / REPLAYS / (str(number) if not dry_run else "dry-run")
    faults = _replay_faults(faults)
    runner = PipelineRunner(spark, replay_spec, state_dir=folder, run_id=run_id or f"replay-{number}", faults=faults,
                            crash=crash)
    runner.owner_dir = None if dry_run else state_dir  # the pipeline's state dir owns them (runs.output_owner); another
    runner.adopt_unmarked = True  # pipeline's marker refuses the replay, data with no marker is this DLQ's own
    if not dry_run:
        runner.txn_scope = _replay_scope(spec, number, plan)
    with files_read_one_per_partition(spark):
        try:
            runner._setup()
            runner.plans = [dataclasses.replace(p, parser="generator", records=None, rows_per_batch=None) for p in runner.plans]
            runner.dlq = _ReplayDlq(runner.dlq, records)
            batch = _batch_frame(spark, records, runner.plans)
            if dry_run:
                _dry_run(runner, batch, result)
                return result
            runner.report.status = RunStatus.RUNNING
            runner._process_batch(batch, batch_id)
        finally:
            runner.close_destinations()
    entry = runner.report.batches[-1]
    result.batch, result.counters = entry, dict(runner.report.counters)
    result.expectations = dict(entry.get("expectations") or {})
    result.written = dict(entry["written"])
    for dest in runner.destinations:  # a destination none of the records reached gets nothing, not an empty batch
        if not result.written.get(dest.id):
            dest.discard_empty_batch(batch_id)
    result.still_failing = int(entry["dlq"])
    result.filtered = int(entry["filtered"])
    result.passed = result.selected - result.still_failing - result.filtered
    runner.report.status = RunStatus.SUCCEEDED
    runner.report.ended_at = utc_now_iso()
    runner._save_report()
    plan = read_json(state_dir / REPLAYS / str(number) / "plan.json")
    plan.update(status="done", ended_at=utc_now_iso(), result={k: v for k, v in result.to_dict().items() if k != "errors"})
    write_json_atomic(state_dir / REPLAYS / str(number) / "plan.json", plan)
    return result


def _replay_faults(faults: dict[str, Any] | None) -> dict[str, Any] | None:
    """--faults of a replay name the replay number as the batch (``"batch": 1``: replay 1, batch -1), at every crash
    point (``crash_after_destination``, ``crash_before_commit``)."""
    from airflow_conduit.spark.faults import CRASH_POINTS

    faults = dict(faults or {})
    for key in CRASH_POINTS:
        crash = faults.get(key)
        if crash:
            faults[key] = {**crash, "batch": -abs(int(crash["batch"]))}
    return faults or None


def _rule_verdicts(rules) -> dict[str, Any]:
    """Per rule, the conditions counted as passed / failed (named as ``expectations.counts`` reads them)."""
    out: dict[str, Any] = {}
    for rule in rules:
        out[f"x{rule.index}p"] = ~F.col(rule.column)
        out[f"x{rule.index}f"] = F.col(rule.column)
    return out


def _dry_run(runner, batch: DataFrame, result: ReplayResult) -> None:
    """What the replay would do, grouped by error, in one Spark job; nothing is written."""
    ctx = ProcessorContext(spec=runner.spec)
    try:
        status, _ = runner._plan_batch(batch, ctx)
        error = F.when(F.col(NACKED), F.concat_ws(": ", F.col(C.ERROR)["component_id"], F.col(C.ERROR)["message"]))
        fate = (F.when(F.col(NACKED), F.lit("fail")).when(F.col(FILTERED_ALL), F.lit("filtered")).otherwise(F.lit("pass")))
        verdicts = [F.count_if(c).alias(name) for name, c in _rule_verdicts(runner.rules).items()]
        rows = status.groupBy(fate.alias("fate"), error.alias("error")).agg(F.count(F.lit(1)).alias("count"), *verdicts).collect()
    finally:
        ctx.release()
    if runner.rules:  # per rule, what would pass / fail it (warn rules included), from the same job
        observed = {name: sum(row[name] for row in rows) for name in _rule_verdicts(runner.rules)}
        result.expectations = expectations.counts(runner.rules, observed)
    for row in rows:
        if row["fate"] == "pass":
            result.passed += row["count"]
        elif row["fate"] == "filtered":
            result.filtered += row["count"]
        else:
            result.still_failing += row["count"]
            result.errors[row["error"]] = result.errors.get(row["error"], 0) + row["count"]
