"""Spark jobs per micro-batch: a count (deterministic), not a time.

Every job of a streaming query runs in the job group of the query's run id,
so Spark's status tracker counts them. The reference pipeline (1 source with
2 processors, 1 pipeline processor, 1 file destination, file DLQ) runs one
job per destination write and none for its file DLQ, whose rows the pass
brings to the driver and the driver writes: exactly 1 per batch, with bad
records or without, whatever the number of built-in processors, and with an
``expect`` processor whose rules are counted by the same pass (no job per rule).

Kafka -> Delta with a Kafka DLQ: 1 job per batch (the Delta write is the pass), with bad records too (the
Kafka DLQ's records are computed and produced in the driver from what the pass gathered); into a new table,
the first batch runs 1 more (the table's creation before the pass). Over many batches, the batch whose commit
reaches a Delta checkpoint (every 10 commits) runs Delta's checkpoint jobs too, as many as plain Structured
Streaming appending to Delta runs for its own checkpoint.
"""

from __future__ import annotations

import json

import pytest

from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, write_lines

pytestmark = pytest.mark.spark

FILES = 3


def _input(folder, *, bad: bool):
    for f in range(FILES):
        lines = [good(10 * f + 1), good(10 * f + 2)]
        if bad:  # one line the reader rejects, one record that fails its schema (id not a number)
            lines[1:1] = ["{broken"]
            lines.append('{"id": "x", "name": "w"}')
        write_lines(folder, f"{f}.json", lines)


RULES = [
    {"name": "has-id", "condition": "id IS NOT NULL", "action": "drop"},
    {"name": "named", "condition": "name IS NOT NULL", "action": "warn"},
    {"name": "small", "condition": "amount < 10", "action": "warn"},
    {"name": "never", "condition": "name = 'nobody'", "action": "warn"},
]


def _spec(tmp_path, extra_processors: int, rules=()):
    source_processors = [
        proc("tag", "field.set", field="origin", value="'file'"),
        proc("upper", "field.set", field="name", value="upper(name)"),
    ]
    pipeline_processors = [proc("positive", "filter", condition="amount >= 0")]
    pipeline_processors += [proc(f"extra-{i}", "field.set", field=f"x{i}", value=f"amount * {i}") for i in range(extra_processors)]
    if rules:
        pipeline_processors.append(proc("quality", "expect", rules=list(rules)))
    return pipeline(
        f"jobs-{extra_processors}",
        [file_source(tmp_path / "in", processors=source_processors, **{"max-files-per-trigger": 1})],
        [file_dest(tmp_path / "out", fmt="parquet")],
        processors=pipeline_processors,
        dlq=dlq_file(tmp_path / "dlq", size=0),
    )


def _jobs_per_batch(spark, tmp_path, extra_processors: int = 0, rules=(), *, bad: bool = True) -> float:
    _input(tmp_path / "in", bad=bad)
    runners = []
    code, report = execute(spark, _spec(tmp_path, extra_processors, rules), state_dir=tmp_path / "state", run_id="r1",
                           on_runner=runners.append)
    assert code == 0, report.error
    assert len(report.batches) == FILES
    assert report.totals["dlq"] == (2 * FILES if bad else 0)
    assert sum(report.totals["written"].values()) == 2 * FILES
    if rules:  # the rules were evaluated: every good record counted under every rule
        counted = report.totals["expectations"]["quality"]
        assert {name: c["passed"] + c["failed"] for name, c in counted.items()} == {r["name"]: 2 * FILES for r in rules}
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(str(runners[0].query.runId))
    return len(jobs) / len(report.batches)


def test_a_batch_with_bad_records_runs_1_job_its_write_the_file_dlq_written_by_the_driver(spark, tmp_path):
    assert _jobs_per_batch(spark, tmp_path / "a") == 1
    assert _jobs_per_batch(spark, tmp_path / "b", extra_processors=8) == 1, "built-in processors must add no Spark job"
    assert _jobs_per_batch(spark, tmp_path / "c", rules=RULES) == 1, "expectation rules must add no Spark job"


def test_a_batch_without_bad_records_runs_1_job_its_write(spark, tmp_path):
    assert _jobs_per_batch(spark, tmp_path / "a", bad=False) == 1
    assert _jobs_per_batch(spark, tmp_path / "b", rules=RULES, bad=False) == 1, "expectation rules must add no Spark job"


WIDE = 100
WIDE_KINDS = ("DOUBLE", "STRING", "BIGINT", "TIMESTAMP")


def _wide_line(i: int, **override) -> str:
    """A record of ``WIDE`` fields, about 2,000 characters: longer than ``parsing.short_line_limit``."""
    values = {"DOUBLE": i * 1.5, "STRING": f"text-{i}-" + "w" * 8, "BIGINT": i * 31, "TIMESTAMP": "2026-11-26T10:00:00Z"}
    record = {"id": i, "name": f"n{i}", "addr": {"street": f"{i} Main St", "city": "c"},
              **{f"f{j:02d}": values[WIDE_KINDS[j % 4]] for j in range(WIDE - 3)}}
    record.update(override)
    return json.dumps({k: v for k, v in record.items() if v is not None})


def test_a_wide_batch_with_long_bad_lines_runs_1_job_their_reasons_worked_out_in_the_pass(spark, tmp_path):
    """Records of 100 fields: a rejected line is longer than ``parsing.short_line_limit``, but holds no run of number
    characters over the number limit, so it cannot be over a size limit and its reason is worked out in the pass
    (``parsing.decidable_in_the_pass``): no reason is pending, the parquet DLQ is written by the driver, 1 job a batch."""
    schema = ", ".join(["id BIGINT NOT NULL", "name STRING NOT NULL", "addr STRUCT<street: STRING, city: STRING>",
                        *(f"f{j:02d} {WIDE_KINDS[j % 4]}" for j in range(WIDE - 3))])
    for f in range(FILES):
        base = 100 * f
        lines = [_wide_line(base + 1), _wide_line(base + 2, f00="not a number"), _wide_line(base + 3, name=None),
                 _wide_line(base + 4)[:1500], _wide_line(base + 5)]
        assert all(len(line) > 1000 for line in lines)
        write_lines(tmp_path / "in", f"{f}.json", lines)
    dlq = dlq_file(tmp_path / "dlq", size=0)
    dlq.settings["format"] = "parquet"
    spec = pipeline("jobs-wide", [file_source(tmp_path / "in", schema=schema, **{"max-files-per-trigger": 1})],
                    [file_dest(tmp_path / "out", fmt="parquet")], processors=[proc("cents", "sql", select=["*", "round(f00 * 100) AS c"])],
                    dlq=dlq)
    runners = []
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=runners.append)
    assert code == 0, report.error
    assert len(report.batches) == FILES and report.totals["dlq"] == 3 * FILES
    assert report.totals["written"] == {"out": 2 * FILES}
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(str(runners[0].query.runId))
    assert len(jobs) == FILES, f"{len(jobs)} jobs for {FILES} batches"
    rows = spark.read.parquet(str(tmp_path / "dlq")).collect()
    reasons = sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"], r["exception_class"].rsplit(".", 1)[1],
                      r["exception_message"].split(" (expected")[0]) for r in rows)
    assert reasons == sorted(
        (f"{f}.json", *reason) for f in range(FILES) for reason in [
            (2, "WrongTypeError", "record has field(s) of the wrong type: f00"),
            (3, "MissingFieldError", "record is missing required field(s): name"),
            (4, "MalformedRecordError", "malformed JSON record: not a JSON object"),
        ])


# -- Kafka -> Delta with a Kafka DLQ ---------------------------------------------------------------------------
#
# The pass is the Delta write itself (its files, written in a Delta transaction that commits after the DLQ): one
# job, as plain Structured Streaming appending to Delta. A batch with bad records adds none: the pass gathers each
# nacked record's DLQ entry with the Kafka record as read (key, value bytes, headers), the Kafka DLQ's records are
# a projection of those rows computed in the driver, and the driver produces them with Spark's Kafka writer task.
# No job rebuilds the table's state for the transaction id.

KAFKA_BATCHES = 3
PER_BATCH = 40


def _kafka_value(i: int, *, bad: bool) -> bytes:
    if bad and i % 10 == 3:
        return b'{"id": %d, "name": oops' % i  # not JSON
    return json.dumps({"id": i, "name": f"n{i}", "amount": i * 0.5}).encode()


def _kafka_delta_spec(kafka, topic: str, dlq_topic: str, lake):
    from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec, SourceSpec

    source = SourceSpec(id="events", plugin="kafka", settings={
        "servers": kafka.bootstrap, "topics": [topic], "starting-offsets": "earliest", "format": "json",
        "schema": "id BIGINT NOT NULL, name STRING, amount DOUBLE", "max-records-per-batch": PER_BATCH,
    })
    return pipeline(
        "jobs-kafka-delta", [source], [DestinationSpec(id="lake", plugin="delta", settings={"path": str(lake)})],
        dlq=DeadLetterQueueSpec(plugin="kafka", settings={"servers": kafka.bootstrap, "topic": dlq_topic}, window_size=0),
    )


def _jobs_by_batch(spark, group: str) -> dict[int, int]:
    """Spark jobs of the query's run, per batch (the batch id is the last line of their description)."""
    per_batch: dict[int, int] = {}
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None).iterator()
    while jobs.hasNext():
        job = jobs.next()
        if not (job.jobGroup().isDefined() and job.jobGroup().get() == group and job.description().isDefined()):
            continue
        last = job.description().get().splitlines()[-1]
        if last.startswith("batch = "):  # Delta's own jobs add what they do: "batch = 9: Compute snapshot for version: 10"
            batch = int(last.removeprefix("batch = ").split(":")[0])
            per_batch[batch] = per_batch.get(batch, 0) + 1
    return per_batch


def _produce_kafka_input(kafka, topic: str, batches: int, *, bad: bool) -> range:
    ids = range(batches * PER_BATCH)
    for partition in range(2):
        kafka.produce(topic, [_kafka_value(i, bad=bad) for i in ids if i % 2 == partition], partition=partition)
    return ids


def _kafka_delta_jobs(spark, kafka, tmp_path, *, bad: bool, table_exists: bool = True, batches: int = KAFKA_BATCHES) -> dict[int, int]:
    from pyspark.sql import types as T

    topic, dlq_topic = kafka.create_topic(partitions=2), kafka.create_topic()
    ids = _produce_kafka_input(kafka, topic, batches, bad=bad)
    lake = tmp_path / "lake"
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("name", T.StringType()),
                           T.StructField("amount", T.DoubleType())])
    if table_exists:
        spark.createDataFrame([], schema).write.format("delta").save(str(lake))
    runners = []
    code, report = execute(spark, _kafka_delta_spec(kafka, topic, dlq_topic, lake), state_dir=tmp_path / "state",
                           run_id="r1", on_runner=runners.append)
    assert code == 0, report.error
    bad_ids = [i for i in ids if bad and i % 10 == 3]
    assert len(report.batches) == batches
    assert all(b["dlq"] > 0 for b in report.batches) == bad  # every batch has bad records, or none has
    assert sorted(r["id"] for r in spark.read.format("delta").load(str(lake)).select("id").collect()) == [
        i for i in ids if i not in bad_ids]
    assert len(kafka.read_all(dlq_topic)) == len(bad_ids)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{lake}`").select("version", "operation").collect()
    created = ["WRITE"] if table_exists else []  # the test's own empty write; a missing table is created by batch 0's commit
    assert [r["operation"] for r in sorted(history, key=lambda r: r["version"])] == created + ["WRITE"] * batches
    if bad:  # the Kafka DLQ's admin client (the DLQ topic's end offsets, every batch) was kept for the run, then closed
        assert runners[0].dlq.admin._admin is None
    return _jobs_by_batch(spark, str(runners[0].query.runId))


def test_kafka_to_delta_runs_1_job_per_batch_with_or_without_bad_records_for_the_kafka_dlq(spark, kafka, tmp_path):
    assert _kafka_delta_jobs(spark, kafka, tmp_path / "good", bad=False) == {b: 1 for b in range(KAFKA_BATCHES)}
    assert _kafka_delta_jobs(spark, kafka, tmp_path / "bad", bad=True) == {b: 1 for b in range(KAFKA_BATCHES)}


def test_the_first_batch_into_a_new_delta_table_is_its_pass_and_the_job_delta_runs_after_a_table_s_first_commit(
        spark, kafka, tmp_path):
    """The missing table is created by batch 0's own commit (version 0: the table's metadata with the batch's files and
    transaction id), so batch 0 is written by the pass like every later batch, with no commit of its own for the table
    (the history: one WRITE per batch, checked in _kafka_delta_jobs). Delta's first commit of a table runs 1 job after
    it, as in plain Structured Streaming's first append (test_over_many_batches_...)."""
    jobs = _kafka_delta_jobs(spark, kafka, tmp_path, bad=False, table_exists=False)
    assert jobs == {0: 1 + 1, **{b: 1 for b in range(1, KAFKA_BATCHES)}}
    first = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'lake'}`").where("version = 0").select("operationMetrics").first()
    assert int(first["operationMetrics"]["numOutputRows"]) > 0, "version 0 holds batch 0's records"


# Over many batches, Delta writes a checkpoint of the table's log every 10 commits (``delta.checkpointInterval``), in
# the commit that reaches the version: Spark jobs of its own, in the batch whose commit it follows. Plain Structured
# Streaming appending to Delta with foreachBatch (the benchmark's floor) runs the same jobs for the same checkpoint.
# Both create a new table with batch 0's commit (version 0), so batch 10 commits version 10 in both.
CHECKPOINT_INTERVAL = 10
MANY_BATCHES = 12


def _floor_jobs(spark, kafka, tmp_path, batches: int) -> dict[int, int]:
    """Spark's Kafka source, from_json, foreachBatch appending to a new Delta table, no DLQ (bench/kafka_delta.py's floor)."""
    from pyspark.sql import functions as F

    topic = kafka.create_topic(partitions=2)
    _produce_kafka_input(kafka, topic, batches, bad=True)
    lake = tmp_path / "lake"
    parsed = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(PER_BATCH)).load()
              .select(F.from_json(F.col("value").cast("string"), "id BIGINT, name STRING, amount DOUBLE").alias("r")).select("r.*")
              .where(F.col("id").isNotNull()))
    query = (parsed.writeStream.foreachBatch(lambda df, _: df.write.format("delta").mode("append").save(str(lake)))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    assert len([p for p in (tmp_path / "checkpoint" / "commits").iterdir() if p.name.isdigit()]) == batches
    return _jobs_by_batch(spark, str(query.runId))


def test_over_many_batches_the_runner_runs_no_spark_job_that_plain_structured_streaming_into_delta_does_not(spark, kafka, tmp_path):
    """12 batches with bad records into a new table, the runner (Kafka DLQ) and the floor side by side: each runs 1 job
    per batch, 2 for its first (Delta's first commit of the table) and, for the batch whose commit reaches version 10
    (the same batch in both), as many more as the other for the same Delta checkpoint. Those are the extra jobs a
    many-batch run shows: Delta's, not the runner's."""
    runner = _kafka_delta_jobs(spark, kafka, tmp_path / "runner", bad=True, table_exists=False, batches=MANY_BATCHES)
    floor = _floor_jobs(spark, kafka, tmp_path / "floor", MANY_BATCHES)
    for lake in (tmp_path / "runner" / "lake", tmp_path / "floor" / "lake"):
        assert (lake / "_delta_log" / f"{CHECKPOINT_INTERVAL:020d}.checkpoint.parquet").exists()
    checkpoint_batch = CHECKPOINT_INTERVAL  # the batch that commits version 10, in both
    checkpoint_jobs = floor[checkpoint_batch] - 1
    assert checkpoint_jobs > 0, floor
    assert floor == {0: 2, **{b: 1 for b in range(1, MANY_BATCHES)}, checkpoint_batch: 1 + checkpoint_jobs}
    assert runner == floor, (runner, floor)
