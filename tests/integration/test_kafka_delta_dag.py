"""The reference DAG conduit_kafka_orders_to_delta runs the Kafka -> Delta example on the test broker.

dag.test() of dags/conduit_kafka_orders_to_delta.py on a copy of examples/kafka_delta, its broker given by
KAFKA_BOOTSTRAP_SERVERS as a user sets it, its topics renamed to new ones: the sample orders are produced to the
input topic; the good ones must land in the Delta table once each, the bad ones in the DLQ topic with their bytes and
Kafka Connect's headers; a second run reads only what arrived since (offsets in the checkpoint).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, load_reference_dag, task_instance

pytestmark = pytest.mark.integration


def delta_rows(table: Path) -> list[dict]:
    """The rows of an append-only Delta table, read from its log's added files (no Spark in this process)."""
    import pyarrow.parquet as pq

    live: set[str] = set()
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                live.add(action["add"]["path"])
            if "remove" in action:
                live.discard(action["remove"]["path"])
    return [row for path in sorted(live) for row in pq.read_table(table / path).to_pylist()]


def header(message, name: str) -> str | None:
    values = [v for k, v in (message.headers() or []) if k == name]
    return values[0].decode() if values and values[0] is not None else None


def example_on_topics_of_its_own(kafka, tmp_path: Path) -> tuple[Path, list[bytes], str, str]:
    """A copy of examples/kafka_delta reading and dead-lettering new topics of the worker's broker (its test files
    share it: records another file produced to `orders` would be read here too), the sample orders produced to the
    input topic's two partitions. Returns the copy, the sample's lines, the input topic and the DLQ topic."""
    example = tmp_path / "kafka_delta"
    shutil.copytree(REPO / "examples" / "kafka_delta", example, ignore=shutil.ignore_patterns("out", "state*"))
    topic, dlq = kafka.create_topic(partitions=2), kafka.create_topic()
    spec = example / "pipeline.yaml"
    text = spec.read_text()
    renamed = text.replace("topics: [orders]", f"topics: [{topic}]").replace("topic: orders-dlq", f"topic: {dlq}")
    assert topic in renamed and dlq in renamed, "examples/kafka_delta/pipeline.yaml no longer names its topics so"
    spec.write_text(renamed)
    lines = (example / "sample" / "orders.jsonl").read_bytes().splitlines()
    for partition in (0, 1):
        kafka.produce(topic, lines[partition::2], partition=partition)
    return example, lines, topic, dlq


def test_kafka_to_delta_reference_dag_runs_the_example_on_the_broker(airflow_db, kafka, tmp_path, monkeypatch):
    example, lines, topic, dlq = example_on_topics_of_its_own(kafka, tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap)
    expected = json.loads((REPO / "examples" / "orders" / "expected.json").read_text())  # the same 15 orders

    dag = load_reference_dag("conduit_kafka_orders_to_delta.py")
    conf = {"spec": str(example / "pipeline.yaml"), "state_dir": str(example / "state")}
    dr = dag.test(run_conf=conf)
    assert dr.state == "success", task_instance(dr.dag_id, dr.run_id, "kafka_orders_to_delta").state

    rows = delta_rows(example / "out" / "orders")
    assert sorted(r["id"] for r in rows) == sorted(expected["written_ids"])
    assert all(r["kafka_position"].startswith(f"{topic}/") for r in rows)  # the Kafka metadata, kept by a processor
    assert {r["id"]: r["currency"] for r in rows}[2] == "EUR"
    dead = kafka.read_all(dlq)
    assert len(dead) == len(expected["dlq"]) == 7
    assert sorted(m.value() for m in dead) == sorted(lines[i] for i in range(len(lines)) if json_id(lines[i]) not in
                                                     {*expected["written_ids"], *expected["filtered_ids"]})
    assert Counter(header(m, "__connect.errors.stage") for m in dead) == Counter(r["stage"] for r in expected["dlq"])
    assert all(header(m, "__connect.errors.exception.message") for m in dead)

    # The next scheduled run: only what arrived since the last one.
    kafka.produce(topic, [json.dumps({"id": 100 + i, "customer": f"late{i}", "amount": 1.0}).encode() for i in range(2)])
    dr = dag.test(run_conf=conf)
    assert dr.state == "success"
    ids = sorted(r["id"] for r in delta_rows(example / "out" / "orders"))
    assert ids == sorted([*expected["written_ids"], 100, 101])
    assert len(kafka.read_all(dlq)) == 7


def json_id(line: bytes):
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value.get("id") if isinstance(value, dict) else None
