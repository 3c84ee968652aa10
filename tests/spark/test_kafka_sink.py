"""Destination ``kafka`` and the Kafka DLQ against a real broker: exactly once per batch across crashes.

Records are read back with confluent-kafka (librdkafka), a client independent of Spark's. The crashes
here are in-process (SimulatedCrash where ``--faults`` would SIGKILL the driver); test_kafka_sigkill.py
kills real spark-submit drivers.
"""

from __future__ import annotations

import json

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec
from airflow_conduit.spark.faults import SimulatedCrash
from airflow_conduit.spark.runner import execute
from spark_helpers import file_source, good, pipeline, write_lines

pytestmark = pytest.mark.spark

CONNECT_HEADERS = [
    f"__connect.errors.{name}" for name in (
        "topic", "offset", "connector.name", "task.id", "stage", "class.name", "exception.class.name",
        "exception.message",
    )
]


def _crash():
    raise SimulatedCrash("killed")


def _input(folder, files=3):
    """files x (3 good + 1 malformed + 1 wrong type); returns (good ids, {(file, line): text} of the bad lines)."""
    good_ids, bad = [], {}
    for f in range(files):
        ids = [f * 10 + k for k in range(3)]
        good_ids += ids
        lines = [good(ids[0]), '{"id": oops' + str(f), good(ids[1]), '{"id": "x%d"}' % f, good(ids[2])]
        write_lines(folder, f"part-{f}.json", lines)
        bad[(f"part-{f}.json", 2)] = lines[1]
        bad[(f"part-{f}.json", 4)] = lines[3]
    return sorted(good_ids), bad


def kafka_dest(kafka, topic, did="out", **extra):
    return DestinationSpec(id=did, plugin="kafka", settings={"servers": kafka.bootstrap, "topic": topic, **extra})


def kafka_dlq(kafka, topic, **kw):
    return DeadLetterQueueSpec(plugin="kafka", settings={"servers": kafka.bootstrap, "topic": topic}, window_size=0, **kw)


def headers_of(message) -> dict[str, str]:
    return {k: (v.decode() if v is not None else None) for k, v in (message.headers() or [])}


def _spec(tmp_path, kafka, out_topic, dlq_topic, **dest):
    return pipeline(
        "kafka-eo",
        [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})],
        [kafka_dest(kafka, out_topic, key="id", **dest)],
        dlq=kafka_dlq(kafka, dlq_topic),
    )


def _assert_exactly_once(kafka, out_topic, dlq_topic, good_ids, bad):
    out = kafka.read_all(out_topic)
    assert sorted(json.loads(m.value())["id"] for m in out) == good_ids  # none missing, none twice
    dlq = kafka.read_all(dlq_topic)
    got = sorted((headers_of(m)["__connect.errors.topic"].rsplit("/", 1)[1], int(headers_of(m)["__connect.errors.offset"]))
                 for m in dlq)
    assert got == sorted(bad)
    return out, dlq


def test_file_to_kafka_with_a_kafka_dlq_writes_every_record_once_with_connect_headers(spark, tmp_path, kafka):
    good_ids, bad = _input(tmp_path / "in")
    out_topic, dlq_topic = kafka.create_topic(partitions=2), kafka.create_topic()
    spec = _spec(tmp_path, kafka, out_topic, dlq_topic, headers={"origin": "lake"}, **{"header-fields": ["name"]})
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    out, dlq = _assert_exactly_once(kafka, out_topic, dlq_topic, good_ids, bad)
    for message in out:
        record = json.loads(message.value())
        assert message.key() == str(record["id"]).encode()
        h = headers_of(message)
        assert h["origin"] == "lake" and h["name"] == record["name"]
        assert h["conduit.pipeline.id"] == "kafka-eo" and h["conduit.batch.id"].isdigit() and h["conduit.record.id"]
        assert h["conduit.query.id"]
    assert len({(headers_of(m)["conduit.batch.id"], headers_of(m)["conduit.record.id"]) for m in out}) == len(out)
    for message in dlq:
        h = headers_of(message)
        assert all(name in h for name in CONNECT_HEADERS), h
        position = (h["__connect.errors.topic"].rsplit("/", 1)[1], int(h["__connect.errors.offset"]))
        assert message.value() == bad[position].encode()  # the original line, byte for byte
        assert h["__connect.errors.stage"] == "source" and h["__connect.errors.connector.name"] == "in"
        assert h["__connect.errors.exception.class.name"].startswith("airflow_conduit.spark.")
        assert h["conduit.pipeline.id"] == "kafka-eo" and h["conduit.dlq.source_id"] == "in"
        assert h["__connect.errors.task.id"] == "r1"


def _run(spark, spec, state, run_id, **faults):
    return execute(spark, spec, state_dir=state, run_id=run_id, faults=faults or None, crash=_crash)


def test_crashes_before_and_after_the_kafka_commits_write_each_record_once(spark, tmp_path, kafka):
    good_ids, bad = _input(tmp_path / "in", files=4)
    out_topic, dlq_topic = kafka.create_topic(partitions=3), kafka.create_topic(partitions=2)
    spec = _spec(tmp_path, kafka, out_topic, dlq_topic)
    state = tmp_path / "state"
    crashes = [
        ("r1", {"crash_before_commit": {"destination": "out", "batch": 0}}),  # out wrote batch 0, no marker
        ("r2", {"crash_before_commit": {"destination": "dead-letter-queue", "batch": 1}}),  # DLQ wrote, no marker
        ("r3", {"crash_after_destination": {"destination": "dead-letter-queue", "batch": 2}}),  # DLQ committed
    ]
    for run_id, fault in crashes:
        with pytest.raises(SimulatedCrash):
            _run(spark, spec, state, run_id, **fault)
    code, report = _run(spark, spec, state, "r4")
    assert code == 0, report.error

    _assert_exactly_once(kafka, out_topic, dlq_topic, good_ids, bad)
    runs = {p.name: json.loads((p / "report.json").read_text()) for p in (state / "runs").iterdir()}
    # the re-runs found the crashed attempt's records in the topic and wrote none of them again
    # (the report counts what its own run wrote: none; the crashed attempt's rows are earlier_attempt_wrote)
    r2_batch_0 = runs["r2"]["batches"][0]
    assert r2_batch_0["batch_id"] == 0 and r2_batch_0["written"]["out"] == 0
    assert r2_batch_0["earlier_attempt_wrote"] == {"out": 3}
    assert (state / "kafka-intents" / "out" / "0.json").exists()
    assert (state / "kafka-intents" / "dead-letter-queue" / "1.json").exists()


def test_a_kafka_source_record_in_the_kafka_dlq_keeps_its_value_bytes_key_and_headers(spark, tmp_path, kafka):
    from test_kafka_source import kafka_source

    source_topic, out_topic, dlq_topic = kafka.create_topic(partitions=2), kafka.create_topic(), kafka.create_topic()
    rows = [  # (value, key, headers, bad)
        (good(1).encode(), b"k1", [("trace", b"t1")], False),
        (b"not json \xff at all", b"k2", [("trace", b"t2"), ("trace", b"t2-again")], True),
        (b'{"id": "seven"}', None, None, True),
        (good(4).encode(), b"k4", None, False),
    ]
    kafka.produce(source_topic, [r[0] for r in rows], keys=[r[1] for r in rows], headers=[r[2] for r in rows], partition=1)
    spec = pipeline("kafka-to-kafka", [kafka_source(kafka, source_topic, sid="orders")],
                    [kafka_dest(kafka, out_topic, key="id")], dlq=kafka_dlq(kafka, dlq_topic))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    assert sorted(json.loads(m.value())["id"] for m in kafka.read_all(out_topic)) == [1, 4]
    dlq = kafka.read_all(dlq_topic)
    by_offset = {int(headers_of(m)["__connect.errors.offset"]): m for m in dlq}
    assert sorted(by_offset) == [1, 2]
    for offset, message in by_offset.items():
        value, key, headers, _ = rows[offset]
        assert message.value() == value and message.key() == key  # byte for byte, the key kept
        original = [(k, v) for k, v in (message.headers() or []) if not k.startswith(("__connect.", "conduit."))]
        assert original == (headers or [])  # the original headers, in order, repeated names too
        h = headers_of(message)
        assert (h["__connect.errors.topic"], h["__connect.errors.partition"]) == (source_topic, "1")
        assert h["conduit.dlq.source_file"] == f"{source_topic}/1/{offset}"


def test_a_dlq_record_over_the_topic_limit_stops_the_run_before_any_commit_and_is_written_once_the_limit_is_raised(
    spark, tmp_path, kafka
):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    out_topic = kafka.create_topic()
    dlq_topic = kafka.create_topic(config={"max.message.bytes": "2000"})
    huge = '{"id": "' + "x" * 5000 + '"}'
    write_lines(tmp_path / "in", "0.json", [good(1), huge, '{"id": oops', good(2)])
    spec = pipeline("too-big", [file_source(tmp_path / "in")], [kafka_dest(kafka, out_topic, key="id")],
                    dlq=kafka_dlq(kafka, dlq_topic))
    state = tmp_path / "state"
    code, report = execute(spark, spec, state_dir=state, run_id="r1")
    assert code == 70 and report.error["code"] == 2310 and report.error["fatal"] is True
    assert report.error["stage"] == "dlq"
    assert "max.message.bytes" in report.error["message"] and dlq_topic in report.error["message"]
    assert "0.json|0|2" in report.error["message"] and "the limit: 2,000 bytes" in report.error["message"]
    assert not (state / "commits" / "out" / "0").exists() and not (state / "commits" / "dead-letter-queue" / "0").exists()
    assert kafka.read_all(out_topic) == []  # the DLQ is written first: no destination wrote the batch

    admin = kafka.admin()
    resource = ConfigResource("topic", dlq_topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "100000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=60)
    code, report = execute(spark, spec, state_dir=state, run_id="r2")
    assert code == 0, report.error
    assert sorted(json.loads(m.value())["id"] for m in kafka.read_all(out_topic)) == [1, 2]
    dlq = kafka.read_all(dlq_topic)
    assert sorted(m.value().decode() for m in dlq) == sorted([huge, '{"id": oops'])  # each once, the big one whole


def test_replay_reads_a_kafka_dlq_and_writes_to_a_kafka_destination_once(spark, tmp_path, kafka):
    import dataclasses

    from airflow_conduit.spark.replay import replay

    out_topic, dlq_topic = kafka.create_topic(), kafka.create_topic()
    write_lines(tmp_path / "in", "0.json", [good(1), '{"id": 2, "name": "n2", "amount": "cheap"}', "{broken"])
    spec = pipeline("replay-kafka", [file_source(tmp_path / "in")], [kafka_dest(kafka, out_topic, key="id")],
                    dlq=kafka_dlq(kafka, dlq_topic))
    state = tmp_path / "state"
    code, report = execute(spark, spec, state_dir=state, run_id="r1")
    assert code == 0 and report.totals["dlq"] == 2
    fixed_source = dataclasses.replace(spec.sources[0], settings={**spec.sources[0].settings,
                                                                   "schema": "id BIGINT NOT NULL, name STRING, amount STRING"})
    fixed = dataclasses.replace(spec, sources=(fixed_source,))
    result = replay(spark, fixed, state_dir=state)
    assert (result.selected, result.passed, result.still_failing) == (2, 1, 1)
    assert sorted(json.loads(m.value())["id"] for m in kafka.read_all(out_topic)) == [1, 2]
    dlq = kafka.read_all(dlq_topic)
    back = [m for m in dlq if headers_of(m)["conduit.batch.id"] == "-1"]
    assert len(dlq) == 3 and len(back) == 1
    assert back[0].value() == b"{broken" and headers_of(back[0])["conduit.dlq.replay_count"] == "1"
    again = replay(spark, fixed, state_dir=state)  # replayed records never again; the one sent back only after a change
    assert again.selected == 0
    assert again.skipped == {"already replayed": 2, "spec unchanged since it failed": 1}


def test_a_destination_topic_that_does_not_exist_is_a_fatal_error_naming_it(spark, tmp_path, kafka):
    write_lines(tmp_path / "in", "0.json", [good(1)])
    spec = pipeline("no-topic", [file_source(tmp_path / "in")], [kafka_dest(kafka, "no-such-topic", key="id")],
                    dlq=kafka_dlq(kafka, kafka.create_topic()))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 70 and report.error["fatal"] is True, report.error
    assert report.error["stage"] == "destination" and report.error["component_id"] == "out"
    assert "no-such-topic" in report.error["message"] or "UnknownTopicOrPartition" in report.error["message"]


def test_produce_in_driver_sends_a_local_relation_through_spark_kafka_writer_task_without_a_spark_job(spark, kafka):
    """Contract of spark/jvm/kafka_producer.py's ``produce_in_driver`` and ``producer_config`` (Spark's internal
    ``org.apache.spark.sql.kafka010.KafkaWriteTask``, a local relation's rows collected with ``executeCollect``) and of
    spark/jvm/local_relations.py: a Spark upgrade that changes either fails here, not in a pipeline."""
    from pyspark.sql import types as T

    from airflow_conduit.spark.jvm.kafka_producer import produce_in_driver, producer_config
    from airflow_conduit.spark.jvm.local_relations import in_driver, is_local

    topic = kafka.create_topic()
    schema = T.StructType([
        T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
        T.StructField("headers", T.ArrayType(T.StructType([
            T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())]))),
    ])
    rows = [(b"k%d" % i, b"\xff\x00value-%d" % i, [("h", b"\x01%d" % i)]) for i in range(3)]
    records = in_driver(spark.createDataFrame(rows, schema).repartition(2))
    assert is_local(records) and not is_local(spark.createDataFrame(rows, schema).repartition(2))
    config = producer_config(spark, {"kafka.bootstrap.servers": kafka.bootstrap})

    group = "produce-in-driver-contract"
    spark.sparkContext.setJobGroup(group, "the contract test's produce")
    try:
        produce_in_driver(spark, records, config, topic)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []

    got = sorted((m.key(), m.value(), m.headers()) for m in kafka.read_all(topic))
    assert got == sorted((k, v, [("h", hv) for _, hv in h]) for k, v, h in rows)


def test_compiled_records_produce_each_batch_rows_through_projections_compiled_once_and_refuse_other_rows(spark, kafka):
    """Contract of ``kafka_sink.CompiledRecords`` (spark/jvm/kafka_producer.py's ``CompiledProjections``: the Kafka DLQ's
    records compiled once per run): a later batch's rows,
    a new local relation of the same schema, are produced with the records' values and headers, without a Spark job and
    without the optimizer running over the records' plan; the size guard refuses an oversized record before any is
    produced; rows of another schema or not local are refused (None: the records are then planned as usual)."""
    from pyspark.sql import functions as F

    from airflow_conduit.spark.jvm.kafka_producer import produce_in_driver, producer_config
    from airflow_conduit.spark.jvm.local_relations import in_driver
    from airflow_conduit.spark.kafka_sink import OVER_LIMIT, RECORD_ID, CompiledRecords, over_limit, size_guard

    def rows_of(batch: int, values: list[str]):
        return in_driver(spark.createDataFrame([(f"r{i}", v, batch) for i, v in enumerate(values)], "rid string, text string, batch long"))

    def records_of(rows):
        records = rows.select(F.col("rid").cast("binary").alias("key"), F.col("text").cast("binary").alias("value"),
                              F.array(F.struct(F.lit("batch").alias("key"), F.col("batch").cast("string").cast("binary").alias("value")))
                              .alias("headers"), F.col("rid").alias(RECORD_ID))
        return records.select("*", size_guard(200))

    first = rows_of(0, ["a"])
    compiled = CompiledRecords(spark, records_of(first), first)
    topic = kafka.create_topic()
    config = producer_config(spark, {"kafka.bootstrap.servers": kafka.bootstrap})
    rule_executor = getattr(getattr(spark.sparkContext._jvm, "org.apache.spark.sql.catalyst.rules.RuleExecutor$"), "MODULE$")

    def rule_runs(produce) -> int:
        """Spark's analyzer and optimizer rules run by ``produce``."""
        before = rule_executor.getCurrentMetrics().numRuns()
        produce()
        return rule_executor.getCurrentMetrics().numRuns() - before

    later, planned, other_topic = rows_of(7, ["x", "yy", "zzz"]), records_of(rows_of(7, ["x"])), kafka.create_topic()
    group = "compiled-records-contract"
    spark.sparkContext.setJobGroup(group, "the contract test's produce")
    try:
        data = compiled.rows_of(later)  # the rows' own small plan is optimised here, as Spark computes any DataFrame
        compiled_runs = rule_runs(lambda: compiled.produce(data, config, topic))
        planned_runs = rule_runs(lambda: produce_in_driver(spark, planned, config, other_topic))  # as before: planned per batch
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    assert compiled_runs * 10 < planned_runs, f"the records' plan is neither analysed nor optimised: {compiled_runs} vs {planned_runs}"
    got = [(m.key(), m.value(), m.headers()) for m in kafka.read_all(topic)]
    assert got == [(b"r%d" % i, v, [("batch", b"7")]) for i, v in enumerate([b"x", b"yy", b"zzz"])]

    big = rows_of(8, ["small", "b" * 500])
    with pytest.raises(Exception) as refused:
        compiled.produce(compiled.rows_of(big), config, topic)
    assert OVER_LIMIT in str(refused.value) and over_limit(refused.value)[0] == "r1"
    assert len(kafka.read_all(topic)) == 3, "nothing of the refused rows was produced"

    assert compiled.rows_of(spark.createDataFrame([("r", "t")], "rid string, text string")) is None  # another schema
    spread = spark.createDataFrame([("r", "t", 9)], "rid string, text string, batch long").repartition(2)
    assert compiled.rows_of(spread) is None  # not a local relation
