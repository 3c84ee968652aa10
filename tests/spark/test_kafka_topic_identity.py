"""A Kafka source topic deleted, or deleted and created again, under a pipeline's checkpoint, with a real broker.

The checkpoint keeps offsets by topic name; the runner keeps the topics' ids (KIP-516) with it
(spark/kafka_topics.py). A recreated topic is refused (2620) whether it holds more records than the
checkpoint's offsets or fewer, and ``on-topic-recreated: read-from-start`` reads it from its start; a topic
deleted before a run or while it runs (continuous and available-now) ends the run with the fatal 2610.
Also: nothing listening at the servers is answered by the start's metadata request.
"""

from __future__ import annotations

import threading
import time

from airflow_conduit.pipeline.model import SourceSpec
from airflow_conduit.recovery import codes
from airflow_conduit.spark.kafka_topics import PROBE_SECONDS, TOPIC_IDS_FILE
from airflow_conduit.spark.runner import execute
from postgres_server import free_port
from spark_helpers import dlq_file, file_dest, pipeline, read_json_rows

RUN_DEADLINE_SECONDS = 240.0


def raw_source(servers: str, topic: str, **settings) -> SourceSpec:
    values = {"servers": servers, "topics": [topic], "format": "raw", "starting-offsets": "earliest", **settings}
    return SourceSpec(id="in", plugin="kafka", settings=values)


def run(spark, tmp_path, source, run_id, **kw):
    spec = pipeline("kafka-ids", [source], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"), **kw)
    return execute(spark, spec, state_dir=tmp_path / "state", run_id=run_id)


def values(spark, tmp_path) -> list[str]:
    return sorted(row["value"] for row in read_json_rows(spark, tmp_path / "out"))


def recreate(kafka, topic: str) -> None:
    """Delete ``topic`` and create it again under its name (the broker may take a moment to let the name go)."""
    delete(kafka, topic)
    deadline = time.monotonic() + 120
    while True:
        try:
            kafka.create_topic(topic)
            return
        except Exception:  # noqa: BLE001 - "topic is marked for deletion" until the deletion completes
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def delete(kafka, topic: str) -> None:
    admin = kafka.admin()
    admin.delete_topics([topic])[topic].result(120)
    deadline = time.monotonic() + 120
    while topic in admin.list_topics(timeout=30).topics and time.monotonic() < deadline:
        time.sleep(0.2)


def test_a_topic_recreated_with_more_records_is_refused_then_read_from_its_start_when_asked(spark, kafka, tmp_path):
    topic = kafka.create_topic()
    kafka.produce(topic, [f"old-{i:02d}" for i in range(20)])
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), "r1")
    assert code == 0, report.error
    assert (tmp_path / "state" / TOPIC_IDS_FILE).exists()

    recreate(kafka, topic)
    kafka.produce(topic, [f"new-{i:02d}" for i in range(30)])  # more than the checkpoint's offset 20
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), "r2")
    assert code == codes.EXIT_FATAL, report.error
    assert report.error["code"] == codes.KAFKA_TOPIC_RECREATED and report.error["fatal"] is True
    assert f"Kafka topic '{topic}' of source 'in' was deleted and created again" in report.error["message"]
    assert "on-topic-recreated: read-from-start" in report.error["message"]
    assert report.totals["read"] == 0
    assert values(spark, tmp_path) == [f"old-{i:02d}" for i in range(20)]  # nothing of the new topic skipped or written

    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic, **{"on-topic-recreated": "read-from-start"}), "r3")
    assert code == 0, report.error
    assert report.totals["read"] == 30
    assert values(spark, tmp_path) == sorted([f"old-{i:02d}" for i in range(20)] + [f"new-{i:02d}" for i in range(30)])

    kafka.produce(topic, ["new-30"])  # and it goes on from there, with the new id recorded
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), "r4")
    assert code == 0, report.error
    assert report.totals["read"] == 1


def test_a_topic_recreated_with_fewer_records_is_refused_as_recreated_too(spark, kafka, tmp_path):
    topic = kafka.create_topic()
    kafka.produce(topic, [f"old-{i:02d}" for i in range(20)])
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), "r1")
    assert code == 0, report.error

    recreate(kafka, topic)
    kafka.produce(topic, [f"new-{i:02d}" for i in range(5)])  # fewer than the checkpoint's offset 20
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), "r2")
    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.KAFKA_TOPIC_RECREATED, report.error

    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic, **{"on-topic-recreated": "read-from-start"}), "r3")
    assert code == 0, report.error
    assert values(spark, tmp_path) == sorted([f"old-{i:02d}" for i in range(20)] + [f"new-{i:02d}" for i in range(5)])


def test_a_topic_deleted_between_runs_is_a_fatal_data_loss(spark, kafka, tmp_path):
    topic = kafka.create_topic()
    kafka.produce(topic, ["a", "b"])
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), "r1")
    assert code == 0, report.error
    delete(kafka, topic)
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), "r2")
    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.KAFKA_DATA_LOSS, report.error
    assert "was deleted since the pipeline last read it" in report.error["message"]


def _run_and_delete_after_first_batch(spark, kafka, tmp_path, topic, **kw):
    """Run in a thread; once a batch with records is in the report, delete the topic; the run's outcome."""
    runners, outcome = [], {}
    settings = kw.pop("settings", {})

    def target():
        spec = pipeline("kafka-del", [raw_source(kafka.bootstrap, topic, **settings)],
                        [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"), **kw)
        outcome["result"] = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=runners.append)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + RUN_DEADLINE_SECONDS
    while time.monotonic() < deadline and thread.is_alive() and not (runners and runners[0].report.totals["read"] > 0):
        time.sleep(0.2)
    assert runners and runners[0].report.totals["read"] > 0, "no batch read records"
    delete(kafka, topic)
    thread.join(RUN_DEADLINE_SECONDS)
    if thread.is_alive():
        runners[0].request_stop("the test gave up waiting")
        thread.join(120)
        raise AssertionError("the run did not end after its topic was deleted")
    return outcome["result"]


def test_a_topic_deleted_while_a_continuous_run_reads_it_ends_the_run_with_a_fatal_data_loss(spark, kafka, tmp_path):
    topic = kafka.create_topic()
    kafka.produce(topic, [f"v{i}" for i in range(10)])
    code, report = _run_and_delete_after_first_batch(spark, kafka, tmp_path, topic, mode="continuous",
                                                     trigger_interval_seconds=0.5)
    assert code == codes.EXIT_FATAL, report.error
    assert report.error["code"] == codes.KAFKA_DATA_LOSS, report.error
    assert f"Kafka topic '{topic}' of source 'in' was deleted while the pipeline was reading it" in report.error["message"]


def test_a_topic_deleted_while_an_available_now_run_reads_it_ends_the_run_with_a_fatal_data_loss(spark, kafka, tmp_path):
    topic = kafka.create_topic()
    kafka.produce(topic, [f"v{i:04d}" for i in range(2000)])
    code, report = _run_and_delete_after_first_batch(spark, kafka, tmp_path, topic,
                                                     settings={"max-records-per-batch": 1})
    assert code == codes.EXIT_FATAL, report.error
    assert report.error["code"] == codes.KAFKA_DATA_LOSS, report.error
    assert "was deleted while the pipeline was reading it" in report.error["message"]
    assert report.totals["read"] < 2000


def test_no_broker_at_the_servers_is_answered_by_the_start_s_metadata_request(spark, tmp_path):
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there; the source's own timeouts are left as Kafka's
    code, report = run(spark, tmp_path, raw_source(closed, "any"), "r1")
    assert code == codes.EXIT_TRANSIENT
    assert report.error["code"] == codes.KAFKA_UNREACHABLE and report.error["fatal"] is False
    assert f"no Kafka broker answered within {PROBE_SECONDS} s at {closed}: check the servers" in report.error["message"]
    assert report.error["stage"] == "source" and report.error["component_id"] == "in"
