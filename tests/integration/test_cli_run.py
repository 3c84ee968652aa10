"""`airflow-conduit run`: the operator's decisions without Airflow scheduling, on real local Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import dlq_lines, lake_ids

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).parent / "airflow-conduit")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "run", *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def test_restarts_after_transient_failures_and_prints_the_timeline(orders):
    state_dir = orders / "state"
    result = run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(state_dir), "--min-delay", "1s",
                     "--backoff-factor", "2", "--max-retries", "3", "--poll-interval", "1",
                     "--faults", json.dumps({"transient_first_runs": 2}))
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert out.count("submitted: run") == 3
    assert "restarting in 1s (restart 1 of 3 within max-retries-window 5m)" in out
    assert "restarting in 2s (restart 2 of 3 within max-retries-window 5m)" in out
    assert "recovered: run" in out and "succeeded: run" in out
    assert "dead letter queue 7" in out
    record = json.loads((state_dir / "recovery.json").read_text())
    assert record["pipeline_state"] == "stopped" and record["submissions"] == 3
    expected = json.loads((orders / "expected.json").read_text())
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
    assert len(dlq_lines(orders / "out" / "dlq")) == len(expected["dlq"])


def test_fatal_error_degrades_with_exit_code_3(orders):
    result = run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state"), "--poll-interval", "0.5",
                     "--faults", json.dumps({"fatal": True}))
    assert result.returncode == 3
    assert result.stdout.count("submitted: run") == 1
    assert "degraded because fatal error" in result.stdout
    assert "pipeline degraded:" in result.stderr and "last audit events:" in result.stderr


def test_bad_spec_is_refused_before_spark_starts(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text('version: "1"\npipeline:\n  id: bad\n  sourcez: []\n')
    result = run_cli(str(spec), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    assert "sourcez" in result.stderr and str(spec) in result.stderr
    assert not (tmp_path / "state").exists()


def test_relative_state_dir_runs_the_pipeline(orders):
    """Issue 10: a relative --state-dir doubled the code zip's path; Spark never started and it restarted for ever."""
    result = run_cli("pipeline.yaml", "--state-dir", "relstate", "--max-retries", "0", "--poll-interval", "1", cwd=orders)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"state dir {orders / 'relstate'}" in result.stdout  # absolute from the start
    assert result.stdout.count("submitted: run") == 1 and "succeeded: run" in result.stdout
    record = json.loads((orders / "relstate" / "recovery.json").read_text())
    assert record["pipeline_state"] == "stopped"
    expected = json.loads((orders / "expected.json").read_text())
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
    assert not list((orders / "relstate" / "runs").glob("*/relstate"))  # nothing written under a doubled path
    driver_log = next((orders / "relstate" / "runs").glob("*/driver.log")).read_text(errors="replace")
    assert "'SparkUI'" not in driver_log and "Spark UI:" not in result.stdout  # off for a CLI run unless --spark-ui


def test_spark_submit_refusing_the_master_degrades_once_instead_of_looping(orders):
    """Issue 10: a deterministic start failure (spark-submit rejects the master) is fatal 2700, not restarted for ever."""
    result = run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state"), "--master", "bogus://nowhere",
                     "--poll-interval", "0.5")  # default max-retries -1: only the classification can stop it
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("submitted: run") == 1
    assert "classified as fatal, code 2700" in result.stdout
    # the timeline says why, under the code, not only in the degraded message
    assert "  error: org.apache.spark.SparkException: Master must either be yarn or start with spark" in result.stdout
    assert "error: org.apache.spark.SparkException: Master must either be yarn or start with spark" in result.stderr


def test_the_records_line_counts_every_run_of_the_pipeline_not_only_the_last(orders):
    """The driver is SIGKILLed after the DLQ committed batch 1 and before the lake did: run s02 finishes batch 1.
    orders has two files read one per batch: 8 lines in batch 0 (recorded by s01), 7 in batch 1."""
    crash = {"crash_after_destination": {"destination": "dead-letter-queue", "batch": 1}}
    result = run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state"), "--min-delay", "1s",
                     "--poll-interval", "1", "--faults", json.dumps(crash))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("submitted: run") == 2, result.stdout
    expected = json.loads((orders / "expected.json").read_text())
    written, filtered, dlq = len(expected["written_ids"]), len(expected["filtered_ids"]), len(expected["dlq"])
    assert f"records: read {expected['input_lines']}, filtered {filtered}, dead letter queue {dlq}, " \
           f"written {{'lake': {written}}}" in result.stdout.splitlines(), result.stdout
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
    assert len(dlq_lines(orders / "out" / "dlq")) == dlq


# Runs the CLI's main() and prints which airflow modules the process loaded by the end.
AIRFLOW_PROBE = """
import sys
from airflow_conduit.cli.main import main
code = main(sys.argv[1:])
print("airflow modules loaded:", sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow.")))
sys.exit(code)
"""


def test_a_run_on_a_plain_master_never_imports_airflow(orders, tmp_path):
    """`run --master local[*]` submits, watches and ends its run without loading Airflow (its import was most of the
    command's start-up): the run, its exit code, its summary and recovery.json are as before."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__CONDUIT__")}
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")  # no airflow.cfg with a [conduit] section
    env.pop("AIRFLOW_CONFIG", None)
    result = subprocess.run([sys.executable, "-c", AIRFLOW_PROBE, "run", str(orders / "pipeline.yaml"), "--state-dir",
                             str(orders / "state"), "--poll-interval", "1"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "airflow modules loaded: []" in result.stdout.splitlines(), result.stdout[-2000:]
    assert result.stdout.count("submitted: run") == 1 and "succeeded: run" in result.stdout
    assert "dead letter queue 7" in result.stdout
    record = json.loads((orders / "state" / "recovery.json").read_text())
    assert record["pipeline_state"] == "stopped" and record["submissions"] == 1
    expected = json.loads((orders / "expected.json").read_text())
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
