"""The pipeline as one Structured Streaming query with one foreachBatch.

Topology (Conduit's): sources, each with its processors -> fan-in (union) ->
pipeline processors -> fan-out to every destination -> destination
processors -> destinations. Inside a batch (``_plan_batch`` builds it as one
plan, ``batch_pass.BatchPass`` executes it in one pass):

1. each source's rows arrive parsed by Spark's reader (bad lines become
   per-record errors) and go through that source's processors; the sources
   are unioned;
2. pipeline processors, then each destination's processors on its own copy
   of the record (same row);
3. every record gets exactly one fate, with non-null flags: nacked (an error
   anywhere, also in one destination's processors: it goes to the DLQ and to
   no destination), filtered (by a pipeline processor, or by the processors
   of every destination), or written (to every destination that did not
   filter it);
4. the first destination's write executes the plan and observes the counts,
   the nacked records and what the nack window needs (read order);
5. the DLQ, then each destination, is committed unless its commit marker for
   this batch exists (exactly once per destination across restarts);
6. the window and the run report are saved; if the window's threshold was
   exceeded the run stops with a fatal error (2300), after the batch's nacked
   records are safely in the DLQ (nothing is lost).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.pipeline.fingerprint import FINGERPRINTS_FILE, batch_fingerprint, spec_fingerprints
from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID, PipelineSpec
from airflow_conduit.runs.report import (
    RunReport,
    read_json,
    report_path,
    utc_now_iso,
    write_json_atomic,
)
from airflow_conduit.runs.output_owner import claim, state_dir_owner
from airflow_conduit.runs.status import RunStatus
from airflow_conduit.pipeline.secrets import secret_values
from airflow_conduit.recovery import codes
from airflow_conduit.recovery import kills
from airflow_conduit.recovery.errors import BatchDeadlineExceeded, NackThresholdExceeded, StructuredError, TransientError
from airflow_conduit.spark import expectations
from airflow_conduit.spark import faults as faults_mod
from airflow_conduit.spark.jvm import driver as driver_jvm
from airflow_conduit.spark.jvm import pyspark_internals
from airflow_conduit.spark.batch_intents import BatchIntents
from airflow_conduit.spark.batch_numbers import BatchNumbers, checkpoint_query_id
from airflow_conduit.spark.checkpoint_paths import check_sources
from airflow_conduit.spark.commits import CommitLog
from airflow_conduit.spark.progress import ProgressRecorder
from airflow_conduit.spark.destinations import Destination, make_destination
from airflow_conduit.spark.analysed_plan import AnalysedPlan
from airflow_conduit.spark.jvm.plans import empty_batch_of
from airflow_conduit.spark.batch_pass import BatchPass, CrashPoints, MarkedCommits, PassPorts, PlannedBatch
from airflow_conduit.spark.fates import Branch, with_branches
from airflow_conduit.spark.processors import ProcessorContext, apply_processors, can_fail_records
from airflow_conduit.spark.session import ensure_driver_class
from airflow_conduit.spark import oversized_lines
from airflow_conduit.spark.input_files import InputFiles, hadoop_stat, settle_still_written, without_files
from airflow_conduit.spark.kafka_topics import TopicGuard
from airflow_conduit.spark.run_plan import PlanAhead, RunPlan
from airflow_conduit.spark.sources import ONE_FILE_PER_PARTITION, SourcePlan, plan_source, read_stream
from airflow_conduit.spark.stage import StageTracker
from airflow_conduit.spark.window import WindowStore

log = logging.getLogger(__name__)

QUERY_NAME = "pipeline"  # checkpoint folder: STATE_DIR/checkpoints/pipeline
STOP_WAIT_SECONDS = 120.0
CODEGEN_MAX_FIELDS = 1000  # spark.sql.codegen.maxFields while a pipeline runs (wide_records_code_generated)


class StopRequested(Exception):
    """Raised in foreachBatch to end the query between batches (graceful stop)."""


class _StopIsNoError(logging.Filter):
    """Drops Py4J's ERROR with a traceback for a ``StopRequested`` raised in foreachBatch (a stop asked for)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StopRequested))


PY4J_CALLBACK_LOG = logging.getLogger("py4j.clientserver")  # logs every exception a Python callback raises


class RunFailed(Exception):
    """The run failed; ``error`` is what the report and the ERROR line say."""

    def __init__(self, error: StructuredError):
        super().__init__(error.message)
        self.error = error


def classify(exc: BaseException, stage: str | None, component_id: str | None, component_type: str | None) -> StructuredError:
    """Classify with the recovery engine's rules, so the job and the engine agree on the code."""
    from airflow_conduit.recovery.classify import structured_error_from_exception

    return structured_error_from_exception(exc, stage=stage, component_id=component_id, component_type=component_type)


def jvm_answers(spark: SparkSession) -> bool:
    """Whether the driver's JVM still answers a Py4J call (it is gone when its process was killed)."""
    return driver_jvm.answers(spark)


JVM_END_WAIT_SECONDS = 10.0


class DriverJvmGone(TransientError):
    """The driver's JVM no longer answers: what the failed call raised is a consequence of its end, not the cause."""

    code = codes.INFRASTRUCTURE


def jvm_exit_code(spark: SparkSession) -> int | None:
    """The exit code of the driver's JVM when this process started it (a local session) and it ended; else None
    (under spark-submit the JVM is this process's parent: its end is the driver wrapper's to record)."""
    return driver_jvm.exit_code(spark, JVM_END_WAIT_SECONDS)


def lost_jvm_or(exc: BaseException, spark: SparkSession) -> BaseException:
    """``exc``, or a ``DriverJvmGone`` when it was raised because the driver's JVM is gone.

    A killed spark-submit takes the JVM with it while this Python process may still be building the next
    batch's plan or waiting on the query; the call that fails reads "... does not exist in the JVM" or
    "Connection refused". Classified as it reads, it would stop the pipeline as degraded for a lost driver
    (where it happened: a processor, fatal) or send an operator to the network (1100).
    """
    if not isinstance(exc, Exception) or isinstance(exc, DriverJvmGone) or jvm_answers(spark):
        return exc
    signum = kills.signal_of_exit_code(jvm_exit_code(spark))
    if signum:  # a JVM this process started: its end is known here
        return DriverJvmGone(kills.killed_message(kills.DRIVER_JVM, signum), code=codes.KILLED_BY_SIGNAL)
    return DriverJvmGone(
        f"the driver's JVM is gone (killed or crashed; the driver wrapper records how it ended): a call to it "
        f"failed with {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else '(no message)'}"
    )


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
        pyspark_internals.look_up_jvm_functions_once()  # every Column call of the plan: one round trip, not three
        self.spark = spark
        self.spec = spec
        self.state_dir = Path(state_dir)
        # whose outputs these are (runs.output_owner): a DLQ replay's is the pipeline's; None: a dry run, which writes none
        self.owner_dir: Path | None = self.state_dir
        self.adopt_unmarked = False  # a DLQ replay: a folder with data and no marker is the pipeline's (it reads its DLQ)
        self.run_id = run_id
        self.faults = faults or {}
        self.crash_hook = faults_mod.crash_point(self.state_dir, self.faults, crash)
        self.crash_before_commit = faults_mod.crash_point(self.state_dir, self.faults, crash, key="crash_before_commit")
        self.report = RunReport(pipeline_id=spec.id, run_id=run_id, status=RunStatus.STARTING, started_at=utc_now_iso())
        self.report_file = report_path(self.state_dir, run_id)
        self.commits = CommitLog(self.state_dir)
        self.commit_state = MarkedCommits(self.commits, run_id)  # which destination has which batch (exactly once)
        self.windows = WindowStore(self.state_dir)
        self.intents = BatchIntents(self.state_dir, batch_fingerprint(spec), spec.source_file, run_id)  # the spec of each batch
        self.batch_numbers = BatchNumbers(self.state_dir)  # Spark's batch ids, numbered on across checkpoints
        self.stop_requested = threading.Event()
        self.stop_reason: str | None = None
        self.generator_done = False
        self.failure: StructuredError | None = None
        self.crashed = False  # a SimulatedCrash stopped the query (tests)
        self._input_files_lock = threading.Lock()  # the batches' thread and the run's timer check the input files
        self.oversized_entries: list[tuple] = []  # the batch's lines too long to read: DLQ entries (oversized_lines)
        self._ctx: ProcessorContext | None = None
        self.stage = StageTracker()  # where the run is now: a failure is classified there
        self.plans: list[SourcePlan] = []
        self.query = None  # the StreamingQuery once started (its runId is the job group of every batch job)
        self.destinations: list[Destination] = []
        self.dlq: Destination | None = None
        self.keep_originals = False  # keep the fields as read for the DLQ (a later stage can fail a record)
        self.rules = expectations.rules_of(spec)  # the expect processors' rules, counted in every batch
        self._plan: RunPlan | None = None  # what every batch executes the same, built once per run (run_plan.py)
        self._ahead = PlanAhead()  # the run's plan, built while the query starts
        self._stream: DataFrame | None = None  # the streaming query's input (its schema is every batch's)
        self._stream_read = threading.Event()  # set once the query's input is read (or failed to be): the stand-in's schema
        self._query_log_restore: Callable[[], None] | None = None  # the query's own log, quieted for a graceful stop
        self._batch_started: tuple[int, float] | None = None  # (batch number, time.monotonic()) while a batch runs
        self.topics: TopicGuard | None = None  # the Kafka sources' topic ids (kafka_topics.py), from _setup
        self._topic_watch = None  # the running query's topics, looked at (kafka_topics.TopicWatch)
        self._topic_failed = threading.Event()  # set with self.failure when the watch found a topic deleted or recreated

    # -- setup ---------------------------------------------------------------------------------------

    def _setup(self) -> None:
        self.commits.remove_leftovers()
        self.batch_numbers.adopt(checkpoint_query_id(self.checkpoint))
        file_sources = [(i, s.id, str(s.settings.get("path", ""))) for i, s in enumerate(self.spec.sources)
                        if s.plugin.removeprefix("builtin:") == "file"]
        check_sources(self.checkpoint, file_sources)  # a moved pipeline folder: named, before Spark reads anything
        # what this run's DLQ records fail under: a DLQ replay takes them only once it changed (spark/replay.py)
        # not fsync'd: lost with the machine, a replay takes the run's DLQ records again (as for a run that wrote none)
        write_json_atomic(self.report_file.parent / FINGERPRINTS_FILE, spec_fingerprints(self.spec), durable=False)
        secrets = secret_values(self.spec)
        invalid = expectations.unparsable_rule(self.spark, self.spec, self.rules)
        if invalid is not None:
            self.stage.at("processor", invalid.rule.processor_id, expectations.PLUGIN)
            raise invalid
        for index, source in enumerate(self.spec.sources):
            self.stage.at("source", source.id, source.plugin)
            self.plans.append(
                plan_source(self.spark, source, index, trigger_seconds=self.spec.trigger_interval_seconds, mode=self.spec.mode)
            )
        for dest in self.spec.destinations:
            self.destinations.append(make_destination(self.spark, dest.id, dest.plugin, dest.settings, secrets))
        dlq = self.spec.dead_letter_queue
        stages = [*(s.processors for s in self.spec.sources), self.spec.processors, *(d.processors for d in self.spec.destinations)]
        self.keep_originals = dlq.include_messages and any(can_fail_records(p) for p in stages)
        caches = any(p.plugin.removeprefix("builtin:") == "custom" for procs in stages for p in procs)
        for plan in self.plans:
            plan.origin_in_columns = caches
        self.dlq = make_destination(self.spark, DEAD_LETTER_QUEUE_ID, dlq.plugin, dlq.settings, secrets)
        self._claim_outputs()
        self._bind_self_committing_destinations()
        self.report.destinations_added = self._destinations_added()
        self.keep_originals = self.keep_originals or (dlq.include_messages and bool(self._fitting_destinations()))
        for dest in [*self.destinations, self.dlq]:
            dest.attach(self.state_dir, self.spec)
        for dest in [*self.destinations, self.dlq]:
            if dest.plugin == "jdbc":
                self.stage.at("destination", dest.id, dest.plugin)
                ensure_driver_class(self.spark, str(dest.settings.get("driver", "org.postgresql.Driver")))
        self.stage.reset()

    def _claim_outputs(self) -> None:
        """Refuse, before anything is written, a destination or DLQ folder that is another pipeline's output or holds
        data this pipeline did not write (``runs.output_owner``); mark the others as this pipeline's."""
        if self.owner_dir is None:
            return
        owner = state_dir_owner(self.owner_dir, self.spec.id)
        commits = CommitLog(self.owner_dir)
        placed = [(f"destination {d.id!r} (path)", d) for d in self.destinations]
        for what, dest in [*placed, ("dead-letter-queue (path)", self.dlq)]:
            folder = dest.owned_folder()
            if folder is None:
                continue
            self.stage.at("dlq" if dest is self.dlq else "destination", dest.id, dest.plugin)
            claim(Path(folder).absolute(), owner, what=what, written_before=self.adopt_unmarked or commits.has_any(dest.id))
        self.stage.reset()

    def _destinations_added(self) -> list[dict[str, Any]]:
        """The destinations new in the spec of a pipeline that has committed batches: each begins at the batch this
        run writes first, the batches before it are not written to it (docs/destinations.md, adding a destination).

        Spark runs batch n+1 only once batch n's ``foreachBatch`` returned, so every destination that was in the spec
        committed the batch before the last one started; one that did not is new. The last batch started is re-run
        (and written to the new destination too) unless every earlier destination and the DLQ committed it."""
        numbers = read_json(self.batch_numbers.path) or {}
        last = int(numbers.get("last", -1))
        if last < 0 or numbers.get("query_id") != checkpoint_query_id(self.checkpoint):
            return []  # never ran, or a new checkpoint (a Delta table's log cannot tell its batches then)
        try:
            committed = self.commit_state.committed
            known = [d for d in self.destinations if committed(d, max(last - 1, 0))]
            added = [d for d in self.destinations if d not in known and not committed(d, last)]
            done = all(committed(d, last) for d in [*known, self.dlq])
        except Exception:  # noqa: BLE001 - a notice only: a target that cannot say is found by the batch itself
            log.debug("new destinations not looked for", exc_info=True)
            return []
        begins = last + 1 if done else last
        notes = []
        for dest in added:
            if begins == 0:
                continue
            message = (f"destination {dest.id!r} is new in the spec: it begins at batch {begins}; batches 0-{begins - 1}, "
                       f"written by earlier runs, are not written to it (docs/destinations.md, adding a destination)")
            log.warning("%s", message)
            notes.append({"destination": dest.id, "begins_at_batch": begins, "message": message})
        return notes

    @property
    def checkpoint(self) -> Path:
        return self.state_dir / "checkpoints" / QUERY_NAME

    @functools.cached_property
    def query_id(self) -> str:
        """The streaming query's id, from the checkpoint's ``metadata`` (written before the first batch runs)."""
        query_id = checkpoint_query_id(self.checkpoint)
        if query_id is None:
            raise RuntimeError(f"the checkpoint {self.checkpoint} has no query id in its metadata file")
        return query_id

    # -- destinations that keep their own commits (Delta) ---------------------------------------------------

    @functools.cached_property
    def txn_scope(self) -> str:
        """The run's identity in a target's own transaction log: the pipeline and its checkpoint's identity.

        Batch ids restart at 0 in a new checkpoint, so a batch id alone would take a new checkpoint's batches
        for the old ones. The streaming query's id is kept in the checkpoint's ``metadata`` file (written when
        the query starts, before its first batch) and changes with a new checkpoint. A DLQ replay sets its own.
        """
        return f"{self.spec.id}/{self.query_id}"

    def _bind_self_committing_destinations(self) -> None:
        """Give each destination that answers for its own commits the run's identity, and check its target now."""
        placed = [(f"pipeline.destinations[{i}]", d) for i, d in enumerate(self.destinations)]
        for setting_path, dest in [*placed, ("pipeline.dead-letter-queue", self.dlq)]:
            if not dest.answers_commits:
                continue
            self.stage.at("dlq" if dest is self.dlq else "destination", dest.id, dest.plugin)
            dest.bind(lambda: self.txn_scope, spec_file=self.spec.source_file, setting_path=setting_path)
            dest.check_target()
        self.stage.reset()

    def _fitting_destinations(self) -> list[int]:
        """Indexes of the destinations that fit each record to their target's schema (a record can fail there)."""
        return [i for i, d in enumerate(self.destinations) if hasattr(d, "fit_to_table")]

    def _destinations_as_planned(self) -> tuple:
        """The spec's destinations, a Delta destination's with its fit step after its processors."""
        from airflow_conduit.pipeline.model import ProcessorSpec
        from airflow_conduit.spark.delta_sink import FIT_PROCESSOR

        specs = list(self.spec.destinations)
        for i in self._fitting_destinations():
            fit = ProcessorSpec(id=specs[i].id, plugin=FIT_PROCESSOR, settings={"destination": self.destinations[i]})
            specs[i] = dataclasses.replace(specs[i], processors=(*specs[i].processors, fit))
        return tuple(specs)

    def _build_plan(self) -> RunPlan:
        """The run's plan (``run_plan.RunPlan``), from its sources and destinations as set up."""
        return RunPlan.build(self.spark, self.spec, run_id=self.run_id, sources=self.plans, destinations=self.destinations,
                             dlq=self.dlq, keep_originals=self.keep_originals, rules=self.rules)

    def _run_plan(self) -> RunPlan:
        """The run's plan: the one built while the query started (waited for), else built now (a failure there is
        this batch's to report, where it happens)."""
        if self._plan is None:
            self._plan = self._ahead.result() or self._build_plan()
        return self._plan

    def _plan_while_the_query_starts(self) -> None:
        """Build the run's plan, then the first batch's, on a thread of their own (``run_plan.PlanAhead``), from before
        the query's input is read (the record columns; the batch's plan once it is read, ``_stream_read``) and the
        query starts (``StreamingQuery.start`` waits for Spark to set the query up) until Spark's stream thread has
        listed the input and written the first offsets: the first batch then finds its columns built (a thousand
        JVM round trips or so) and its plan's parts analysed, instead of doing it while the executors wait. The batch
        plan is built on an empty stand-in of a batch (``_stand_in_batch``): it is never executed (no Spark job) and
        nothing is written."""
        def build() -> RunPlan:
            try:
                plan = self._build_plan()
                self._stream_read.wait()
                stand_in = self._stand_in_batch()
                if stand_in is not None:
                    try:
                        self._plan_ahead(plan, stand_in)
                    except Exception:  # noqa: BLE001 - an optimisation: the first batch then analyses its own plan
                        log.debug("the first batch's plan not built ahead of it", exc_info=True)
                return plan
            finally:
                self.stage.reset()

        self._ahead.start(build)

    def _planned_ahead(self) -> None:
        """Wait for the plan built ahead to be done: it marks stages, which a failure is classified by."""
        self._ahead.join()

    def _stand_in_batch(self) -> DataFrame | None:
        """An empty batch as ``foreachBatch`` hands it over (rows of an RDD, the stream's columns), or None where
        planning a batch can run Spark jobs (custom processors cache their input; a destination that fits records
        to its table reads the table)."""
        stages = [*(s.processors for s in self.spec.sources), self.spec.processors, *(d.processors for d in self.spec.destinations)]
        if self._stream is None or self._fitting_destinations():
            return None
        if any(p.plugin.removeprefix("builtin:") == "custom" for procs in stages for p in procs):
            return None
        return empty_batch_of(self.spark, self._stream)

    def _plan_ahead(self, plan: RunPlan, stand_in: DataFrame) -> None:
        """The batch plan of ``stand_in``, as ``_process_batch`` builds it (analysed, never executed: no job runs)."""
        ctx = ProcessorContext(spec=self.spec, built=plan.processor_columns)
        try:
            status, branches = self._plan_batch_of(plan, stand_in, ctx)
            BatchPass(plan, self._ports()).prepare(PlannedBatch(status, branches, 0, utc_now_iso()))
        finally:
            ctx.release()

    def _ports(self) -> PassPorts:
        """What a batch's pass reaches outside its plan (``batch_pass.PassPorts``)."""
        return PassPorts(
            commits=self.commit_state, windows=self.windows, intents=self.intents, stage=self.stage,
            crash=CrashPoints(before_commit=self.crash_before_commit, after_commit=self.crash_hook),
            dlq_produce_failed=lambda records: self.report.add_counters(deadletterqueue_produce_failures=records),
        )

    @functools.cached_property
    def input_files(self) -> InputFiles:
        """The input files read so far, as read: a file changed after it was read is reported (``input_files``)."""
        return InputFiles(self.state_dir, hadoop_stat(self.spark))

    def _check_input_files(self, checkpoint_batch: int | None = None, number: int | None = None) -> list[str]:
        """Note the files the checkpoint's batch ``checkpoint_batch`` (batch ``number``) reads, report the input
        files changed since they were read (at a batch the unsettled ones, else every one: ``InputFiles.check``),
        save what changed in the ledger. Returns the batch's files not to read (read before under another name, or gone)."""
        skip: list[str] = []
        found: list[dict[str, Any]] = []
        with self._input_files_lock:
            if checkpoint_batch is not None:
                skip, found = self.input_files.note_batch(self.checkpoint, checkpoint_batch, number=number)
            reading = self.input_files.noted if checkpoint_batch is not None else ()
            found += self.input_files.check(every_file=checkpoint_batch is None, reading=reading)
            if found:
                self.report.input_files_changed = [*self.report.input_files_changed, *found]
            self.input_files.save()
        return skip

    def _check_input_files_on_time(self) -> None:
        """A continuous run's check of every file read, at least once a minute (``SWEEP_SECONDS``) even while no
        batch runs (no new file); skipped while a batch checks them."""
        if self.spec.mode != "continuous" or not self.input_files.sweep_due():
            return
        if not self._input_files_lock.acquire(blocking=False):
            return
        try:
            found = self.input_files.check(every_file=True)
            self.input_files.save()
            if found:
                self.report.input_files_changed = [*self.report.input_files_changed, *found]
                self._save_report(durable=False)
        finally:
            self._input_files_lock.release()

    def _has_generator(self) -> bool:
        return any(p.spec.plugin == "generator" for p in self.plans)

    def _start_query(self):
        self._plan_while_the_query_starts()  # its columns while the streams are read, its batch plan once they are
        try:
            try:
                streams = [read_stream(self.spark, plan) for plan in self.plans]
                union = self._stream = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), streams)  # fields are per source
            finally:
                self._stream_read.set()
            checkpoint = self.checkpoint
            writer = union.writeStream.foreachBatch(self._foreach_batch).option("checkpointLocation", str(checkpoint))
            if self.spec.mode == "continuous":
                writer = writer.trigger(processingTime=f"{max(self.spec.trigger_interval_seconds, 0.0)} seconds")
            elif self._has_generator():
                writer = writer.trigger(processingTime="0 seconds")  # rate sources cannot run available-now
            else:
                writer = writer.trigger(availableNow=True)
            query = writer.start()
            if self.topics:
                self._topic_watch = self.topics.watch(self._on_topic_failure)
            return query
        except BaseException:
            self._planned_ahead()
            raise

    def _check_topics(self) -> None:
        """The Kafka sources' topics against the ids their checkpoint offsets belong to, before Spark's source reads
        them (``kafka_topics.TopicGuard``; a run's, not a DLQ replay's: a replay reads no topic)."""
        kafka = [(plan.id, plan.spec.settings) for plan in self.plans if plan.spec.plugin == "kafka"]
        self.topics = TopicGuard(self.spark, kafka, self.state_dir, self.checkpoint)
        self.topics.at_start(lambda source_id: self.stage.at("source", source_id, "kafka"))
        self.stage.reset()

    def _on_topic_failure(self, source_id: str, error: Exception) -> None:
        """The topic watch found a source topic deleted or recreated: the run ends with that error."""
        if self.failure is None:
            self.failure = classify(error, "source", source_id, "kafka")
        self._topic_failed.set()

    def _topic_explains(self) -> StructuredError | None:
        """The error of a source topic deleted or recreated, which explains a failed query or batch (Spark's own
        error names an unknown topic or a timeout), else None."""
        if self._topic_watch is not None:
            self._topic_watch.stop()  # the run is failing: the watch's looks would only queue before this one's
        explained = self.topics.explain() if self.topics else None
        if explained is None:
            return None
        source_id, error = explained
        return classify(error, "source", source_id, "kafka")

    def _close_topics(self) -> None:
        if self._topic_watch is not None:
            self._topic_watch.stop()
        if self.topics is not None:
            self.topics.close()

    # -- the batch -----------------------------------------------------------------------------------

    def _foreach_batch(self, batch: DataFrame, batch_id: int) -> None:
        if self._stopping():
            # Graceful stop: the batch that was running has finished; this one is not started (not
            # committed either), so the next run processes it.
            raise self._stop_here(f"stop requested before batch {batch_id}; it runs on the next start")
        self._batch_started = (batch_id, time.monotonic())
        try:
            if self.topics:  # before anything is written: the batch's offsets may be a recreated topic's
                self.topics.at_batch(lambda source_id: self.stage.at("source", source_id, "kafka"))
                self.stage.reset()
            number = self.batch_numbers.number(self.query_id, batch_id)
            self._batch_started = (number, self._batch_started[1])
            not_read = self._check_input_files(batch_id, number)  # renamed or gone (input_files)
            settle_still_written(self.input_files, batch)
            self.oversized_entries = oversized_lines.batch_entries(self.spark, self.checkpoint, batch_id, self.plans, not_read)
            self._process_batch(without_files(batch, not_read), number)
        except faults_mod.SimulatedCrash as crash:
            self.crashed = True  # run() turns this back into SimulatedCrash; py4j only handles Exceptions
            raise RuntimeError("simulated driver crash") from crash
        except BaseException as exc:  # noqa: BLE001 - classified here (Python context is lost once in the JVM)
            if self.failure is None:
                if self._stopping():  # ended by the stop (query.stop() interrupts a batch)
                    raise self._stop_here(f"batch {batch_id} ended by a stop; it runs on the next start") from None
                stage, component_id, component_type = self.stage.where
                if self._ctx is not None and self._ctx.where is not None:  # inside a processor
                    stage, component_id, component_type = self._ctx.where
                self.failure = self._topic_explains() or classify(
                    lost_jvm_or(exc, self.spark), stage, component_id, component_type
                )
            raise
        finally:
            self._batch_started = None

    def _stop_here(self, message: str) -> StopRequested:
        """The exception that ends the query from ``foreachBatch`` on a stop asked for. Spark would log it as the
        query's failure, with a stack trace: not on a stop asked for. Raised instead of what a stop interrupted
        (``from None``): Spark's ``StreamExecution`` matches a failed batch's Py4J text against a pattern that
        recurses once per character, and an interrupted JVM call's stack trace in it overflows the stream thread's
        stack (the query then ends with no cause and a thousand-line trace on stderr); this text is one line."""
        self._query_log_restore = self._query_log_restore or quiet_query_errors(self.spark, self.query)
        PY4J_CALLBACK_LOG.addFilter(_STOP_IS_NO_ERROR)  # once: the same filter is not added twice
        return StopRequested(message)

    def _process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Batch number ``batch_id`` (numbered on across checkpoints: ``batch_numbers.py``; a replay's is negative)."""
        started = time.monotonic()
        plan = self._run_plan()  # the first batch waits for it (built while the query started)
        ctx = self._ctx = ProcessorContext(spec=self.spec, built=plan.processor_columns)
        try:
            status, branches = self._plan_batch(batch, ctx)
            at = utc_now_iso()
            skipped = tuple(self.oversized_entries) if batch_id >= 0 else ()  # no pass sees them: their fate is the DLQ
            result = BatchPass(plan, self._ports()).run(PlannedBatch(status, branches, batch_id, at, skipped))
        finally:
            ctx.release()
        self.stage.reset()
        counts = result.counts
        if result.generator_done:
            self.generator_done = True
        already = list(result.already)
        self._record_batch(batch_id, counts, result.written, at=at, already=already, replayed=result.replayed,
                           retries=ctx.retries, dlq_written=result.dlq_written or 0, expectations=result.expectations,
                           earlier_attempt_wrote=result.earlier_attempt_wrote, dlq_kinds=result.dlq_kinds)
        log.info(
            "batch %s: read %s, written %s, filtered %s, dlq %s in %.1fs%s", batch_id, counts["read"], result.written,
            counts["filtered"], counts["nacked"], time.monotonic() - started,
            f" (already committed: {already})" if already else "",
        )
        if result.expectation_failed is not None and self._first_time_failed(batch_id, result.expectation_failed):
            self.stage.at("processor", result.expectation_failed.rule.processor_id, expectations.PLUGIN)
            raise result.expectation_failed
        if result.crossed is not None and not result.replayed:
            self.stage.at("dlq", DEAD_LETTER_QUEUE_ID, self.dlq.plugin)
            raise self._threshold_error(result.crossed, batch_id)

    def _plan_batch(self, batch: DataFrame, ctx: ProcessorContext, *, keep: bool = True) -> tuple[DataFrame, list[Branch]]:
        """The whole batch as one plan (no Spark job, except custom processors): records with their fates. Analysed
        once per run where it can be: the plan ``keep`` kept of an earlier batch is put over this one (``_reused_plan``)."""
        return self._plan_batch_of(self._run_plan(), batch, ctx, keep=keep)

    def _plan_batch_of(self, plan: RunPlan, batch: DataFrame, ctx: ProcessorContext, *,
                       keep: bool = True) -> tuple[DataFrame, list[Branch]]:
        kept = plan.kept
        if keep and kept.batch is not None:
            reused = self._reused_plan(plan, batch)
            if reused is not None:
                return reused
        kept.batch = None
        status, branches = self._build_batch_plan(plan, batch, ctx)
        if keep and not kept.batch_refused:
            try:
                fits = [(d, d.fit_state()) for d in (self.destinations[i] for i in self._fitting_destinations())]
                kept.batch = (AnalysedPlan(status, batch), branches, fits)
            except Exception:  # noqa: BLE001 - reuse is an optimisation: each batch then builds its plan
                log.debug("the batch's analysed plan not kept", exc_info=True)
        return status, branches

    @staticmethod
    def _reused_plan(plan: RunPlan, batch: DataFrame) -> tuple[DataFrame, list[Branch]] | None:
        """The kept plan over ``batch`` (``analysed_plan``), when every destination that fits records to its table
        finds the table's schema unchanged; None (build it) otherwise, or on any error."""
        analysed, branches, fits = plan.kept.batch
        try:
            if not all(dest.refit_unchanged(state) for dest, state in fits):
                return None
            status = analysed.over(batch)
        except Exception:  # noqa: BLE001 - as above
            log.debug("the batch's analysed plan not reused", exc_info=True)
            return None
        if analysed.refused is not None:  # the plan's own make-up: no later batch's can be reused either
            plan.kept.batch_refused = True
        return None if status is None else (status, branches)

    def _build_batch_plan(self, plan: RunPlan, batch: DataFrame, ctx: ProcessorContext) -> tuple[DataFrame, list[Branch]]:
        parts = []
        for source in plan.records:
            self.stage.at("source", source.plan.id, source.plan.spec.plugin)
            parts.append(apply_processors(source.of(batch), source.plan.spec.processors, ctx))
        union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
        union = apply_processors(union, self.spec.processors, ctx)
        union, branches = with_branches(union, self._destinations_as_planned(), ctx)
        self.stage.reset()
        return plan.fates.apply(union, branches), branches

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
        expectations: dict[str, Any] | None = None,
        earlier_attempt_wrote: dict[str, int] | None = None,
        dlq_kinds: dict[str, dict[str, dict[str, int]]] | None = None,
    ) -> None:
        """Add the batch to the run report (counts, KIP-298 counters, expectation counts) and rewrite it."""
        at = at or utc_now_iso()
        nacked = counts["nacked"]
        self.report.add_batch(batch_id, read=counts["read"], filtered=counts["filtered"], dlq=nacked, written=written, at=at)
        entry = self.report.batches[-1]
        if expectations:
            self.report.add_expectations(expectations)
        if dlq_kinds:
            self.report.add_dlq_kinds(dlq_kinds)
        if already:
            entry["already_committed"] = already
        if earlier_attempt_wrote:  # written by a killed attempt that recorded nothing: not this run's
            entry["earlier_attempt_wrote"] = dict(earlier_attempt_wrote)
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
        self.report.status = RunStatus.RUNNING
        self._save_report(durable=False)  # per batch: see write_json_atomic

    def _first_time_failed(self, batch_id: int, error: Exception) -> bool:
        """True the first time a fail rule stops the run at this batch (recorded, so a re-run of the batch goes on).

        The run stops after the batch is committed everywhere, but Spark's checkpoint does not commit a
        batch whose foreachBatch raised: the next run re-runs it (writing nothing again) and must not stop again.
        """
        marker = self.state_dir / "expectations" / f"{batch_id}.json"
        if read_json(marker) is not None:
            log.warning("batch %s: %s (already reported by an earlier run; going on)", batch_id, error)
            return False
        write_json_atomic(marker, {"batch_id": batch_id, "run_id": self.run_id, "error": str(error), "at": utc_now_iso()})
        return True

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

    # -- report --------------------------------------------------------------------------------------

    def _save_report(self, *, durable: bool = True) -> None:
        self.report.write_atomic(self.report_file, durable=durable)

    def _fail(self, error: StructuredError) -> None:
        self.report.fail(error.to_dict())
        try:
            self._save_report()
        except OSError:  # a full state dir: the ERROR line on stderr still says what failed
            log.warning("the run report could not be written: %s", self.report_file, exc_info=True)

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
        with files_read_one_per_partition(self.spark), wide_records_code_generated(self.spark):
            try:
                return self._run()
            finally:
                self._close_topics()
                self.close_destinations()
                if self._query_log_restore is not None:
                    self._query_log_restore()

    def close_destinations(self) -> None:
        """Release what the destinations and the DLQ kept for the run (a Kafka admin client)."""
        for dest in [*self.destinations, *([self.dlq] if self.dlq is not None else [])]:
            try:
                dest.close()
            except Exception:  # noqa: BLE001 - the run's outcome stands; a client that fails to close is logged
                log.warning("%s: closing its clients failed", dest.id, exc_info=True)

    def _run(self) -> RunReport:
        try:
            self._setup()
            self._check_topics()
            self.report.input_files_changed = self.input_files.repeat_known()  # never silent across a restart
            self._check_input_files()  # before the query: its batches check from their own thread
            query = self.query = self._start_query()
        except BaseException as exc:  # noqa: BLE001 - reported, then re-raised as RunFailed
            stage, component_id, component_type = self.stage.where
            error = classify(lost_jvm_or(exc, self.spark), stage, component_id, component_type)
            self._fail(error)
            raise RunFailed(error) from exc
        self.report.status = RunStatus.RUNNING
        self._save_report(durable=False)  # as a batch's: the run's start and end are fsync'd
        progress = ProgressRecorder(self.report_file.parent)  # rows/s and Kafka lag for the UI (spark/progress.py)
        try:
            while True:
                progress.record(query)
                if query.awaitTermination(0.5):
                    progress.record(query)
                    break
                if self._topic_failed.is_set():  # a source topic deleted or recreated under the query
                    query.stop()
                    break
                self._check_input_files_on_time()
                self._check_batch_deadline(query)
                if self._stopping():
                    self._stop_gracefully(query)
                    break
            self._planned_ahead()
            if query.exception() is not None and not self._stopping():
                raise RuntimeError(str(query.exception()))
        except BaseException as exc:  # noqa: BLE001 - the batch's own classification wins
            self._planned_ahead()
            if self.crashed:
                raise faults_mod.SimulatedCrash("driver crash simulated") from exc
            if self._stopping() and self.failure is None:
                pass  # stopped on purpose; an interrupted batch is not committed and re-runs next time
            else:
                error = self.failure or self._topic_explains() or classify(lost_jvm_or(exc, self.spark), *self.stage.where)
                self._fail(error)
                raise RunFailed(error) from exc
        if self.failure is not None:
            self._fail(self.failure)
            raise RunFailed(self.failure)
        self._check_input_files()  # a file appended after its batch, during this run
        self.report.status = RunStatus.STOPPED if self.stop_reason else RunStatus.SUCCEEDED
        self.report.ended_at = utc_now_iso()
        if self.stop_reason:
            self.report.stop_reason = self.stop_reason
            log.info("pipeline %s stopped gracefully (%s)", self.spec.id, self.stop_reason)
        self._save_report()
        return self.report

    def _check_batch_deadline(self, query) -> None:
        """End the run with ``BatchDeadlineExceeded`` (transient: the restart runs the batch again) when the running
        batch has outlasted ``pipeline.batch-deadline``: a wait on Spark that never ends must not hold the run. The
        query is stopped on a thread of its own, not waited for (its stream thread may be the one stuck)."""
        started = self._batch_started
        deadline = self.spec.batch_deadline_seconds
        if started is None or time.monotonic() - started[1] <= deadline:
            return
        overdue = BatchDeadlineExceeded(
            f"batch {started[0]} ran longer than pipeline.batch-deadline ({deadline:g}s); the run "
            "ends and the restart runs the batch again (what it committed is skipped)")
        self.failure = self.failure or classify(overdue, *self.stage.where)  # not what the stop does to the batch
        threading.Thread(target=_stop_query, args=(query,), name="conduit-stop-overdue-batch", daemon=True).start()
        raise overdue

    def _stop_gracefully(self, query) -> None:
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while time.monotonic() < deadline and query.isActive:
            try:
                if not query.status.get("isTriggerActive", False):
                    break
            except Exception:  # noqa: BLE001
                break
            time.sleep(0.1)
        stopping = threading.Thread(target=_stop_query, args=(query,), name="conduit-stop", daemon=True)
        stopping.start()
        stopping.join(STOP_WAIT_SECONDS)  # bounded: a stream thread stuck in a call that never returns keeps the run no longer
        if stopping.is_alive():
            log.warning("the streaming query did not stop within %ss; the run ends without waiting for it", STOP_WAIT_SECONDS)


_STOP_IS_NO_ERROR = _StopIsNoError()


def _stop_query(query) -> None:
    """``query.stop()`` on a thread of its own: what it raises (an interrupted batch's error) is the run's to report."""
    try:
        query.stop()
    except Exception:  # noqa: BLE001 - the run's outcome is decided where it waits, not here
        log.debug("stopping the streaming query raised", exc_info=True)


def quiet_query_errors(spark: SparkSession, query) -> Callable[[], None] | None:
    """Turn off the ERROR log of the streaming query's own class (Spark logs a query ended from foreachBatch as
    "terminated with error", with the stack trace) until the returned function puts its level back; None when
    there is no query yet or the JVM's logging cannot be reached (the log line is then left as it is)."""
    if query is None:
        return None
    try:
        put_back = driver_jvm.logger_off(spark, driver_jvm.query_class_name(query))
    except Exception:  # noqa: BLE001 - a log line is not worth failing a graceful stop for
        log.debug("the query's log could not be quieted for the stop", exc_info=True)
        return None

    def restore() -> None:
        try:
            put_back()
        except Exception:  # noqa: BLE001 - the JVM may be gone at the end
            log.debug("the query's log level could not be restored", exc_info=True)

    return restore


@contextlib.contextmanager
def files_read_one_per_partition(spark: SparkSession):
    """Each input file is read as its own partition(s) while the pipeline runs: record numbers come from it."""
    with _conf_set(spark, "spark.sql.files.openCostInBytes", ONE_FILE_PER_PARTITION):
        yield


@contextlib.contextmanager
def wide_records_code_generated(spark: SparkSession):
    """Whole-stage code generation for records of up to ``CODEGEN_MAX_FIELDS`` fields while the pipeline runs.

    Spark leaves a plan node out of whole-stage codegen when its rows have more than
    ``spark.sql.codegen.maxFields`` fields, nested ones counted (100 by default): a batch's projections (the record,
    its fates, the observation's inputs) each then copy every record into a row of its own. Code-generated they are
    one loop with one row at the coalesce; a stage whose generated method outgrows ``spark.sql.codegen.hugeMethodLimit``
    still falls back to Spark's own execution. A value the user set is kept. Set for the run only: the stream's
    session is a copy made when the query starts, and the caller's session is left as it was.
    """
    with _conf_set(spark, "spark.sql.codegen.maxFields", str(CODEGEN_MAX_FIELDS), keep_users=True):
        yield


@contextlib.contextmanager
def _conf_set(spark: SparkSession, key: str, value: str, *, keep_users: bool = False):
    """``key`` set to ``value`` on ``spark``'s session for the block, then put back as it was (unset when it was
    unset); with ``keep_users``, a value already set is left alone."""
    previous = spark.conf.get(key, None)
    if keep_users and previous is not None:
        yield
        return
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


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
