"""The UI plugin's actions under test (tests/integration/test_ui_actions.py): a pipeline and its DLQ replay in one
DAG, as the reference DAG conduit_orders_dlq_replay has them. Its paths come from CONDUIT_UI_REPLAY (JSON
``{"spec", "state_dir"}``), set by the test for itself and for the Airflow processes it starts.

``ui_continuous``: a continuous pipeline (generated records) for the graceful stop.

``ui_fake_pipeline``: a task that only records what a pipeline task records (``pipeline_state``,
``conduit_job``) for a state dir the test wrote itself (a big DLQ, no Spark), and a replay task that never runs:
enough for the plugin's API (paging, filters, permissions).
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.sdk import DAG, Param, task

from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
from airflow_conduit.operators.replay import DeadLetterQueueReplayOperator

_paths = json.loads(os.environ.get("CONDUIT_UI_REPLAY") or "{}")
NAMES = Param([], type="array", items={"type": "string"})
PARAMS = {
    "replay": Param(False, type="boolean"),
    "dry_run": Param(True, type="boolean"),
    "force": Param(False, type="boolean"),
    "stages": NAMES, "components": NAMES, "error_classes": NAMES,
    "since": Param(None, type=["null", "string"]),
    "until": Param(None, type=["null", "string"]),
}
REPLAY_FILTERS = {
    "dry_run": "{{ params.dry_run }}", "force": "{{ params.force }}",
    "stages": "{{ params.stages | tojson }}", "components": "{{ params.components | tojson }}",
    "error_classes": "{{ params.error_classes | tojson }}", "since": "{{ params.since }}", "until": "{{ params.until }}",
}

with DAG("ui_replay", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1, params=PARAMS) as dag:
    pipeline = RecoveringSparkPipelineOperator(
        task_id="pipeline", spec=_paths.get("spec", "/nonexistent.yaml"), state_dir=_paths.get("state_dir", "/nonexistent"),
        conn_id="conduit_local", poll_interval=0.5, min_delay="1s",
    )

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def replay_requested(**context) -> bool:
        return bool(context["params"]["replay"])

    replay = DeadLetterQueueReplayOperator(
        task_id="dlq_replay", spec=_paths.get("spec", "/nonexistent.yaml"), state_dir=_paths.get("state_dir", "/nonexistent"),
        conn_id="conduit_local", poll_interval=0.5, min_delay="1s", **REPLAY_FILTERS,
    )
    pipeline >> replay_requested() >> replay


with DAG("ui_fake_pipeline", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, params=PARAMS) as fake_dag:

    @task(task_id="pipeline")
    def records_of_a_pipeline(**context) -> None:
        ti = context["ti"]
        state_dir = _paths.get("fake_state_dir", "/nonexistent")
        ti.xcom_push(key="pipeline_state", value="stopped")
        ti.xcom_push(key="conduit_job", value={"state_dir": state_dir, "run_id": "fake-pipeline-t1-00000000-s01"})

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def never() -> bool:
        return False

    fake_replay = DeadLetterQueueReplayOperator(
        task_id="dlq_replay", spec="/nonexistent.yaml", state_dir=_paths.get("fake_state_dir", "/nonexistent"),
        conn_id="conduit_local", **REPLAY_FILTERS,
    )
    records_of_a_pipeline() >> never() >> fake_replay


CONTINUOUS_SPEC = """\
version: "1"
pipeline:
  id: ui-clicks
  mode: continuous
  trigger-interval: 2s
  sources:
    - id: clicks
      plugin: builtin:generator
      settings:
        records: 1000000
        rate: 5
        fields: {user: STRING, ms: INT}
  destinations:
    - id: out
      plugin: builtin:file
      settings:
        path: out/clicks
        format: json
  dead-letter-queue:
    plugin: builtin:file
    settings:
      path: out/dlq
      format: json
"""

with DAG("ui_continuous", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1) as continuous_dag:
    RecoveringSparkPipelineOperator(
        task_id="pipeline", spec=CONTINUOUS_SPEC, state_dir=_paths.get("continuous_state_dir", "/nonexistent"),
        conn_id="conduit_local", poll_interval=1,
    )
