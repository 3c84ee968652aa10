"""The recovery state survives the task: a worker crash or an Airflow retry resumes it.

The earlier try is played by hand (same launcher, same session, same recovery.json the operator
writes); dag.test() then runs the next try. The watched job is the tiny stand-in for the entry
point (tests/integration/jobs/tiny_job.py) under real spark-submit: these tests are about what the
operator remembers, not about pipelines.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook
from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.supervisor import RunSupervisor
from airflow_conduit.recovery import RecoveryOptions
from conftest import REPO, run_test_dag, xcoms

pytestmark = pytest.mark.integration
SPEC = str(REPO / "examples" / "orders" / "pipeline.yaml")  # validated only: the tiny job ignores it


def earlier_try(dag_id: str, run_after: datetime, state_dir: Path, session: RunSupervisor) -> str:
    """Write what an earlier try of the task left behind; return the Airflow run id dag.test() will use."""
    run_id = f"manual__{run_after.isoformat()}"
    StateDir(state_dir).write_recovery(
        {
            "pipeline_id": "orders",
            "pipeline_state": session.pipeline_state,
            "owner": {"dag_id": dag_id, "run_id": run_id, "task_id": "pipeline", "map_index": -1},
            "submissions": session.submissions,
            "current": session.current.to_dict() if session.current else None,
            "carry": session.carry(),
        }
    )
    return run_id


def starts(state_dir: Path) -> list[str]:
    return (state_dir / "faults" / "tiny_job_starts").read_text().split()


def test_a_new_try_watches_the_job_the_crashed_one_submitted(airflow_db, tmp_path, tiny_job):
    dag_id, state_dir = "resume_after_worker_crash", tmp_path / "state"
    run_after = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    hook = SparkPipelineHook("conduit_local", backend_options={"application": tiny_job, "py_files": ""})
    session = RunSupervisor(RecoveryOptions.from_mapping({"min-delay": "1s"}), run_prefix="crashed", pipeline_id="orders")
    session.current = hook.submit_job(SPEC, session.next_run_id(), str(state_dir), {"sleep": 4, "progress": 3})
    earlier_try(dag_id, run_after, state_dir, session)  # the worker died here, before deferring

    dr = run_test_dag(dag_id, spec=SPEC, state_dir=str(state_dir), poll_interval=0.5, min_delay="1s",
                      conn_id="conduit_local", backend_options={"application": tiny_job, "py_files": ""},
                      _dag_test={"run_after": run_after.isoformat(), "logical_date": run_after.isoformat()})
    assert dr.state == "success"
    summary = xcoms(dag_id, dr.run_id)["return_value"]
    assert summary["submissions"] == 1 and summary["run_id"] == "crashed-s01"
    assert starts(state_dir) == ["crashed-s01"]  # watched, never submitted again


def test_an_airflow_retry_keeps_the_retry_window(airflow_db, tmp_path, tiny_job):
    dag_id, state_dir = "retry_keeps_window", tmp_path / "state"
    run_after = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
    options = RecoveryOptions.from_mapping({"min-delay": "1s", "max-retries": 2, "max-retries-window": "1h"})
    session = RunSupervisor(options, run_prefix="earlier", pipeline_id="orders")
    for _ in range(2):  # the earlier try already used both restarts of the window, then its worker died
        session.submissions += 1
        session.engine.on_failure({"code": 1100, "fatal": False, "message": "connection refused"})
        session.engine.on_restarted()
    session.submissions += 1
    earlier_try(dag_id, run_after, state_dir, session)

    dr = run_test_dag(dag_id, spec=SPEC, state_dir=str(state_dir), poll_interval=0.5, min_delay="1s",
                      max_retries=2, max_retries_window="1h",
                      conn_id="conduit_local", backend_options={"application": tiny_job, "py_files": "", "faults": {"exit": 75}},
                      _dag_test={"run_after": run_after.isoformat(), "logical_date": run_after.isoformat()})
    assert dr.state == "failed"
    assert len(starts(state_dir)) == 1  # one more run, then degraded: the window was not reset
    record = json.loads((state_dir / "recovery.json").read_text())
    assert record["pipeline_state"] == "degraded"
    audit = record["carry"]["recovery"]["audit"]
    assert audit[0]["event"] == "started" and audit[-1]["event"] == "degraded"  # the earlier try's log kept
    assert "max-retries reached" in audit[-1]["message"]
