"""Kafka -> Delta with a Kafka dead letter queue, exactly once through real SIGKILLs of the driver.

The job runs as a child driver process (the entry point spark-submit runs, its own local Spark) on a real
broker (the session's ``kafka`` fixture) and writes a real Delta table. It is killed at several points, each
time restarted on the same state directory:

- right after the DLQ wrote batch 0 to its topic, before the DLQ's commit marker (``crash_before_commit``):
  the re-run finds the records in the topic and must not produce them again;
- right after the Delta write of batch 1, before the runner's commit bookkeeping (``crash_before_commit``):
  the table's transaction log has the batch, the re-run must skip it;
- right after the Delta destination committed batch 2, before Spark's checkpoint committed the batch
  (``crash_after_destination``);
- from outside, with SIGKILL to the driver's process group, as soon as the checkpoint shows a batch
  committed: between two batches (or early in the next one).

Then the input topic and the DLQ topic are read with an independent client (confluent-kafka) and the table
with Spark: every record of the input is in the table or in the DLQ topic, exactly once (count and ids).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from airflow_conduit.spark.packaging import entrypoint_path

pytestmark = pytest.mark.spark

PARTITIONS = 3
RECORDS = 900  # 1 % bad: 9 records that are not JSON or have a wrong type
PER_BATCH = 150  # max-records-per-batch: 6 batches
KILL_DEADLINE_SECONDS = 900


def good_value(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "amount": i * 0.5}).encode()


def bad_value(i: int) -> bytes:
    """Half of them are not JSON, half have an id that is not a number."""
    return b'{"id": ' + str(i).encode() + b', "name": oops' if (i // 100) % 2 else json.dumps({"id": f"#{i}", "name": "x"}).encode()


def is_bad(i: int) -> bool:
    return i % 100 == 37


def produce_input(kafka, topic: str) -> None:
    """Record i goes to partition i % PARTITIONS, so every batch reads all partitions and has a bad record."""
    for partition in range(PARTITIONS):
        ids = range(partition, RECORDS, PARTITIONS)
        kafka.produce(topic, [bad_value(i) if is_bad(i) else good_value(i) for i in ids],
                      keys=[str(i).encode() for i in ids], partition=partition)


def spec_file(folder: Path, servers: str, topic: str, dlq_topic: str) -> Path:
    text = f"""\
version: "1"
pipeline:
  id: kafka-to-delta
  mode: available-now
  sources:
    - id: events
      plugin: kafka
      settings:
        servers: {servers}
        topics: [{topic}]
        starting-offsets: earliest
        max-records-per-batch: {PER_BATCH}
        format: json
        schema: "id BIGINT NOT NULL, name STRING, amount DOUBLE"
  destinations:
    - id: lake
      plugin: delta
      settings: {{path: lake}}
  dead-letter-queue:
    plugin: kafka
    settings: {{servers: "{servers}", topic: {dlq_topic}}}
    window-size: 0
"""
    path = folder / "pipeline.yaml"
    path.write_text(text)
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    return env


def _args(spec: Path, state: Path, run_id: str, faults: dict | None) -> list[str]:
    args = [sys.executable, entrypoint_path(), "--spec", str(spec), "--run-id", run_id, "--state-dir", str(state)]
    return args + (["--faults", json.dumps(faults)] if faults else [])


def driver(spec: Path, state: Path, run_id: str, faults: dict | None = None) -> subprocess.CompletedProcess:
    """The job's entry point as a child driver (its own local Spark), as spark-submit runs it."""
    return subprocess.run(_args(spec, state, run_id, faults), cwd=spec.parent, env=_env(), capture_output=True,
                          text=True, timeout=KILL_DEADLINE_SECONDS)


def committed_batches(state: Path) -> set[int]:
    """The batches Spark's checkpoint has committed (its commit log: one file per batch)."""
    folder = state / "checkpoints" / "pipeline" / "commits"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def kill_between_batches(spec: Path, state: Path, run_id: str) -> int:
    """Start the driver and SIGKILL its whole process group as soon as one more batch is committed."""
    before = committed_batches(state)
    log = open(state.parent / f"{run_id}.log", "w")
    proc = subprocess.Popen(_args(spec, state, run_id, None), cwd=spec.parent, env=_env(), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + KILL_DEADLINE_SECONDS
        while time.monotonic() < deadline and proc.poll() is None and not committed_batches(state) - before:
            time.sleep(0.05)
        assert proc.poll() is None, f"the driver ended before it could be killed: {(state.parent / f'{run_id}.log').read_text()[-3000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=120)
    finally:
        log.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def header(message, name: str) -> str | None:
    values = [v for k, v in (message.headers() or []) if k == name]
    return values[0].decode() if values and values[0] is not None else None


def test_kafka_to_delta_is_exactly_once_across_sigkills_at_each_commit_point(spark, kafka, tmp_path):
    topic = kafka.create_topic(partitions=PARTITIONS)
    dlq_topic = kafka.create_topic(partitions=1)
    produce_input(kafka, topic)
    spec = spec_file(tmp_path, kafka.bootstrap, topic, dlq_topic)
    state = tmp_path / "state"

    kills = [
        ("k1", {"crash_before_commit": {"destination": "dead-letter-queue", "batch": 0}}),
        ("k2", {"crash_before_commit": {"destination": "lake", "batch": 1}}),
        ("k3", {"crash_after_destination": {"destination": "lake", "batch": 2}}),
    ]
    for run_id, faults in kills:
        killed = driver(spec, state, run_id, faults)
        assert killed.returncode in (-9, 137), (run_id, killed.returncode, killed.stderr[-3000:])
    assert committed_batches(state) == {0, 1}, "k3 died before Spark committed batch 2"
    assert kill_between_batches(spec, state, "k4") in (-9, 137)
    assert max(committed_batches(state)) >= 2
    done = driver(spec, state, "k5")
    assert done.returncode == 0, done.stderr[-3000:]

    # The input, read back with the independent client: what every record must become.
    source = kafka.read_all(topic)
    assert len(source) == RECORDS
    expected_good = sorted(json.loads(m.value())["id"] for m in source if not is_bad(int(m.key())))
    expected_bad = {(m.partition(), m.offset()): m.value() for m in source if is_bad(int(m.key()))}
    assert len(expected_bad) == RECORDS // 100

    lake = [r.asDict() for r in spark.read.format("delta").load(str(tmp_path / "lake")).collect()]
    assert sorted(r["id"] for r in lake) == expected_good  # none missing, none twice

    dead = kafka.read_all(dlq_topic)
    positions = Counter(header(m, "conduit.dlq.source_file") for m in dead)
    assert all(n == 1 for n in positions.values()), f"DLQ records produced twice: {positions.most_common(3)}"
    assert set(positions) == {f"{topic}/{p}/{o}" for p, o in expected_bad}
    for message in dead:
        partition, offset = (int(x) for x in header(message, "conduit.dlq.source_file").rsplit("/", 2)[1:])
        assert message.value() == expected_bad[(partition, offset)], "the DLQ keeps the record's bytes as they were"
        assert header(message, "__connect.errors.topic") == topic  # Kafka Connect's headers: the record's origin
        assert header(message, "__connect.errors.partition") == str(partition)
        assert header(message, "__connect.errors.offset") == str(offset)
        assert int(message.key()) % 100 == 37, "the DLQ keeps the record's key"
        assert header(message, "__connect.errors.stage") == "source"
        assert header(message, "__connect.errors.connector.name") == "events"
    assert len(lake) + len(dead) == RECORDS  # every record exactly once in the table or the DLQ topic

    # Each batch is one Delta commit: the re-runs found their batch in the table's log and wrote nothing. The
    # table was created by batch 0's commit (k1 died before it, leaving no table): version 0 is batch 0's WRITE.
    batches = max(committed_batches(state)) + 1
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'lake'}`").select("version", "operation").collect()
    assert [r["operation"] for r in sorted(history, key=lambda r: r["version"])] == ["WRITE"] * batches
    final = json.loads((state / "runs" / "k5" / "report.json").read_text())
    assert final["status"] == "succeeded"
