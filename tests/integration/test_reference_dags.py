"""The reference DAGs in dags/ parse cleanly, and the alert DAG's sensors fire on real state dirs.

(The scheduled available-now DAG runs end to end in test_operator.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_conduit.pipeline.state_store import StateDir
from airflow_conduit.pipeline.report import RunReport
from conftest import load_reference_dag, task_instance, xcoms

pytestmark = pytest.mark.integration
REFERENCE_DAGS = {"conduit_orders_available_now", "conduit_events_continuous", "conduit_dlq_alert"}


def airflow(*args: str) -> str:
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), *args], capture_output=True, text=True, check=True)
    return result.stdout


def json_output(text: str):
    """The JSON document of an `--output json` command (Airflow may print warnings before it)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("[", "{")))
    return json.loads("\n".join(lines[start:]))


def test_reference_dags_have_no_import_errors(airflow_db):
    airflow("dags", "reserialize", "--bundle-name", "dags-folder")
    errors = airflow("dags", "list-import-errors", "--output", "json")
    assert json_output(errors) == []
    listed = {row["dag_id"] for row in json_output(airflow("dags", "list", "--output", "json"))}
    assert REFERENCE_DAGS <= listed


def write_report(state_dir: Path, run_id: str, dlq_per_batch: list[int]) -> None:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    report = RunReport(pipeline_id="orders", run_id=run_id, status="succeeded", started_at=now)
    for batch_id, dlq in enumerate(dlq_per_batch):
        report.add_batch(batch_id, read=10, filtered=0, dlq=dlq, written={"lake": 10 - dlq})
    report.write_atomic(state_dir / "runs" / run_id / "report.json")


def test_dlq_alert_dag_alerts_on_a_full_dlq_and_a_degraded_pipeline(airflow_db, tmp_path):
    state_dir = tmp_path / "orders-state"
    write_report(state_dir, "r1", [2, 2])
    write_report(state_dir, "r2", [3])  # 7 DLQ records in this hour: more than the threshold of 5
    StateDir(state_dir).write_recovery({"pipeline_id": "orders", "pipeline_state": "degraded"})
    dag = load_reference_dag("conduit_dlq_alert.py")
    # A manual run's data interval starts at its logical date: put it before the batches were written.
    logical_date = datetime.now(timezone.utc) - timedelta(minutes=30)
    dr = dag.test(logical_date=logical_date, run_conf={"state_dir": str(state_dir)})
    assert dr.state == "success"
    assert task_instance(dr.dag_id, dr.run_id, "alert_dlq").state == "success"
    assert task_instance(dr.dag_id, dr.run_id, "alert_degraded").state == "success"
    assert xcoms(dr.dag_id, dr.run_id)["return_value"] is not None


def test_dlq_alert_dag_on_a_manual_run_without_logical_date_uses_the_threshold_param(airflow_db, tmp_path):
    """A run triggered in the UI has no logical date (no data interval): it counts the hour before it
    was triggered, and the `threshold` param is the sensor's threshold (4 records > 3 alerts; 5 would not)."""
    state_dir = tmp_path / "orders-state"
    write_report(state_dir, "r1", [4])
    StateDir(state_dir).write_recovery({"pipeline_id": "orders", "pipeline_state": "degraded"})
    dag = load_reference_dag("conduit_dlq_alert.py")
    dr = dag.test(logical_date=None, run_conf={"state_dir": str(state_dir), "threshold": 3})
    assert dr.state == "success"
    assert task_instance(dr.dag_id, dr.run_id, "dlq_over_threshold").state == "success"
    assert task_instance(dr.dag_id, dr.run_id, "alert_dlq").state == "success"
