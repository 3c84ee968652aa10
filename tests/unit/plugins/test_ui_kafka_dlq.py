"""The DLQ view of a Kafka DLQ: records read from the real test broker, with their Kafka positions."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from airflow_conduit.plugins import pages
from airflow_conduit.plugins.state_view import Redactor, dlq_rows_from_kafka, kafka_dlq_address
from airflow_conduit.plugins.view import pipeline_page
from test_ui_views import T0, write_run


def _dlq_headers(run_id: str, source_file: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    """The headers the Kafka DLQ writer puts on a record a Kafka source read (spark/kafka_sink.py)."""
    values = {
        "conduit.pipeline.id": "p", "conduit.batch.id": "3", "conduit.query.id": "q", "conduit.record.id": "x",
        "__connect.errors.topic": source_file, "__connect.errors.partition": str(partition),
        "__connect.errors.offset": str(offset), "__connect.errors.connector.name": "orders",
        "__connect.errors.task.id": run_id, "__connect.errors.stage": "source", "__connect.errors.class.name": "kafka",
        "__connect.errors.exception.class.name": "airflow_conduit.spark.MalformedRecordError",
        "__connect.errors.exception.message": "record is not a JSON object",
        "conduit.dlq.source_id": "orders", "conduit.dlq.source_file": source_file,
        "conduit.dlq.source_split_start": str(partition), "conduit.dlq.source_position": str(offset),
    }
    return [(k, v.encode()) for k, v in values.items()]


def test_a_kafka_dlq_shows_the_source_position_and_the_dlq_position(tmp_path, kafka):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [b"{oops", b"{also bad"], partition=1, headers=[
        _dlq_headers("x-t1-s01", "orders-topic/4/17", 4, 17), _dlq_headers("someone-else", "orders-topic/0/1", 0, 1)])
    location = f"kafka://{kafka.bootstrap}/{topic}"
    assert kafka_dlq_address(location) == (kafka.bootstrap, topic)
    assert kafka_dlq_address(f"kafka://connection:kafka_default/{topic}") is None  # its servers are in Airflow

    rows, truncated = dlq_rows_from_kafka(location, {"x-t1-s01"})
    assert not truncated and len(rows) == 1  # only the task's own runs
    [row] = rows
    assert row["dlq_position"] == f"{topic}/1/0" and row["batch_id"] == 3 and row["record"] == "{oops"
    assert (row["source_file"], row["source_split_start"], row["source_position"]) == ("orders-topic/4/17", 4, 17)

    write_run(tmp_path, "x-t1-s01", dlq=1)
    task = SimpleNamespace(
        dag_id="d", run_id="r", task_id="t", map_index=-1, ti_state="success", try_number=1, state_dir=tmp_path,
        run_prefixes=["x-t1"], job={"run_id": "x-t1-s01"}, xcom={"conduit_dlq": location}, audit=[],
        recovery=None, pipeline_state="stopped", submissions=1,
    )
    page = pipeline_page(task, Redactor(), now=T0 + timedelta(minutes=1))
    assert page.dlq_readable and page.dlq_total == 1
    html = pages.pipeline_view(page, pages.Links("", "/conduit"), Redactor().text)
    assert "orders-topic/4/17" in html  # where the source read it: topic/partition/offset
    assert f"DLQ {topic}/1/0" in html  # where it is in the DLQ topic
    assert "MalformedRecordError" in html
