"""DeadLetterQueueReplayOperator with dag.test() and real Spark (spark-submit, local[*]).

A pipeline run with a strict schema dead-letters the records whose ``code`` is not a number; the
spec is then fixed and the operator replays them: a dry run first (nothing written), then a replay
whose driver is SIGKILLed (``--faults crash_after_destination``) after the DLQ committed the replay's
batch: the recovery engine restarts it, the restarted run resumes the same replay, and every record
reaches the lake exactly once. A second replay writes nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from conftest import TEST_DAGS, dlq_lines, task_instance, xcoms

pytestmark = pytest.mark.integration

STRICT = "id BIGINT NOT NULL, name STRING, code INT"
FIXED = "id BIGINT NOT NULL, name STRING, code STRING"  # the fix: codes are not all numbers


def write_spec(root: Path, schema: str) -> Path:
    spec = root / "pipeline.yaml"
    spec.write_text(f"""version: "1"
pipeline:
  id: codes
  mode: available-now
  sources:
    - id: in
      plugin: builtin:file
      settings: {{path: {root / 'in'}, format: json, schema: "{schema}"}}
  destinations:
    - id: lake
      plugin: builtin:file
      settings: {{path: {root / 'lake'}, format: json}}
  dead-letter-queue:
    plugin: builtin:file
    settings: {{path: {root / 'dlq'}, format: json}}
    window-size: 0
""")
    return spec


def lake(root: Path) -> list[int]:
    return sorted(row["id"] for row in dlq_lines(root / "lake"))


def run_dag(dag_id: str, *, pipeline: dict | None = None, replay: dict | None = None):
    """The tests' parameterised DAG with a pipeline task or a replay task (conn conduit_local), run by dag.test()."""
    for kwargs in (pipeline, replay):
        if kwargs is not None:
            kwargs.setdefault("conn_id", "conduit_local")
            kwargs.setdefault("poll_interval", 1)
            kwargs.setdefault("min_delay", "1s")
    os.environ["CONDUIT_TEST_DAG"] = json.dumps({"dag_id": dag_id, "operator": pipeline, "replay": replay})
    spec = importlib.util.spec_from_file_location(f"conduit_test_dag_{dag_id}", TEST_DAGS / "conduit_test_dag.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag.test()


def test_replay_operator_dry_run_then_replay_killed_and_restarted_writes_each_record_once(airflow_db, tmp_path):
    root, state = tmp_path, str(tmp_path / "state")
    lines = [{"id": 1, "name": "a", "code": 7}, {"id": 2, "name": "b", "code": "A2"}, "{broken",
             {"id": 4, "name": "d", "code": "B4"}, {"id": 5, "name": "e", "code": 9}]
    (root / "in").mkdir()
    (root / "in" / "a.json").write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    dr = run_dag("replay_op_pipeline", pipeline={"spec": str(write_spec(root, STRICT)), "state_dir": state})
    assert dr.state == "success"
    assert lake(root) == [1, 5] and len(dlq_lines(root / "dlq")) == 3
    fixed = str(write_spec(root, FIXED))

    dr = run_dag("replay_op_dry_run", replay={"spec": fixed, "state_dir": state, "dry_run": "True"})
    assert dr.state == "success"
    totals = xcoms(dr.dag_id, dr.run_id)["return_value"]["replay"]
    assert totals["dry_run"] and (totals["replayed"], totals["passed"], totals["still_failing"]) == (3, 2, 1)
    [(error, count)] = totals["errors"].items()
    assert count == 1 and error.startswith("in: ")
    assert lake(root) == [1, 5] and not (root / "state" / "replays" / "1").exists()  # nothing written, nothing marked

    crash = {"crash_after_destination": {"destination": "dead-letter-queue", "batch": 1}}
    dr = run_dag("replay_op_killed", replay={"spec": fixed, "state_dir": state, "backend_options": {"faults": crash}, "stages": "source"})
    assert dr.state == "success"
    summary = xcoms(dr.dag_id, dr.run_id)["return_value"]
    assert summary["submissions"] == 2  # killed (SIGKILL, exit 137), restarted by the recovery engine
    events = [e["event"] for e in summary["audit_log"]]
    assert events.count("failed") == 1 and events.count("restarted") == 1
    totals = summary["replay"]
    assert totals["resumed"] and totals["batch_id"] == -1
    assert (totals["replayed"], totals["still_failing"]) == (3, 1)
    assert totals["passing"] == {"lake": 2}  # the lake's write was not committed before the kill: written now
    assert summary["report"]["totals"]["written"] == {"lake": 2}
    assert lake(root) == [1, 2, 4, 5]  # each record once
    dlq = dlq_lines(root / "dlq")
    assert len(dlq) == 4  # the record that still fails went back once, with its replay count
    [back] = [r for r in dlq if r["batch_id"] == -1]
    assert (back["record"], back["replay_count"]) == ("{broken", 1)

    dr = run_dag("replay_op_again", replay={"spec": fixed, "state_dir": state, "stages": ["processor"]})
    assert dr.state == "success"
    totals = xcoms(dr.dag_id, dr.run_id)["return_value"]["replay"]
    assert totals["replay"] is None and totals["replayed"] == 0 and totals["passing"] == {}
    assert totals["skipped_already_replayed"] == 3
    assert lake(root) == [1, 2, 4, 5] and len(dlq_lines(root / "dlq")) == 4  # nothing written


def test_replay_operator_refuses_a_bad_filter_before_anything_is_submitted(airflow_db, tmp_path):
    root, state = tmp_path, tmp_path / "state"
    dr = run_dag("replay_op_bad_filter", replay={"spec": str(write_spec(root, FIXED)), "state_dir": str(state),
                                                  "since": "yesterday"})
    assert dr.state == "failed"
    assert task_instance(dr.dag_id, dr.run_id, "replay").state == "failed"
    assert not (state / "runs").exists()
