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

from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.report import RunReport
from conftest import dlq_lines, lake_ids, load_reference_dag, task_instance, xcoms

pytestmark = pytest.mark.integration
REFERENCE_DAGS = {"conduit_orders_available_now", "conduit_events_continuous", "conduit_dlq_alert", "conduit_orders_dlq_replay",
                  "conduit_kafka_orders_to_delta", "conduit_orders_sdp"}


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


def fix_orders_spec(spec: Path) -> None:
    """The fix: an order without a customer is kept, as customer 'unknown' (it was dead-lettered: NOT NULL).
    The fixed spec also checks a (warn) expectation on what reaches the lake: its counts come back in XCom."""
    text = spec.read_text()
    assert "customer STRING NOT NULL" in text and "      processors:\n        - id: default-currency" in text
    assert "    - id: tidy\n" in text
    text = text.replace("    - id: tidy\n", "    - id: quality\n      plugin: expect\n      settings:\n        rules:\n"
                        "          - {name: known-currency, condition: \"currency IN ('EUR', 'USD')\", action: warn}\n"
                        "    - id: tidy\n")
    text = text.replace("customer STRING NOT NULL", "customer STRING").replace(
        "      processors:\n        - id: default-currency",
        "      processors:\n        - id: unknown-customer\n          plugin: field.set\n"
        "          settings: {field: customer, value: \"coalesce(customer, 'unknown')\"}\n        - id: default-currency",
    )
    spec.write_text(text)


def test_dlq_replay_dag_runs_the_loop_pipeline_dlq_check_then_a_replay_when_asked(airflow_db, orders):
    """A scheduled-like run: the pipeline dead-letters 7 orders, the DLQ check tells the owner, the replay is
    skipped. After the spec is fixed, a run triggered with replay=true (dry_run off) moves the order that now
    passes to the lake, once; the others go back to the DLQ with a replay count."""
    spec, state_dir = orders / "pipeline.yaml", orders / "state"
    expected = json.loads((orders / "expected.json").read_text())
    dag = load_reference_dag("conduit_orders_dlq_replay.py")
    dr = dag.test(run_conf={"spec": str(spec), "state_dir": str(state_dir)})
    assert dr.state == "success"
    state = {t: task_instance(dr.dag_id, dr.run_id, t).state for t in
             ("orders_pipeline", "dlq_received_records", "tell_the_owner", "replay_requested", "dlq_replay")}
    assert state == {"orders_pipeline": "success", "dlq_received_records": "success", "tell_the_owner": "success",
                     "replay_requested": "success", "dlq_replay": "skipped"}
    assert len(dlq_lines(orders / "out" / "dlq")) == len(expected["dlq"]) == 7
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])

    fix_orders_spec(spec)
    dr = dag.test(run_conf={"spec": str(spec), "state_dir": str(state_dir), "replay": True, "dry_run": False})
    assert dr.state == "success"
    assert task_instance(dr.dag_id, dr.run_id, "dlq_received_records").state == "skipped"  # no new input, no new DLQ record
    assert task_instance(dr.dag_id, dr.run_id, "dlq_replay").state == "success"
    replay = task_xcom(dr.dag_id, dr.run_id, "dlq_replay")["replay"]
    assert (replay["replayed"], replay["passing"], replay["still_failing"]) == (7, {"lake": 1}, 6)
    report = task_xcom(dr.dag_id, dr.run_id, "dlq_replay")["report"]  # the rule saw the one order that now passes
    counted = {"quality": {"known-currency": {"action": "warn", "passed": 1, "failed": 0}}}
    assert report["totals"]["expectations"] == counted
    assert report["expectations_by_batch"] == [{"batch_id": -1, "expectations": counted}]
    assert lake_ids(orders / "out" / "lake") == sorted([*expected["written_ids"], 7])  # order 7, once
    back = [r for r in dlq_lines(orders / "out" / "dlq") if r["batch_id"] == -1]
    assert len(back) == 6 and {r["replay_count"] for r in back} == {1}


def task_xcom(dag_id: str, run_id: str, task_id: str, key: str = "return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id, key=key).one()
        return row.value
