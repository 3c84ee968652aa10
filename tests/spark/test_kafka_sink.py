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
    assert runs["r2"]["batches"][0]["batch_id"] == 0 and runs["r2"]["batches"][0]["written"]["out"] == 3
    assert (state / "kafka-intents" / "out" / "0.json").exists()
    assert (state / "kafka-intents" / "dead-letter-queue" / "1.json").exists()
