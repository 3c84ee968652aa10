"""Reference DAG: the dead letter queue loop: run the pipeline, see what it dead-lettered, replay after a fix.

Every hour the orders pipeline runs (available-now), then `dlq_received_records`
(DeadLetterQueueSensor) checks whether that run sent records to the DLQ; if so,
`tell_the_owner` says how many and what to do. The replay is a human decision
taken after fixing the spec (a schema, a processor, an expectation rule), so it
never runs on schedule: trigger this DAG with the param `replay` ticked (the
trigger form shows it), first with `dry_run` (default) to see what would pass and
what would still fail, grouped by error, then without it. The replay
(DeadLetterQueueReplayOperator) runs after the pipeline in the same DAG run,
never beside it: one driver per state directory, and `max_active_runs=1`.

It is the orders pipeline of `conduit_orders_available_now` with the loop around it
(same spec, outputs and state directory): unpause one of the two.

Params (the trigger form, or `airflow dags trigger -c '{...}'`):
  spec, state_dir     the pipeline (default: the bundled orders example)
  replay              run the DLQ replay after the pipeline (default false: scheduled runs skip it)
  dry_run             the replay only reports (default true)
  stages, components, rules, error_classes, batch_min, batch_max, since, until
                      which DLQ records to replay (empty: every replayable record not replayed yet)
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
from airflow_conduit.operators.replay import DeadLetterQueueReplayOperator
from airflow_conduit.sensors.pipeline import DeadLetterQueueSensor

REPO = Path(__file__).resolve().parents[1]
STATE_ROOT = Path(os.environ.get("CONDUIT_STATE_ROOT", REPO / ".demo" / "state"))
NAMES = Param([], type="array", items={"type": "string"})
RECOVERY = {"min_delay": "1s", "backoff_factor": 2, "max_delay": "1m", "max_retries": 5, "max_retries_window": "5m"}

with DAG(
    dag_id="conduit_orders_dlq_replay",
    description="Orders pipeline, then its DLQ: checked every run, replayed on demand after a fix",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # the pipeline and the replay share one state directory
    tags=["conduit", "spark", "dlq", "example"],
    params={
        "spec": Param(str(REPO / "examples" / "orders" / "pipeline.yaml"), type="string"),
        # The same pipeline as conduit_orders_available_now (same spec, outputs and state dir): run one of the
        # two DAGs, not both; sharing the state dir means even both never process a record twice.
        "state_dir": Param(str(STATE_ROOT / "orders"), type="string"),
        "replay": Param(False, type="boolean", description="replay the DLQ after the pipeline (after you fixed the spec)"),
        "dry_run": Param(True, type="boolean", description="the replay only reports what would pass / still fail"),
        "stages": NAMES, "components": NAMES, "rules": NAMES, "error_classes": NAMES,
        "batch_min": Param(None, type=["null", "integer"]),
        "batch_max": Param(None, type=["null", "integer"]),
        "since": Param(None, type=["null", "string"], description="ISO-8601: records dead-lettered at or after"),
        "until": Param(None, type=["null", "string"], description="ISO-8601: records dead-lettered before"),
    },
    doc_md=__doc__,
) as dag:
    pipeline = RecoveringSparkPipelineOperator(
        task_id="orders_pipeline",
        spec="{{ params.spec }}",
        state_dir="{{ params.state_dir }}",
        conn_id="conduit_local",  # Spark embedded on the worker (local[*]); name your spark connection here
        poll_interval=2,
        **RECOVERY,
    )
    # The pipeline has finished (available-now): one look is enough, no wait (timeout 0); none: skipped.
    dlq_check = DeadLetterQueueSensor(
        task_id="dlq_received_records",
        state_dir="{{ params.state_dir }}",
        threshold=0,
        since="{{ ti.xcom_pull(task_ids='orders_pipeline')['report']['started_at'] }}",
        deferrable=False,
        timeout=0,
        soft_fail=True,
    )

    @task
    def tell_the_owner(count: int, state_dir: str) -> str:
        message = (f"the orders pipeline sent {count} record(s) to its dead letter queue (state dir {state_dir}); "
                   "fix the spec, then trigger this DAG with replay (dry_run first)")
        print(message)  # replace with your notifier
        return message

    @task.short_circuit(trigger_rule="none_failed", ignore_downstream_trigger_rules=False)
    def replay_requested(**context) -> bool:
        """Scheduled runs skip the replay: it is asked for by triggering the DAG with ``replay``."""
        return bool(context["params"]["replay"])

    dlq_replay = DeadLetterQueueReplayOperator(
        task_id="dlq_replay",
        spec="{{ params.spec }}",
        state_dir="{{ params.state_dir }}",
        conn_id="conduit_local",
        poll_interval=2,
        dry_run="{{ params.dry_run }}",
        stages="{{ params.stages | tojson }}",
        components="{{ params.components | tojson }}",
        rules="{{ params.rules | tojson }}",
        error_classes="{{ params.error_classes | tojson }}",
        batch_min="{{ params.batch_min }}",
        batch_max="{{ params.batch_max }}",
        since="{{ params.since }}",
        until="{{ params.until }}",
        **RECOVERY,
    )

    pipeline >> dlq_check
    tell_the_owner(dlq_check.output, "{{ params.state_dir }}")
    dlq_check >> replay_requested() >> dlq_replay
