"""Reference DAG: a scheduled `available-now` pipeline with a dead letter queue.

Every hour the orders pipeline (examples/orders/pipeline.yaml) processes the JSON lines that
arrived since the last run and stops: good orders go to a Parquet lake, bad records (malformed
JSON, wrong types, missing fields, bad payloads) to the dead letter queue. Checkpoints in the
state directory make each run pick up where the previous one stopped; a transient failure is
retried with backoff (1s, 2s, 4s... at most 5 restarts in 5 minutes), a fatal one degrades the
pipeline and fails the task.

Params (override with `airflow dags test ... -c '{...}'` or a run's conf):
  spec       the pipeline spec (default: the bundled orders example)
  state_dir  the pipeline's state directory (default: $CONDUIT_STATE_ROOT/orders or .demo/state/orders)
  faults     fault injection for demos, e.g. {"transient_first_runs": 2}
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

REPO = Path(__file__).resolve().parents[1]
STATE_ROOT = Path(os.environ.get("CONDUIT_STATE_ROOT", REPO / ".demo" / "state"))

with DAG(
    dag_id="conduit_orders_available_now",
    description="Orders JSON lines -> Parquet lake, bad records -> DLQ; restarts on transient errors",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one pipeline, one state directory: runs never overlap
    tags=["conduit", "spark", "example"],
    params={
        "spec": Param(str(REPO / "examples" / "orders" / "pipeline.yaml"), type="string"),
        "state_dir": Param(str(STATE_ROOT / "orders"), type="string"),
        "faults": Param(None, type=["null", "object"]),
    },
    doc_md=__doc__,
) as dag:
    RecoveringSparkPipelineOperator(
        task_id="orders_pipeline",
        spec="{{ params.spec }}",
        state_dir="{{ params.state_dir }}",
        conn_id="conduit_local",  # Spark embedded on the worker (local[*]); name your spark connection here
        min_delay="1s",
        backoff_factor=2,
        max_delay="1m",
        max_retries=5,
        max_retries_window="5m",
        poll_interval=2,
        backend_options={"faults": "{{ params.faults | tojson }}"},  # fault injection for the demo and tests
    )
