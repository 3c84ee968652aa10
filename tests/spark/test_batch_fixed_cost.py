"""A micro-batch's fixed cost, as counts (deterministic), never times: JVM round trips, files stat'd, state files written.

The runner's work around a batch's Spark jobs is its plan (Column calls, each a Py4J round trip to the driver's
JVM), the input-file check (a stat per file looked at) and its state files (each an atomic rewrite, not fsync'd).
Counted on the thread that runs the batch, in batches after the first (which builds what the run keeps), with whether
the batch's plan, the pass's columns and the write's rows ran the analyzer (analysed once per run: spark/analysed_plan.py).
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from airflow_conduit.runs import output_owner as output_owner_mod
from airflow_conduit.runs import report as report_mod
from airflow_conduit.spark import batch_pass as batch_pass_mod
from airflow_conduit.spark import input_files as input_files_mod
from airflow_conduit.spark import sources as sources_mod
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, write_lines

pytestmark = pytest.mark.spark

FILES = 4
HOUR_NS = 3600 * 10**9
# JVM round trips of one batch of the reference pipeline (2 source processors, 1 pipeline processor, 1 file
# destination, a file DLQ, bad records): the plan's few DataFrame calls (one per processor, with a schema read
# where a processor depends on the fields), the observation and its one collect, the DLQ's rows and the two writes.
CALLS_PER_BATCH = 70  # 43 today (the batch's analysed plan put over the batch: one per plan node); each step above adds a few, a select list rebuilt per batch adds dozens
CALLS_PER_PROCESSOR = 3  # a field.set: the fields it is added to (2 calls), its one withColumns


def _input(folder: Path) -> None:
    """One file per batch, each with a rejected line and a record that fails its schema; modified an hour ago
    (settled: files delivered complete)."""
    for f in range(FILES):
        path = write_lines(folder, f"{f}.json", [good(10 * f + 1), "{broken", good(10 * f + 2), '{"id": "x", "name": "w"}'])
        os.utime(path, ns=(path.stat().st_mtime_ns - HOUR_NS,) * 2)


def _spec(tmp_path: Path, extra_processors: int):
    processors = [proc("positive", "filter", condition="amount >= 0")]
    processors += [proc(f"extra-{i}", "field.set", field=f"x{i}", value=f"amount * {i}") for i in range(extra_processors)]
    return pipeline(
        f"cost-{extra_processors}",
        [file_source(tmp_path / "in", processors=[proc("tag", "field.set", field="origin", value="'file'"),
                                                   proc("upper", "sql", select=["*", "upper(name) AS shout"])],
                     **{"max-files-per-trigger": 1})],
        [file_dest(tmp_path / "out", fmt="parquet")],
        processors=processors,
        dlq=dlq_file(tmp_path / "dlq", size=100, threshold=50),
    )


class BatchCounts:
    """Per batch: Py4J calls from the batch's thread, input files stat'd, state files written (by their folder)."""

    def __init__(self, spark, monkeypatch, state: Path) -> None:
        self.batches: list[Counter] = []
        self._now: Counter | None = None
        self._thread: int | None = None
        client = spark.sparkContext._gateway._gateway_client
        send = client.send_command

        def counted_send(*args, **kwargs):
            if self._now is not None and threading.get_ident() == self._thread:
                self._now["py4j"] += 1
                if self._in_dlq:
                    self._now["py4j dlq"] += 1
            return send(*args, **kwargs)

        self._in_dlq = False
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

        from airflow_conduit.spark.kafka_sink import KafkaDeadLetterQueue

        dlq_write, collect = KafkaDeadLetterQueue.write, ClassicDataFrame.collect

        rule_executor = getattr(getattr(spark.sparkContext._jvm, "org.apache.spark.sql.catalyst.rules.RuleExecutor$"), "MODULE$")

        def rule_runs() -> int:
            """Spark's analyzer and optimizer rules run so far in the JVM (its round trips not counted)."""
            thread, self._thread = self._thread, None
            try:
                return int(rule_executor.getCurrentMetrics().numRuns())
            finally:
                self._thread = thread

        def counted_dlq_write(dlq, df, batch_id):
            runs = rule_runs() if self._now is not None else 0
            self._in_dlq = True
            try:
                return dlq_write(dlq, df, batch_id)
            finally:
                self._in_dlq = False
                if self._now is not None:
                    self._now["rule runs dlq"] += rule_runs() - runs

        records = KafkaDeadLetterQueue.records

        def counted_records(dlq, df, batch_id, query_id):
            if self._now is not None:
                self._now["dlq records planned"] += 1
            return records(dlq, df, batch_id, query_id)

        monkeypatch.setattr(KafkaDeadLetterQueue, "records", counted_records)

        def counted_collect(df):
            if self._now is not None and self._in_dlq:
                self._now["collect dlq"] += 1
            return collect(df)

        monkeypatch.setattr(KafkaDeadLetterQueue, "write", counted_dlq_write)
        monkeypatch.setattr(ClassicDataFrame, "collect", counted_collect)

        monkeypatch.setattr(client, "send_command", counted_send)
        monkeypatch.setattr(input_files_mod, "local_stat", self._counted("stat", input_files_mod.local_stat))
        write = report_mod.write_json_atomic

        def counted_write(path, data, **kwargs):
            if self._now is not None:
                relative = Path(path).relative_to(state)
                self._now[f"write {relative.parts[0] if relative.parts[0] != 'input-files' else relative}"] += 1
            return write(path, data, **kwargs)

        monkeypatch.setattr(report_mod, "write_json_atomic", counted_write)
        monkeypatch.setattr(os, "fsync", self._counted("fsync", os.fsync))
        self._records: list = []  # the batch's records' selects, checked once it is done (checking is JVM calls)
        records_of = sources_mod.SourceRecords.of

        def kept_records(source, batch):
            frame = records_of(source, batch)
            if self._now is not None:
                self._records.append(frame)
            return frame

        monkeypatch.setattr(sources_mod.SourceRecords, "of", kept_records)
        self._plans: list = []  # the batch's whole plan and the pass's frames over it (analysed once per run)
        over = batch_pass_mod.BatchPass._over

        def kept_pass_frames(pass_, key, leaf, build):
            frame = over(pass_, key, leaf, build)
            self._note_analysed(frame)
            return frame

        monkeypatch.setattr(batch_pass_mod.BatchPass, "_over", kept_pass_frames)
        for module in ("airflow_conduit.spark.runner", "airflow_conduit.spark.commits", "airflow_conduit.spark.window",
                       "airflow_conduit.spark.batch_numbers", "airflow_conduit.spark.input_files", "airflow_conduit.spark.kafka_sink"):
            monkeypatch.setattr(f"{module}.write_json_atomic", counted_write)

    def _note_analysed(self, frame) -> None:
        """Whether building ``frame`` ran the analyzer, asked now (once it runs, its tracker counts the optimizer's
        rules too), with the JVM round trips of asking not counted."""
        if self._now is None:
            return
        thread, self._thread = self._thread, None
        try:
            self._plans.append(_analysed(frame))
        finally:
            self._thread = thread

    def _counted(self, key: str, call):
        """``call``, counting its calls under ``key`` while a batch runs."""
        def counted(*args, **kwargs):
            if self._now is not None:
                self._now[key] += 1
            return call(*args, **kwargs)

        return counted

    def wrap(self, runner) -> None:
        run_batch = runner._foreach_batch

        def counted(batch, batch_id):
            self._now, self._thread = Counter(), threading.get_ident()
            try:
                return run_batch(batch, batch_id)
            finally:
                counts, self._now = self._now, None
                counts["records analysed"] = sum(_analysed(frame) for frame in self._records)
                counts["plans analysed"] = sum(self._plans)
                counts["plans"] = len(self._plans)
                self._records.clear()
                self._plans.clear()
                self.batches.append(counts)

        runner._foreach_batch = counted
        plan_batch = runner._plan_batch

        def kept_plan(batch, ctx, **kwargs):
            status, branches = plan_batch(batch, ctx, **kwargs)
            self._note_analysed(status)
            return status, branches

        runner._plan_batch = kept_plan


def _analysed(frame) -> bool:
    """Whether building ``frame`` ran Spark's analyzer (its query's tracker counts the analyzer's rules)."""
    return not frame._jdf.queryExecution().tracker().rules().isEmpty()


def _run(spark, monkeypatch, tmp_path: Path, extra_processors: int = 0) -> list[Counter]:
    monkeypatch.setattr(input_files_mod, "SWEEP_SECONDS", 1e9)  # no full check of the files read during the run
    _input(tmp_path / "in")
    counts = BatchCounts(spark, monkeypatch, tmp_path / "state")
    code, report = execute(spark, _spec(tmp_path, extra_processors), state_dir=tmp_path / "state", run_id="r1",
                           on_runner=counts.wrap)
    assert code == 0, report.error
    assert len(report.batches) == FILES == len(counts.batches)
    assert report.totals["dlq"] == 2 * FILES and report.totals["written"]["out"] == 2 * FILES
    monkeypatch.undo()
    return counts.batches[1:]  # the first batch builds what the run keeps


def test_a_run_fsyncs_only_its_report_at_its_start_and_its_end(spark, tmp_path, monkeypatch):
    """Two fsyncs (the file and its folder) for each of the two durable reports; the spec fingerprints, the report once the
    query runs and every per-batch state file are replaced atomically without one (docs/architecture.md, state directory).
    A pipeline's first run also claims its state dir and output folders, two fsyncs each, once (runs/output_owner.py)."""
    monkeypatch.setattr(input_files_mod, "SWEEP_SECONDS", 1e9)
    _input(tmp_path / "in")
    fsyncs: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), fsync(fd))[1])
    durable: list[str] = []
    write = report_mod.write_json_atomic

    def noted(path, data, **kwargs):
        if kwargs.get("durable", True):
            durable.append(f"{Path(path).relative_to(tmp_path / 'state').parts[0]} {data.get('status') if isinstance(data, dict) else ''}")
        return write(path, data, **kwargs)

    monkeypatch.setattr(report_mod, "write_json_atomic", noted)
    for module in ("airflow_conduit.spark.runner", "airflow_conduit.spark.commits", "airflow_conduit.spark.window",
                   "airflow_conduit.spark.batch_numbers", "airflow_conduit.spark.input_files"):
        monkeypatch.setattr(f"{module}.write_json_atomic", noted)
    claims: list[str] = []
    claim_write = output_owner_mod.write_json_atomic
    monkeypatch.setattr(output_owner_mod, "write_json_atomic",
                        lambda path, data, **kwargs: (claims.append(Path(path).name), claim_write(path, data, **kwargs))[1])
    code, report = execute(spark, _spec(tmp_path, 0), state_dir=tmp_path / "state", run_id="r1")
    monkeypatch.undo()
    assert code == 0, report.error
    assert len(report.batches) == FILES
    assert durable == ["runs starting", "runs succeeded"], durable
    assert sorted(claims) == [".conduit-owner", ".conduit-owner", "owner.json"], claims  # the lake's, the DLQ's, the state dir's
    assert len(fsyncs) == 4 + 2 * len(claims), fsyncs


def test_a_batch_stats_its_own_file_and_writes_only_the_state_that_changed(spark, tmp_path, monkeypatch):
    for counts in _run(spark, monkeypatch, tmp_path):
        assert counts["stat"] == 1, f"the batch's own file only (settled files read before are not stat'd): {counts}"
        writes = {k: v for k, v in counts.items() if k.startswith("write")}
        assert writes == {
            "write batch-numbers.json": 1,  # the batch's number, recorded before it runs
            "write input-files/read.json": 1,  # the file it reads
            "write commits": 2,  # the DLQ's and the destination's markers
            "write dlq-window": 1,  # the nack window after the batch
            "write runs": 1,  # the run report
        }, "changed.json unchanged: not rewritten"
        assert counts["fsync"] == 0, f"per-batch state files are replaced atomically, not fsync'd: {counts}"


def test_a_batch_makes_a_bounded_number_of_jvm_round_trips_and_few_per_processor(spark, tmp_path, monkeypatch):
    batches = _run(spark, monkeypatch, tmp_path / "plain")
    assert [c["records analysed"] for c in batches] == [0] * len(batches), "the records' select is analysed once per run"
    # the batch's plan (records, processors, fates), the pass's columns over it and the write's rows over the observation
    assert [(c["plans"], c["plans analysed"]) for c in batches] == [(3, 0)] * len(batches), "analysed once per run"
    plain = [c["py4j"] for c in batches]
    assert max(plain) <= CALLS_PER_BATCH, plain
    extra = [c["py4j"] for c in _run(spark, monkeypatch, tmp_path / "extra", extra_processors=8)]
    assert max(extra) - max(plain) <= 8 * CALLS_PER_PROCESSOR, (plain, extra)


# Kafka -> Delta with a Kafka DLQ and the nack window off (the benchmark's pipeline): every batch has bad records.
KAFKA_BATCHES, KAFKA_PER_BATCH = 4, 30
# JVM round trips of one such batch: its plan (a dozen), the observation, Delta's transaction (start from the batch's
# snapshot, the checksum's app ids, write, commit: classes kept per run) and the DLQ's driver producer (the intent's
# end offsets, the records' sizes, Spark's Kafka writer task).
KAFKA_DLQ_CALLS_PER_BATCH = 23  # of those, the Kafka DLQ's write (21 today); a size check as a query of its own adds 7 and a collect
# Spark's analyzer and optimizer rules run by the DLQ's write: the optimizer over its rows' small plan only (237 today; the
# records' plan analysed and optimised at every batch runs about four times as many).
KAFKA_DLQ_RULE_RUNS = 400
KAFKA_CALLS_PER_BATCH = 130  # such a batch makes 104 (the batch's analysed plan put over the batch), the source topics' ids looked at before it writes (kafka_topics.TopicGuard.at_batch) a few; a class looked up by its dotted path on every batch adds 5 to 8 each


def test_a_kafka_to_delta_batch_writes_four_state_files_without_fsync_and_few_jvm_round_trips(spark, kafka, tmp_path, monkeypatch):
    from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec, SourceSpec

    topic, dlq_topic = kafka.create_topic(partitions=2), kafka.create_topic()
    records = KAFKA_BATCHES * KAFKA_PER_BATCH
    for partition in range(2):
        kafka.produce(topic, [b'{"id": %d, "name": oops' % i if i % 10 == 3 else json.dumps({"id": i, "name": f"n{i}"}).encode()
                              for i in range(records) if i % 2 == partition], partition=partition)
    source = SourceSpec(id="events", plugin="kafka", settings={
        "servers": kafka.bootstrap, "topics": [topic], "starting-offsets": "earliest", "format": "json",
        "schema": "id BIGINT NOT NULL, name STRING", "max-records-per-batch": KAFKA_PER_BATCH})
    spec = pipeline("cost-kafka-delta", [source], [DestinationSpec(id="lake", plugin="delta", settings={"path": str(tmp_path / "lake")})],
                    dlq=DeadLetterQueueSpec(plugin="kafka", settings={"servers": kafka.bootstrap, "topic": dlq_topic}, window_size=0))
    counts = BatchCounts(spark, monkeypatch, tmp_path / "state")
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=counts.wrap)
    monkeypatch.undo()
    assert code == 0, report.error
    assert len(report.batches) == KAFKA_BATCHES == len(counts.batches)
    assert all(b["dlq"] > 0 for b in report.batches), report.batches
    for batch in counts.batches[1:]:  # the first builds what the run keeps
        writes = {k: v for k, v in batch.items() if k.startswith("write")}
        assert writes == {
            "write batch-numbers.json": 1,  # the batch's number, recorded before it runs
            "write kafka-intents": 1,  # the DLQ topic's end offsets, before the DLQ writes
            "write commits": 1,  # the DLQ's marker (the Delta table's own log says it has the batch)
            "write runs": 1,  # the run report
        }, f"no nack window file when the window is off: {batch}"
        assert batch["fsync"] == 0, batch
        assert batch["py4j"] <= KAFKA_CALLS_PER_BATCH, batch
        assert batch["py4j dlq"] <= KAFKA_DLQ_CALLS_PER_BATCH, batch
        assert batch["collect dlq"] == 0, f"the DLQ records' sizes are checked in their own plan, not collected: {batch}"
        assert batch["dlq records planned"] == 0, f"the DLQ records' plan is compiled once per run: {batch}"
        assert batch["rule runs dlq"] <= KAFKA_DLQ_RULE_RUNS, batch
        assert batch["records analysed"] == 0, f"the records' select is analysed once per run: {batch}"
        assert (batch["plans"], batch["plans analysed"]) == (3, 0), f"the batch's plan (with the Delta fit) too: {batch}"
