"""RecoveringSparkPipelineOperator with dag.test() and real local Spark (spark-submit, local[*]).

Faults are injected with the job's documented --faults (the backend option ``faults``, docs/architecture.md): transient failures
on the first N runs of a state dir, or a fatal failure; both fail the run before its SparkSession,
so only the successful run pays for a full Spark start.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from airflow_conduit.recovery.clock import parse_iso
from conftest import dlq_lines, lake_ids, load_reference_dag, run_test_dag, task_instance, xcoms

pytestmark = pytest.mark.integration


def audit_events(state_dir: Path) -> list[dict]:
    record = json.loads((state_dir / "recovery.json").read_text())
    return record["carry"]["recovery"]["audit"]


def run_folders(state_dir: Path) -> list[str]:
    runs = state_dir / "runs"
    return sorted(p.name for p in runs.iterdir()) if runs.exists() else []


def at(event: dict) -> datetime:
    return parse_iso(event["at"])  # a trailing Z, which Python 3.10's fromisoformat does not read


def test_two_transient_failures_then_success(airflow_db, orders, monkeypatch):
    """The reference DAG (dags/conduit_orders_available_now.py: min-delay 1s, backoff-factor 2,
    max-retries 5 in 5m) on a copy of the sample orders, with the first two runs failing.
    The state dir is given relative to the worker's working directory (the driver runs elsewhere)."""
    state_dir = orders / "state"
    monkeypatch.chdir(orders)
    dag = load_reference_dag("conduit_orders_available_now.py")
    dr = dag.test(
        run_conf={"spec": str(orders / "pipeline.yaml"), "state_dir": "state", "faults": {"transient_first_runs": 2}}
    )
    assert dr.state == "success"
    values = xcoms(dr.dag_id, dr.run_id)
    summary = values["return_value"]
    assert summary["submissions"] == 3 and len(run_folders(state_dir)) == 3
    assert summary["report"]["status"] == "succeeded"
    assert values["pipeline_state"] == "stopped"  # available-now: the job finished

    events = audit_events(state_dir)
    kinds = [e["event"] for e in events]
    assert kinds.count("failed") == 2 and kinds.count("restarted") == 2
    assert kinds[-1] == "stopped" and "recovered" in kinds
    scheduled = [e for e in events if e["event"] == "restart-scheduled"]
    restarted = [e for e in events if e["event"] == "restarted"]
    assert [e["details"]["delay_seconds"] for e in scheduled] == [1.0, 2.0]  # min-delay 1s, backoff-factor 2
    for plan, done in zip(scheduled, restarted):
        waited = (at(done) - at(plan)).total_seconds()
        assert waited >= plan["details"]["delay_seconds"], f"restarted after {waited}s, before the backoff delay"
    assert values["audit_log"] == events  # XCom shows the same audit log

    # Nothing lost, nothing twice: the good orders in the lake once each, the bad ones in the DLQ once each.
    expected = json.loads((orders / "expected.json").read_text())
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
    assert len(dlq_lines(orders / "out" / "dlq")) == len(expected["dlq"])


def test_fatal_error_degrades_after_one_submission_without_airflow_retry(airflow_db, orders):
    state_dir = orders / "state"
    dr = run_test_dag(
        "fatal_degrades",
        spec=str(orders / "pipeline.yaml"),
        state_dir=str(state_dir),
        min_delay="1s",
        poll_interval=0.5,
        backend_options={"faults": {"fatal": True}},
        retries=3,  # even with Airflow retries configured, a degraded pipeline is not retried
    )
    assert dr.state == "failed"
    ti = task_instance(dr.dag_id, dr.run_id)
    assert ti.state == "failed"
    assert run_folders(state_dir) == [run_folders(state_dir)[0]]  # exactly one submission
    events = audit_events(state_dir)
    assert [e["event"] for e in events] == ["started", "failed", "degraded"]
    assert events[-1]["details"]["code"] == 2900  # INJECTED_FATAL
    assert xcoms(dr.dag_id, dr.run_id)["pipeline_state"] == "degraded"


def test_retry_budget_exhausted_within_the_window_degrades(airflow_db, orders):
    state_dir = orders / "state"
    dr = run_test_dag(
        "budget_exhausted",
        spec=str(orders / "pipeline.yaml"),
        state_dir=str(state_dir),
        min_delay="1s",
        max_delay="1s",
        max_retries=2,
        max_retries_window="10m",
        poll_interval=0.5,
        backend_options={"faults": {"transient_first_runs": 10}},
    )
    assert dr.state == "failed"
    assert len(run_folders(state_dir)) == 3  # the first run and max-retries (2) restarts
    events = audit_events(state_dir)
    kinds = [e["event"] for e in events]
    assert kinds.count("restarted") == 2 and kinds[-1] == "degraded"
    assert "max-retries reached" in events[-1]["message"]
    assert json.loads((state_dir / "recovery.json").read_text())["pipeline_state"] == "degraded"


def test_bad_spec_fails_before_anything_is_submitted(airflow_db, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text('version: "1"\npipeline:\n  id: bad\n  sourcez: []\n  destinations: []\n')
    state_dir = tmp_path / "state"
    dr = run_test_dag("bad_spec", spec=str(spec), state_dir=str(state_dir), poll_interval=0.5)
    assert dr.state == "failed"
    assert task_instance(dr.dag_id, dr.run_id).state == "failed"
    assert run_folders(state_dir) == []  # no job was started
    assert not (state_dir / "recovery.json").exists()


def test_bad_spec_message_names_the_file_and_the_key(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

    spec = tmp_path / "bad.yaml"
    spec.write_text('version: "1"\npipeline:\n  id: bad\n  sourcez: []\n  destinations: []\n')
    operator = RecoveringSparkPipelineOperator(task_id="p", spec=str(spec), state_dir=str(tmp_path / "state"))
    with pytest.raises(AirflowFailException, match=r"nothing was submitted") as refused:
        operator.execute({})  # validation comes before anything touches Spark (or the context)
    assert str(spec) in str(refused.value) and "sourcez" in str(refused.value)
