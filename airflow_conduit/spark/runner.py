"""The pipeline as one Structured Streaming query with one foreachBatch.

Topology (Conduit's): sources, each with its processors -> fan-in (union) ->
pipeline processors -> fan-out to every destination -> destination
processors -> destinations. Inside a batch:

1. each source's rows are parsed (bad lines become per-record errors) and go
   through that source's processors; the sources are unioned;
2. pipeline processors, then each destination's processors on its own branch;
3. every record gets exactly one fate, with non-null flags: nacked (an error
   anywhere, also in one destination's processors: it goes to the DLQ and to
   no destination), filtered (by a pipeline processor, or by the processors
   of every destination), or written (to every destination that did not
   filter it);
4. the DLQ nack window is advanced over the batch's records in source order;
5. the DLQ, then each destination, is written unless its commit marker for
   this batch exists (exactly once per destination across restarts);
6. the window and the run report are saved; if the window's threshold was
   exceeded the run stops with a fatal error (2300), after the batch's nacked
   records are safely in the DLQ (nothing is lost).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID, PipelineSpec
from airflow_conduit.pipeline.report import (
    STATUS_RUNNING,
    STATUS_STARTING,
    STATUS_SUCCEEDED,
    RunReport,
    report_path,
    utc_now_iso,
)
from airflow_conduit.pipeline.secrets import secret_values
from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import NackThresholdExceeded, StructuredError
from airflow_conduit.spark import columns as C
from airflow_conduit.spark import faults as faults_mod
from airflow_conduit.spark.commits import CommitLog
from airflow_conduit.spark.destinations import Destination, make_destination
from airflow_conduit.spark.dlq import dlq_records
from airflow_conduit.spark.processors import ProcessorContext, apply_processors, materialize
from airflow_conduit.spark.session import ensure_driver_class
from airflow_conduit.spark.sources import SourcePlan, parse_batch, plan_source, read_stream
from airflow_conduit.spark.window import WindowStore

log = logging.getLogger(__name__)

QUERY_NAME = "pipeline"  # checkpoint folder: STATE_DIR/checkpoints/pipeline
STOP_WAIT_SECONDS = 120.0


class StopRequested(Exception):
    """Raised in foreachBatch to end the query between batches (graceful stop)."""


class RunFailed(Exception):
    """The run failed; ``error`` is what the report and the ERROR line say."""

    def __init__(self, error: StructuredError):
        super().__init__(error.message)
        self.error = error


def classify(exc: BaseException, stage: str | None, component_id: str | None, component_type: str | None) -> StructuredError:
    """Classify with the recovery engine's rules, so the job and the engine agree on the code."""
    from airflow_conduit.recovery.classify import structured_error_from_exception

    return structured_error_from_exception(exc, stage=stage, component_id=component_id, component_type=component_type)


class PipelineRunner:
    def __init__(
        self,
        spark: SparkSession,
        spec: PipelineSpec,
        *,
        state_dir: str | os.PathLike[str],
        run_id: str,
        faults: dict[str, Any] | None = None,
        crash: Callable[[], None] | None = None,
    ):
        self.spark = spark
        self.spec = spec
        self.state_dir = Path(state_dir)
        self.run_id = run_id
        self.faults = faults or {}
        self.crash_hook = faults_mod.crash_point(self.state_dir, self.faults, crash)
        self.report = RunReport(pipeline_id=spec.id, run_id=run_id, status=STATUS_STARTING, started_at=utc_now_iso())
        self.report_file = report_path(self.state_dir, run_id)
        self.commits = CommitLog(self.state_dir)
        self.windows = WindowStore(self.state_dir)
        self.stop_requested = threading.Event()
        self.stop_reason: str | None = None
        self.generator_done = False
        self.failure: StructuredError | None = None
        self.crashed = False  # a SimulatedCrash stopped the query (tests)
        self._ctx: ProcessorContext | None = None
        self._where: tuple[str, str | None, str | None] = ("runner", None, None)
        self.plans: list[SourcePlan] = []
        self.destinations: list[Destination] = []
        self.dlq: Destination | None = None

    # -- setup ---------------------------------------------------------------------------------------

    def _setup(self) -> None:
        secrets = secret_values(self.spec)
        for index, source in enumerate(self.spec.sources):
            self._where = ("source", source.id, source.plugin)
            self.plans.append(
                plan_source(self.spark, source, index, trigger_seconds=self.spec.trigger_interval_seconds, mode=self.spec.mode)
            )
        for dest in self.spec.destinations:
            self.destinations.append(make_destination(self.spark, dest.id, dest.plugin, dest.settings, secrets))
        dlq = self.spec.dead_letter_queue
        self.dlq = make_destination(self.spark, DEAD_LETTER_QUEUE_ID, dlq.plugin, dlq.settings, secrets)
        for dest in [*self.destinations, self.dlq]:
            if dest.plugin == "jdbc":
                self._where = ("destination", dest.id, dest.plugin)
                ensure_driver_class(self.spark, str(dest.settings.get("driver", "org.postgresql.Driver")))
        self._where = ("runner", None, None)

    def _has_generator(self) -> bool:
        return any(p.spec.plugin == "generator" for p in self.plans)

    def _start_query(self):
        streams = [read_stream(self.spark, plan) for plan in self.plans]
        union = functools.reduce(lambda a, b: a.unionByName(b), streams)
        checkpoint = self.state_dir / "checkpoints" / QUERY_NAME
        writer = union.writeStream.foreachBatch(self._foreach_batch).option("checkpointLocation", str(checkpoint))
        if self.spec.mode == "continuous":
            writer = writer.trigger(processingTime=f"{max(self.spec.trigger_interval_seconds, 0.0)} seconds")
        elif self._has_generator():
            writer = writer.trigger(processingTime="0 seconds")  # rate sources cannot run available-now
        else:
            writer = writer.trigger(availableNow=True)
        return writer.start()

    # -- the batch -----------------------------------------------------------------------------------

    def _foreach_batch(self, batch: DataFrame, batch_id: int) -> None:
        if self._stopping():
            # Graceful stop: the batch that was running has finished; this one is not started (not
            # committed either), so the next run processes it. Raising is how a query ends from here.
            raise StopRequested(f"stop requested before batch {batch_id}; it runs on the next start")
        try:
            self._process_batch(batch, batch_id)
        except faults_mod.SimulatedCrash as crash:
            self.crashed = True  # run() turns this back into SimulatedCrash; py4j only handles Exceptions
            raise RuntimeError("simulated driver crash") from crash
        except BaseException as exc:  # noqa: BLE001 - classified here (Python context is lost once in the JVM)
            if self.failure is None and not self._stopping():
                stage, component_id, component_type = self._where
                if self._ctx is not None and self._ctx.where is not None:  # inside a processor
                    stage, component_id, component_type = self._ctx.where
                self.failure = classify(exc, stage, component_id, component_type)
            raise

    def _process_batch(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        batch = materialize(batch)  # the source is read once; the emptiness check below reads the checkpoint
        if batch.isEmpty():  # nothing to write anywhere (e.g. a generator that is done)
            self._record_batch(batch_id, {"read": 0, "nacked": 0, "filtered": 0}, {d.id: 0 for d in self.destinations})
            return
        if self._has_generator() and self.spec.mode == "available-now":
            self._check_generator_done(batch)
        ctx = self._ctx = ProcessorContext(spec=self.spec)
        main, branches = self._process_records(batch, ctx)
        self._where = ("runner", None, None)
        status = materialize(self._outcomes(main, branches))
        counts = self._counts(status)

        self._where = ("dlq", DEAD_LETTER_QUEUE_ID, self.dlq.plugin)
        crossed, replayed, window = self._advance_window(status, batch_id, counts["read"], counts["nacked"])
        at = utc_now_iso()
        dlq_written = self._write_dlq(status, batch_id, counts["nacked"], at)  # first: nacked records are safe
        written, already = self._write_destinations(status, branches, batch_id, counts)
        self._where = ("runner", None, None)
        if window is not None:  # saved only once every write of the batch is committed
            self.windows.save(batch_id, window, crossed)

        if dlq_written is None:
            already.append(DEAD_LETTER_QUEUE_ID)
        self._record_batch(batch_id, counts, written, at=at, already=already, replayed=replayed,
                           retries=ctx.retries, dlq_written=dlq_written or 0)
        log.info(
            "batch %s: read %s, written %s, filtered %s, dlq %s in %.1fs%s", batch_id, counts["read"], written,
            counts["filtered"], counts["nacked"], time.monotonic() - started,
            f" (already committed: {already})" if already else "",
        )
        if crossed is not None and not replayed:
            self._where = ("dlq", DEAD_LETTER_QUEUE_ID, self.dlq.plugin)
            raise self._threshold_error(crossed, batch_id)

    def _process_records(self, batch: DataFrame, ctx: ProcessorContext) -> tuple[DataFrame, list[DataFrame]]:
        """Parse each source's rows, run source, pipeline and destination processors: (main, one branch per destination)."""
        parts = []
        for plan in self.plans:
            self._where = ("source", plan.id, plan.spec.plugin)
            part = materialize(parse_batch(batch, plan))
            parts.append(apply_processors(part, plan.spec.processors, ctx))
        records = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
        records = apply_processors(records, self.spec.processors, ctx)
        self._where = ("runner", None, None)
        main = materialize(records.withColumn(C.ROW_ID, F.monotonically_increasing_id()))
        branches = [apply_processors(main, dest.processors, ctx) if dest.processors else main for dest in self.spec.destinations]
        return main, branches

    def _write_dlq(self, status: DataFrame, batch_id: int, nacked: int, at: str) -> int | None:
        """Write the batch's nacked records to the DLQ unless committed before; rows written, None when skipped."""
        if self.commits.get(DEAD_LETTER_QUEUE_ID, batch_id) is not None:
            return None
        self._where = ("dlq", DEAD_LETTER_QUEUE_ID, self.dlq.plugin)
        rows = dlq_records(status.where(F.col("__ac_nacked")), self.spec, run_id=self.run_id, batch_id=batch_id, time_of_error=at)
        try:
            if nacked:
                self.dlq.write(rows, batch_id)
        except BaseException:
            self.report.add_counters(deadletterqueue_produce_failures=nacked)
            raise
        self.commits.mark(DEAD_LETTER_QUEUE_ID, batch_id, rows=nacked, run_id=self.run_id)
        self.crash_hook(DEAD_LETTER_QUEUE_ID, batch_id)
        return nacked

    def _write_destinations(
        self, status: DataFrame, branches: list[DataFrame], batch_id: int, counts: dict[str, int]
    ) -> tuple[dict[str, int], list[str]]:
        """Write every destination that has not committed this batch: (rows written per destination, skipped ids)."""
        written: dict[str, int] = {}
        already: list[str] = []
        for index, (dest, branch) in enumerate(zip(self.destinations, branches)):
            if self.commits.get(dest.id, batch_id) is not None:
                written[dest.id] = 0
                already.append(dest.id)
                continue
            self._where = ("destination", dest.id, dest.plugin)
            n = counts[f"w{index}"]
            if n:
                dest.write(self._rows_for(branch, status, index), batch_id)
            self.commits.mark(dest.id, batch_id, rows=n, run_id=self.run_id)
            written[dest.id] = n
            self.crash_hook(dest.id, batch_id)
        return written, already

    def _record_batch(
        self,
        batch_id: int,
        counts: dict[str, int],
        written: dict[str, int],
        *,
        at: str | None = None,
        already: list[str] | None = None,
        replayed: bool = False,
        retries: int = 0,
        dlq_written: int = 0,
    ) -> None:
        """Add the batch to the run report (counts, KIP-298 counters) and rewrite it."""
        at = at or utc_now_iso()
        nacked = counts["nacked"]
        self.report.add_batch(batch_id, read=counts["read"], filtered=counts["filtered"], dlq=nacked, written=written, at=at)
        entry = self.report.batches[-1]
        if already:
            entry["already_committed"] = already
        if replayed:
            entry["replayed"] = True
        self.report.add_counters(
            total_record_failures=nacked,
            total_records_skipped=nacked,
            total_retries=retries,
            deadletterqueue_records_produced=dlq_written,
        )
        if nacked:
            self.report.counters["last-failure-timestamp"] = at
        self.report.status = STATUS_RUNNING
        self._save_report()

    def _threshold_error(self, crossed: int, batch_id: int) -> NackThresholdExceeded:
        dlq = self.spec.dead_letter_queue
        size = 1 if dlq.window_nack_threshold == 0 else dlq.window_size
        return NackThresholdExceeded(
            f"nack threshold exceeded: more than {dlq.window_nack_threshold} nacked record(s) in the last {size} "
            f"(window-size {dlq.window_size}, window-nack-threshold {dlq.window_nack_threshold}) at record "
            f"{crossed + 1} of batch {batch_id}; the batch's nacked records are in the DLQ"
        )

    def _stopping(self) -> bool:
        return self.stop_requested.is_set() or self.generator_done

    def _check_generator_done(self, batch: DataFrame) -> None:
        conds = [
            (F.col(C.SOURCE_ID) == F.lit(p.id)) & (F.col(C.POSITION) >= F.lit(p.records - 1))
            for p in self.plans
            if p.records is not None
        ]
        done_flags = [batch.where(cond).limit(1).count() > 0 for cond in conds]
        if done_flags and all(done_flags):
            self.generator_done = True

    def _outcomes(self, main: DataFrame, branches: list[DataFrame]) -> DataFrame:
        """One row per record with its fate: __ac_nacked, __ac_filtered_all, __ac_w<i> (write to destination i)."""
        base = main
        errors = [F.col(C.ERROR)]
        filtered_flags: list[Any] = []
        for index, (dest, branch) in enumerate(zip(self.spec.destinations, branches)):
            if dest.processors:
                side = branch.select(
                    F.col(C.ROW_ID), F.col(C.ERROR).alias(f"__ac_e{index}"), F.col(C.FILTERED).alias(f"__ac_f{index}")
                )
                base = base.join(side, on=C.ROW_ID, how="left")
                errors.append(F.col(f"__ac_e{index}"))
                filtered_flags.append(F.coalesce(F.col(f"__ac_f{index}"), F.lit(False)))
            else:
                filtered_flags.append(F.col(C.FILTERED))
        nack_error = F.coalesce(*errors) if len(errors) > 1 else errors[0]
        base = base.withColumn(C.ERROR, nack_error).withColumn("__ac_nacked", F.col(C.ERROR).isNotNull())
        all_filtered = functools.reduce(lambda a, b: a & b, filtered_flags) if filtered_flags else F.col(C.FILTERED)
        base = base.withColumn("__ac_filtered_all", ~F.col("__ac_nacked") & (F.col(C.FILTERED) | all_filtered))
        for index, flag in enumerate(filtered_flags):
            base = base.withColumn(f"__ac_w{index}", ~F.col("__ac_nacked") & ~flag)
        return base

    def _counts(self, status: DataFrame) -> dict[str, int]:
        as_int = lambda c: F.sum(F.col(c).cast("long"))  # noqa: E731
        aggs = [F.count(F.lit(1)).alias("read"), as_int("__ac_nacked").alias("nacked"), as_int("__ac_filtered_all").alias("filtered")]
        aggs += [as_int(f"__ac_w{i}").alias(f"w{i}") for i in range(len(self.destinations))]
        row = status.agg(*aggs).first()
        return {k: int(row[k] or 0) for k in row.asDict()}

    def _rows_for(self, branch: DataFrame, status: DataFrame, index: int) -> DataFrame:
        """The records destination ``index`` writes, in source order, with only the record's own fields."""
        if self.spec.destinations[index].processors:
            chosen = status.where(F.col(f"__ac_w{index}")).select(C.ROW_ID)
            rows = branch.join(chosen, on=C.ROW_ID, how="left_semi")
        else:
            rows = status.where(F.col(f"__ac_w{index}"))
        return rows.orderBy(*C.ORDER_COLUMNS).select(*[F.col(C.quote(c)) for c in C.record_columns(branch)])

    def _advance_window(self, status: DataFrame, batch_id: int, read: int, nacked: int):
        """Advance the nack window over this batch: (index of the crossing record or None, replayed, window).

        A batch whose window was saved by an earlier attempt (saved after all its writes) keeps that
        verdict, which that attempt already reported: (crossed, True, None).
        """
        dlq = self.spec.dead_letter_queue
        saved = self.windows.get(batch_id)
        if saved is not None:
            return saved.get("crossed_at_record"), True, None
        window = self.windows.before(batch_id, dlq.window_size, dlq.window_nack_threshold)
        indices: list[int] = []
        if nacked and window.size:
            order = Window.orderBy(*C.ORDER_COLUMNS)
            indexed = status.select(
                (F.row_number().over(order) - 1).alias("i"), F.col("__ac_nacked")
            ).where(F.col("__ac_nacked"))
            indices = sorted(int(r["i"]) for r in indexed.collect())
        crossed = window.apply_batch(read, indices)
        return crossed, False, window

    # -- report --------------------------------------------------------------------------------------

    def _save_report(self) -> None:
        self.report.write_atomic(self.report_file)

    def _fail(self, error: StructuredError) -> None:
        self.report.fail(error.to_dict())
        self._save_report()

    # -- run -----------------------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        """Graceful stop (SIGTERM): finish the running batch, then stop the query."""
        self.stop_reason = reason
        self.stop_requested.set()

    def run(self) -> RunReport:
        """Run until the input is processed (available-now) or a stop is requested (continuous).

        Writes the report throughout; raises RunFailed (after writing the failed report) on error.
        """
        self._save_report()
        try:
            self._setup()
            query = self._start_query()
        except BaseException as exc:  # noqa: BLE001 - reported, then re-raised as RunFailed
            stage, component_id, component_type = self._where
            error = classify(exc, stage, component_id, component_type)
            self._fail(error)
            raise RunFailed(error) from exc
        self.report.status = STATUS_RUNNING
        self._save_report()
        try:
            while True:
                if query.awaitTermination(0.5):
                    break
                if self._stopping():
                    self._stop_gracefully(query)
                    break
            if query.exception() is not None and not self._stopping():
                raise RuntimeError(str(query.exception()))
        except BaseException as exc:  # noqa: BLE001 - the batch's own classification wins
            if self.crashed:
                raise faults_mod.SimulatedCrash("driver crash simulated") from exc
            if self._stopping() and self.failure is None:
                pass  # stopped on purpose; an interrupted batch is not committed and re-runs next time
            else:
                error = self.failure or classify(exc, *self._where)
                self._fail(error)
                raise RunFailed(error) from exc
        if self.failure is not None:
            self._fail(self.failure)
            raise RunFailed(self.failure)
        self.report.status = STATUS_SUCCEEDED
        self.report.ended_at = utc_now_iso()
        if self.stop_reason:
            self.report.stop_reason = self.stop_reason
            log.info("pipeline %s stopped gracefully (%s)", self.spec.id, self.stop_reason)
        self._save_report()
        return self.report

    def _stop_gracefully(self, query) -> None:
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while time.monotonic() < deadline and query.isActive:
            try:
                if not query.status.get("isTriggerActive", False):
                    break
            except Exception:  # noqa: BLE001
                break
            time.sleep(0.1)
        query.stop()


def install_sigterm_handler(runner: PipelineRunner) -> None:
    """SIGTERM (and SIGINT) ask for a graceful stop: the running batch completes, the run exits 0."""

    def handler(signum, frame):  # noqa: ARG001
        runner.request_stop(f"signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def exit_code_for(error: StructuredError | None) -> int:
    if error is None:
        return codes.EXIT_OK
    if error.code == codes.INVALID_SPEC:
        return codes.EXIT_INVALID_SPEC
    return codes.EXIT_FATAL if error.fatal else codes.EXIT_TRANSIENT


def execute(
    spark: SparkSession,
    spec: PipelineSpec,
    *,
    state_dir: str | os.PathLike[str],
    run_id: str,
    faults: dict[str, Any] | None = None,
    crash: Callable[[], None] | None = None,
    on_runner: Callable[[PipelineRunner], None] | None = None,
) -> tuple[int, RunReport]:
    """Run the pipeline once on ``spark``; returns (exit code, report). Used by the entry point and tests."""
    runner = PipelineRunner(spark, spec, state_dir=state_dir, run_id=run_id, faults=faults, crash=crash)
    if on_runner is not None:
        on_runner(runner)
    try:
        report = runner.run()
    except RunFailed as failed:
        return exit_code_for(failed.error), runner.report
    return codes.EXIT_OK, report
