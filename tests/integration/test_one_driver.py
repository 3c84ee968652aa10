"""Issue 10's "two drivers on one state dir", end to end with `airflow-conduit run` and real local Spark.

A continuous pipeline runs; once the lake committed batch 0, the local wrapper of run s01 is
SIGKILLed (as a user or the OOM killer would). Its spark-submit and driver must go with it, the
engine restarts the pipeline, and run s02 starts only when nothing of s01 is left. Then SIGTERM
stops the CLI like a user stop: the job is stopped and recovery.json says `stopped`. Every good
record in the lake once, every bad record in the DLQ once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_conduit.hooks.backends import lease

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).parent / "airflow-conduit")
DEADLINE = 300  # seconds: Spark starts twice on a shared 2-core machine


def wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert proc.poll() is None, f"the CLI ended (exit {proc.returncode}) while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return value


def committed_lake_ids(folder: Path) -> list[int] | None:
    """Ids in the lake's committed files, as a Spark reader sees them: paths under ``_temporary`` (a writer
    killed mid-batch, or one still writing) are not data. None while a file is being written."""
    import pyarrow.parquet as pq

    files = sorted(f for f in folder.rglob("*.parquet") if not any(part.startswith("_") for part in f.relative_to(folder).parts))
    try:
        return sorted(i for f in files for i in pq.read_table(f).column("id").to_pylist())
    except (OSError, ValueError):  # pyarrow.ArrowInvalid is a ValueError
        return None


def committed_dlq_records(folder: Path) -> list[dict]:
    files = sorted(f for f in folder.rglob("*.json") if not any(part.startswith("_") for part in f.relative_to(folder).parts))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def current_handle(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / "recovery.json").read_text()).get("current")
    except (OSError, ValueError):
        return None


def test_a_killed_wrapper_never_leaves_two_drivers_and_a_stop_is_recorded(orders, tmp_path):
    spec = orders / "continuous.yaml"
    spec.write_text((orders / "pipeline.yaml").read_text().replace("mode: available-now", "mode: continuous"))
    state_dir = orders / "state"
    with open(tmp_path / "cli.log", "w") as log:
        cli = subprocess.Popen([CLI, "run", str(spec), "--state-dir", str(state_dir), "--min-delay", "1s",
                                "--poll-interval", "1"], stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        first = wait_for(lambda: (h := current_handle(state_dir)) and h["run_id"].endswith("-s01") and h, "run s01", cli)
        wait_for(lambda: (state_dir / "commits" / "lake" / "0").exists(), "batch 0 in the lake", cli)
        s01 = lease.run_marker(state_dir, first["run_id"])
        assert len(lease.run_processes(first["pid"], s01)) >= 3  # wrapper, spark-submit JVM, Python driver
        os.kill(first["pid"], signal.SIGKILL)

        second = wait_for(lambda: (h := current_handle(state_dir)) and h["run_id"].endswith("-s02") and h, "run s02", cli)
        assert lease.run_processes(first["pid"], s01) == []  # nothing of s01 lives while s02 runs
        wait_for(lambda: len(lease.run_processes(second["pid"], lease.run_marker(state_dir, second["run_id"]))) >= 3,
                 "run s02's driver", cli)
        expected = json.loads((orders / "expected.json").read_text())
        wait_for(lambda: committed_lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
                 and len(committed_dlq_records(orders / "out" / "dlq")) == len(expected["dlq"]),
                 "every record in the lake and every bad one in the DLQ", cli)
        assert len(lease.run_processes(first["pid"], s01)) == 0

        cli.send_signal(signal.SIGTERM)  # a user stop
        assert cli.wait(timeout=DEADLINE) == 130
    finally:
        if cli.poll() is None:
            cli.kill()
    out = (tmp_path / "cli.log").read_text()
    assert "Traceback" not in out, out[-3000:]
    record = json.loads((state_dir / "recovery.json").read_text())
    assert record["pipeline_state"] == "stopped" and record["current"] is None
    assert record["submissions"] == 2
    assert lease.run_processes(second["pid"], lease.run_marker(state_dir, second["run_id"])) == []
    assert not lease.is_held(lease.lease_path(state_dir))
    assert committed_lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])  # nothing twice
    assert len(committed_dlq_records(orders / "out" / "dlq")) == len(expected["dlq"])
