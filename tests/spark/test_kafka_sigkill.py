"""Real driver kills (spark-submit, SIGKILL) around the Kafka writes: every record once in each topic.

The driver kills itself with SIGKILL (``--faults``) after the Kafka destination wrote a batch but before its
commit marker, after the Kafka DLQ wrote but before its marker, and after the DLQ committed; a last run
finishes. The topics are read back with confluent-kafka, a client independent of Spark's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from airflow_conduit.runs.report import totals_over_runs
from airflow_conduit.spark.connector_jars import with_connectors
from spark_helpers import good, write_lines
from test_entrypoint import _env, _report
from test_entrypoint import _submit_cmd as _plain_submit_cmd
from test_kafka_sink import headers_of

pytestmark = pytest.mark.spark


def _submit_cmd(tmp_path: Path, spec: Path, run_id: str, faults: dict | None = None) -> list[str]:
    """spark-submit as the local launcher runs it for a Kafka pipeline: the connector's jars on its command line."""
    cmd = _plain_submit_cmd(tmp_path, spec, run_id, faults)
    at = cmd.index("--py-files")
    return [*cmd[:at], "--conf", f"spark.jars={with_connectors({}, {'kafka'})['spark.jars']}", *cmd[at:]]


def _spec(folder: Path, bootstrap: str, out_topic: str, dlq_topic: str) -> Path:
    path = folder / "kafka.yaml"
    path.write_text(f"""\
version: "1"
pipeline:
  id: kafka-kill
  sources:
    - id: in
      plugin: file
      settings:
        path: in
        schema: "id BIGINT NOT NULL, name STRING, amount DOUBLE"
        max-files-per-trigger: 1
  destinations:
    - id: out
      plugin: kafka
      settings: {{servers: "{bootstrap}", topic: {out_topic}, key: id}}
  dead-letter-queue:
    plugin: kafka
    settings: {{servers: "{bootstrap}", topic: {dlq_topic}}}
    window-size: 0
""")
    return path


def test_sigkilled_drivers_around_the_kafka_commits_leave_every_record_once_in_the_topics(spark, tmp_path, kafka):
    good_ids, bad = [], []
    for f in range(4):
        ids = [f * 10 + k for k in range(3)]
        good_ids += ids
        write_lines(tmp_path / "in", f"{f}.json", [good(ids[0]), "{oops", good(ids[1]), '{"id": "x"}', good(ids[2])])
        bad += [(f"{f}.json", 2), (f"{f}.json", 4)]
    out_topic, dlq_topic = kafka.create_topic(partitions=2), kafka.create_topic(partitions=2)
    spec = _spec(tmp_path, kafka.bootstrap, out_topic, dlq_topic)
    kills = [
        ("r1", {"crash_before_commit": {"destination": "out", "batch": 0}}),
        ("r2", {"crash_before_commit": {"destination": "dead-letter-queue", "batch": 1}}),
        ("r3", {"crash_after_destination": {"destination": "dead-letter-queue", "batch": 2}}),
    ]
    for run_id, faults in kills:
        result = subprocess.run(_submit_cmd(tmp_path, spec, run_id, faults), cwd=tmp_path, env=_env(),
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 137, result.stderr[-3000:]
        assert _report(tmp_path, run_id)["status"] == "running"  # killed: no report written after the kill
    result = subprocess.run(_submit_cmd(tmp_path, spec, "r4"), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _report(tmp_path, "r4")["status"] == "succeeded"

    # each report counts the rows its own run wrote: r1 had written batch 0 to out before it was killed
    [r2_batch_0] = [b for b in _report(tmp_path, "r2")["batches"] if b["batch_id"] == 0]
    assert r2_batch_0["written"] == {"out": 0} and r2_batch_0["earlier_attempt_wrote"] == {"out": 3}
    assert _report(tmp_path, "r2")["totals"]["written"] == {"out": 0}
    # r2 had produced batch 1's DLQ records: r3 produced none of them again
    assert _report(tmp_path, "r3")["counters"]["deadletterqueue-records-produced"] == 0
    reports = [_report(tmp_path, run_id) for run_id in ("r1", "r2", "r3", "r4")]
    assert totals_over_runs(reports)["written"] == {"out": len(good_ids)}  # the pipeline's: every row once

    out = kafka.read_all(out_topic)
    assert sorted(json.loads(m.value())["id"] for m in out) == sorted(good_ids)  # none missing, none twice
    dlq = kafka.read_all(dlq_topic)
    positions = sorted((headers_of(m)["__connect.errors.topic"].rsplit("/", 1)[1], int(headers_of(m)["__connect.errors.offset"]))
                       for m in dlq)
    assert positions == sorted(bad)
    assert all(headers_of(m)["__connect.errors.stage"] == "source" for m in dlq)
