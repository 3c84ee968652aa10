"""The first micro-batch of a run, as counts (deterministic), never times: what it does that later batches do not.

A run builds its columns once (each Column call is a JVM round trip) and keeps them for its batches. They are
built while Spark's stream thread starts the query (lists the input, writes the first offsets), on an empty
stand-in of a batch: the first batch's thread then makes about as many JVM round trips as any later batch
(which also skips building its plan: it reuses the first batch's), and nothing before the first batch runs a Spark job.
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest
from py4j.protocol import MEMORY_COMMAND_NAME, MEMORY_DEL_SUBCOMMAND_NAME

from airflow_conduit.pipeline import load_pipeline
from airflow_conduit.spark.runner import execute

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders"
RELEASE = MEMORY_COMMAND_NAME + MEMORY_DEL_SUBCOMMAND_NAME  # py4j's GC releases: not the runner's calls
# What a first batch still builds: what is read from its observation's result (the observed row's selects,
# the DLQ rows gathered by it, their source lines), about 260 round trips for the example, and its plan's DataFrame
# calls, which a later batch skips by putting the first batch's analysed plan over its own rows (analysed_plan):
# about 320 in all. Without the columns built ahead of it, it made over 800 more than a later batch.
FIRST_BATCH_EXTRA_CALLS = 350


class FirstBatchProbe:
    """Py4J calls of each batch on the batch's own thread, and the Spark jobs run before the first batch."""

    def __init__(self, spark, monkeypatch) -> None:
        self.spark = spark
        self.calls: list[int] = []
        self.jobs_before_first_batch: int | None = None
        self._now: Counter | None = None
        self._thread: int | None = None
        self._jobs_at_start = self._jobs()
        client = spark.sparkContext._gateway._gateway_client
        send = client.send_command

        def counted(command, *args, **kwargs):
            if self._now is not None and threading.get_ident() == self._thread and not command.startswith(RELEASE):
                self._now["py4j"] += 1
            return send(command, *args, **kwargs)

        monkeypatch.setattr(client, "send_command", counted)

    def _jobs(self) -> int:
        return self.spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs()

    def wrap(self, runner) -> None:
        run_batch = runner._foreach_batch

        def counted(batch, batch_id):
            if self.jobs_before_first_batch is None:
                self.jobs_before_first_batch = self._jobs() - self._jobs_at_start
            self._now, self._thread = Counter(), threading.get_ident()
            try:
                return run_batch(batch, batch_id)
            finally:
                self.calls.append(self._now["py4j"])
                self._now = None

        runner._foreach_batch = counted


def _example(tmp_path):
    """A copy of examples/orders without its outputs, and its spec."""
    folder = tmp_path / "orders"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("out", "state"))
    return folder, load_pipeline(str(folder / "pipeline.yaml"))


@pytest.mark.skipif(not (EXAMPLE / "pipeline.yaml").exists(), reason="examples/orders not present")
def test_the_first_batch_of_the_example_makes_about_as_many_jvm_round_trips_as_a_later_one(spark, tmp_path, monkeypatch):
    folder, spec = _example(tmp_path)
    probe = FirstBatchProbe(spark, monkeypatch)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=probe.wrap)
    monkeypatch.undo()
    assert code == 0, report.error
    # two input files, and the example's own max-files-per-trigger: 1: one batch per file
    assert len(report.batches) == len(list((folder / "data" / "in").iterdir())) == len(probe.calls) == 2
    assert report.totals["read"] == report.totals["dlq"] + report.totals["filtered"] + report.totals["written"]["lake"]
    assert probe.jobs_before_first_batch == 0, "building ahead runs no Spark job"
    first, later = probe.calls
    assert first <= later + FIRST_BATCH_EXTRA_CALLS, probe.calls


class RunCalls:
    """Py4J calls of a whole run, on every thread (the plan built ahead, the batches), GC releases left out."""

    def __init__(self, spark, monkeypatch) -> None:
        self.calls = 0
        client = spark.sparkContext._gateway._gateway_client
        send = client.send_command

        def counted(command, *args, **kwargs):
            if not command.startswith(RELEASE):
                self.calls += 1
            return send(command, *args, **kwargs)

        monkeypatch.setattr(client, "send_command", counted)


# The example's run of two batches: its columns built once, its stream read and started, two batches, about
# 1,800 round trips (and one per half second the run waits on its query). Were every ``F.<name>`` call three
# round trips and every column of a ``Seq`` one more, as PySpark makes them, it would be about 3,800.
EXAMPLE_RUN_CALLS = 2_400


@pytest.mark.skipif(not (EXAMPLE / "pipeline.yaml").exists(), reason="examples/orders not present")
def test_a_run_of_the_example_makes_each_column_call_in_one_round_trip(spark, tmp_path, monkeypatch):
    _, spec = _example(tmp_path)
    probe = RunCalls(spark, monkeypatch)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    monkeypatch.undo()
    assert code == 0, report.error
    assert report.totals["read"] == report.totals["dlq"] + report.totals["filtered"] + report.totals["written"]["lake"]
    assert probe.calls <= EXAMPLE_RUN_CALLS, probe.calls


def test_a_function_call_is_one_round_trip_and_ten_columns_of_a_seq_two(spark, monkeypatch):
    from pyspark.sql import functions as F

    from airflow_conduit.spark.jvm import pyspark_internals

    pyspark_internals.look_up_jvm_functions_once()
    F.struct(F.get_json_object(F.col("a"), "$.b"), F.lit(1))  # the members looked up once
    probe = RunCalls(spark, monkeypatch)
    F.col("a")
    assert probe.calls == 1
    F.get_json_object(F.col("a"), "$.b")
    assert probe.calls == 1 + 2  # the column, then the function
    F.struct(F.col("a"), F.col("b"))
    # two columns, the Seq of them (a list of both in one call, converted), then struct
    assert probe.calls == 3 + 2 + 2 + 1, probe.calls
    wide = [F.col(f"c{i}") for i in range(25)]
    before = probe.calls
    built = F.struct(*wide)
    # a list for 25, three of ten at most added to it, converted; then struct
    assert probe.calls - before == 1 + 3 * 2 + 1 + 1, probe.calls
    assert [f.name for f in spark.range(1).select([F.lit(i).alias(f"c{i}") for i in range(25)]).select(built).schema[0].dataType.fields] \
        == [f"c{i}" for i in range(25)], "the Seq keeps the columns and their order"


def _analysed(frame) -> bool:
    """Whether building ``frame`` ran Spark's analyzer (its query's tracker counts the analyzer's rules)."""
    return not frame._jdf.queryExecution().tracker().rules().isEmpty()


@pytest.mark.skipif(not (EXAMPLE / "pipeline.yaml").exists(), reason="examples/orders not present")
def test_the_first_batch_puts_the_plan_analysed_ahead_of_it_over_its_rows(spark, tmp_path, monkeypatch):
    """The stand-in has the stream's own output attributes (``analysed_plan.empty_batch_of``): the batch's plan analysed
    on it while the query starts is put over the first batch's rows, not analysed again while the executors wait
    (nor are the records' columns selected again)."""
    from airflow_conduit.spark import sources as sources_mod

    _, spec = _example(tmp_path)
    probe = FirstBatchProbe(spark, monkeypatch)
    selected: list[int] = []
    plans: list = []
    records_of = sources_mod.SourceRecords.of

    def counted(source, batch):
        if probe._now is not None and threading.get_ident() == probe._thread:
            selected[-1] += 1
        return records_of(source, batch)

    def wrap(runner) -> None:
        probe.wrap(runner)
        run_batch, plan_batch = runner._foreach_batch, runner._plan_batch

        def planned(batch, ctx, **kwargs):
            status, branches = plan_batch(batch, ctx, **kwargs)
            if probe._now is not None and threading.get_ident() == probe._thread:
                plans.append(status)
            return status, branches

        runner._plan_batch = planned
        runner._foreach_batch = lambda batch, batch_id: (selected.append(0), run_batch(batch, batch_id))[1]

    monkeypatch.setattr(sources_mod.SourceRecords, "of", counted)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=wrap)
    monkeypatch.undo()
    assert code == 0, report.error
    assert selected == [0, 0], "the records' columns are selected once per run, ahead of the first batch"
    assert [_analysed(f) for f in plans] == [False, False], "the batch's plan analysed once per run, ahead of the first batch"
    assert probe.jobs_before_first_batch == 0


@pytest.mark.skipif(not (EXAMPLE / "pipeline.yaml").exists(), reason="examples/orders not present")
def test_the_first_batch_puts_the_pass_frames_analysed_ahead_of_it_over_its_rows(spark, tmp_path, monkeypatch):
    """The pass's frames (the observation's inputs in one task per core, the first write's rows over the observed
    pass) are analysed on the stand-in too (``BatchPass.prepare``): no batch, the first included, runs the analyzer
    for them."""
    from airflow_conduit.spark.batch_pass import BatchPass

    _, spec = _example(tmp_path)
    probe = FirstBatchProbe(spark, monkeypatch)
    frames: list[list] = []
    over = BatchPass._over

    def recorded(self, key, leaf, build):
        frame = over(self, key, leaf, build)
        if probe._now is not None and threading.get_ident() == probe._thread:
            frames[-1].append((key[0], _analysed(frame)))  # asked when built (the write runs rules on it after)
        return frame

    def wrap(runner) -> None:
        probe.wrap(runner)
        run_batch = runner._foreach_batch
        runner._foreach_batch = lambda batch, batch_id: (frames.append([]), run_batch(batch, batch_id))[1]

    monkeypatch.setattr(BatchPass, "_over", recorded)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=wrap)
    monkeypatch.undo()
    assert code == 0, report.error
    assert [[key for key, _ in batch] for batch in frames] == [["inputs", "rows"]] * 2
    assert [[analysed for _, analysed in batch] for batch in frames] == [[False, False]] * 2, \
        "the pass's frames analysed once per run, ahead of the first batch"


def test_an_empty_batch_of_a_stream_has_its_output_attributes_and_no_rows(spark, tmp_path):
    from airflow_conduit.spark.analysed_plan import empty_batch_of

    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema("id BIGINT, name STRING").json(str(tmp_path / "in"))
    stand_in = empty_batch_of(spark, stream)
    assert not stand_in.isStreaming
    assert stand_in._jdf.logicalPlan().sameOutput(stream._jdf.queryExecution().analyzed())
    assert stand_in.schema == stream.schema
    assert stand_in.rdd.getNumPartitions() == 0 and stand_in.count() == 0


def test_an_empty_batch_of_a_stream_makes_one_rdd_and_no_python_rdd(spark, tmp_path):
    """The stand-in's rows are one ``EmptyRDD`` made in the JVM: no frame of the stream's schema (a Python RDD, its
    rows converted, a projection planned per field) is made for them while the first batch may be waiting."""
    from airflow_conduit.spark.analysed_plan import empty_batch_of

    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema("id BIGINT, name STRING").json(str(tmp_path / "in"))
    sc = spark.sparkContext._jsc.sc()
    before = sc.newRddId()
    stand_in = empty_batch_of(spark, stream)
    assert sc.newRddId() - before == 2, "one RDD made between the two ids taken here"
    assert stand_in._jdf.logicalPlan().rdd().getClass().getSimpleName() == "EmptyRDD"
