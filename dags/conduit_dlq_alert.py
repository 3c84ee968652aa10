"""Reference DAG: alert when the orders pipeline's dead letter queue fills up, or it degrades.

Every hour, DeadLetterQueueSensor waits (deferred, no worker slot) until more than `threshold`
(param, default 5) records went to the orders pipeline's DLQ during the hour, then `alert` runs;
PipelineStateSensor fires when the pipeline is degraded. Replace the alert tasks' bodies with your
notifier (Slack, e-mail...).

"The hour" is the run's data interval; a manual run (triggered in the UI, no logical date) has
none, so it counts the hour before the run was triggered.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_conduit.sensors.pipeline import DeadLetterQueueSensor, PipelineStateSensor

REPO = Path(__file__).resolve().parents[1]
# The data interval's start; a manual run without a logical date has no data interval: the hour before it was triggered.
SINCE = (
    "{% if data_interval_start is defined and data_interval_start %}{{ data_interval_start.isoformat() }}"
    "{% else %}{{ (dag_run.run_after - macros.timedelta(hours=1)).isoformat() }}{% endif %}"
)
STATE_ROOT = Path(os.environ.get("CONDUIT_STATE_ROOT", REPO / ".demo" / "state"))

with DAG(
    dag_id="conduit_dlq_alert",
    description="Alert on dead letter queue growth and on a degraded pipeline",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["conduit", "alerting", "example"],
    params={"state_dir": str(STATE_ROOT / "orders"), "threshold": Param(5, type="integer", minimum=0)},
    doc_md=__doc__,
) as dag:
    dlq_full = DeadLetterQueueSensor(
        task_id="dlq_over_threshold",
        state_dir="{{ params.state_dir }}",
        threshold="{{ params.threshold }}",
        since=SINCE,
        poll_interval=60,
        timeout=timedelta(hours=1).total_seconds(),
        soft_fail=True,  # no alert this hour: skipped, not failed
    )
    degraded = PipelineStateSensor(
        task_id="pipeline_degraded",
        state_dir="{{ params.state_dir }}",
        target_states=["degraded"],
        poll_interval=60,
        timeout=timedelta(hours=1).total_seconds(),
        soft_fail=True,
    )

    @task
    def alert_dlq(count: int, state_dir: str) -> str:
        message = f"orders pipeline: {count} records went to the dead letter queue this hour (state dir {state_dir})"
        print(message)
        return message

    @task
    def alert_degraded(state: str, state_dir: str) -> str:
        message = f"orders pipeline is {state}: see {state_dir}/recovery.json for the audit log"
        print(message)
        return message

    alert_dlq(dlq_full.output, "{{ params.state_dir }}")
    alert_degraded(degraded.output, "{{ params.state_dir }}")
