"""`airflow-conduit dlq replay` that fails: one named line on the terminal, Spark's log (and its Java stack
trace) in the replay's driver.log; real local Spark."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from airflow_conduit.hooks.backends import lease
from test_one_writer import CLI, DEADLINE, FIXED, JAVA_TRACE, STRICT, codes_pipeline, json_rows

pytestmark = pytest.mark.integration


def test_a_replay_that_fails_prints_a_named_error_not_a_java_stack_trace(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text(json.dumps({"id": 1, "name": "a", "code": "A1"}) + "\n")
    state_dir = tmp_path / "state"
    ran = subprocess.run([CLI, "run", str(codes_pipeline(tmp_path, STRICT)), "--state-dir", str(state_dir)],
                         capture_output=True, text=True, timeout=DEADLINE)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert len(json_rows(tmp_path / "dlq")) == 1
    if (tmp_path / "lake").exists():
        (tmp_path / "lake").rename(tmp_path / "lake-before")
    (tmp_path / "lake").write_text("a file where the lake's folder should be\n")  # the lake cannot be written

    result = subprocess.run([CLI, "dlq", "replay", str(codes_pipeline(tmp_path, FIXED)), "--state-dir", str(state_dir)],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("FAILED: replay of pipeline codes: org.apache.hadoop.fs."), result.stderr
    assert "Parent path is not a directory" in lines[0] and "(error 1" in lines[0]  # the cause, and its code
    assert not any(t in result.stderr for t in JAVA_TRACE), result.stderr
    log = Path(lines[0].rsplit("Spark's log: ", 1)[1])
    assert log.parent.parent == state_dir / "runs" and log.parent.name.startswith("dlq-replay-")
    assert "\tat org.apache" in log.read_text()  # the stack trace is kept, in the replay's log
    assert not lease.is_held(lease.lease_path(state_dir))
