"""`airflow-conduit run` with a Kafka source on real brokers: a broker outage is recovered through the recovery
engine without losing a record, and an Airflow kafka connection's password reaches the job and nowhere else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafka_sasl import ALICE, granted_and_closed_topics, sasl_broker

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).parent / "airflow-conduit")
DEADLINE = 600.0


class Cli:
    """The CLI as a process whose output is collected while it runs."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([CLI, "run", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what, deadline: float = DEADLINE, describe: str = "") -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if what():
                return
            if self.proc.poll() is not None:
                time.sleep(1)
                if what():
                    return
                break
            time.sleep(1)
        raise AssertionError(f"not reached: {describe}\n--- CLI output ---\n{self.output[-6000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=300)
        finally:
            self._reader.join(timeout=30)


def written(folder: Path) -> list[dict]:
    rows = []
    for path in folder.rglob("*.json"):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def spec_file(tmp_path: Path, source_settings: str, mode: str = "continuous") -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"version: '1'\npipeline:\n  id: kafka-cli\n  mode: {mode}\n  trigger-interval: 1s\n"
        "  sources:\n    - id: in\n      plugin: kafka\n      settings:\n"
        + "".join(f"        {line}\n" for line in source_settings.strip().splitlines())
        + "  destinations:\n    - id: out\n      plugin: file\n      settings: {path: out}\n"
        "  dead-letter-queue:\n    plugin: file\n    settings: {path: dlq}\n"
    )
    return path


def test_a_broker_outage_is_recovered_through_the_recovery_engine_and_loses_nothing(kafka, tmp_path):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [json.dumps({"id": i}).encode() for i in range(10)])
    spec = spec_file(tmp_path, f"""
servers: {kafka.bootstrap}
topics: [{topic}]
schema: "id BIGINT NOT NULL"
options: {{default.api.timeout.ms: 5000, request.timeout.ms: 2500}}
""")
    cli = Cli(str(spec), "--state-dir", str(tmp_path / "state"), "--min-delay", "1s", "--max-delay", "5s",
              "--poll-interval", "1")
    try:
        cli.wait_for(lambda: len(written(tmp_path / "out")) >= 10, describe="the first 10 records written")
        kafka.stop()
        try:
            cli.wait_for(lambda: "restarting in" in cli.output, describe="a transient failure and a restart")
        finally:
            kafka.start()
        kafka.produce(topic, [json.dumps({"id": i}).encode() for i in range(10, 20)])
        cli.wait_for(lambda: len(written(tmp_path / "out")) >= 20, describe="the 10 records produced after the outage")
        time.sleep(3)  # a record written twice would show up here
    finally:
        code = cli.stop()
    ids = sorted(row["id"] for row in written(tmp_path / "out"))
    assert ids == list(range(20)), ids
    assert written(tmp_path / "dlq") == []
    out = cli.output
    assert "classified as transient, code 1110" in out or "classified as transient, code 1210" in out, out[-4000:]
    assert "degraded" not in out
    assert code in (0, 130), out[-3000:]


def test_an_airflow_kafka_connection_password_reaches_the_job_and_nowhere_else(tmp_path):
    with sasl_broker() as broker:
        topics = granted_and_closed_topics(broker, records=5)
        extra = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "PLAIN", "sasl.username": ALICE[0], "sasl.password": ALICE[1]}
        spec = spec_file(tmp_path, f"connection: kafka_secured\ntopics: [{topics['granted']}]\nformat: raw",
                         mode="available-now")
        cli = Cli(str(spec), "--state-dir", str(tmp_path / "state"), "--max-retries", "0", "--poll-interval", "1",
                  env={"AIRFLOW_CONN_KAFKA_SECURED": json.dumps({"conn_type": "kafka", "extra": extra})})
        try:
            cli.wait_for(lambda: cli.proc.poll() is not None, describe="the available-now run to end")
        finally:
            code = cli.stop()
    assert code == 0, cli.output[-4000:]
    assert sorted(json.loads(row["value"])["id"] for row in written(tmp_path / "out")) == [0, 1, 2, 3, 4]
    assert ALICE[1] not in cli.output
    leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file() and p.name != "pipeline.yaml"
              and ALICE[1].encode() in p.read_bytes()]
    assert leaked == [], leaked


def test_a_missing_kafka_connection_is_refused_before_anything_starts(tmp_path):
    spec = spec_file(tmp_path, "connection: kafka_nowhere\ntopics: [t]\nformat: raw", mode="available-now")
    result = subprocess.run([CLI, "run", str(spec), "--state-dir", str(tmp_path / "state")], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the Airflow connection 'kafka_nowhere' does not exist" in result.stderr
    assert str(spec) in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "runs").exists()
