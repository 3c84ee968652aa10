"""Reference DAG: a Spark Declarative Pipelines project kept alive by the recovery engine.

The orders project (examples/sdp/spark-pipeline.yml) reads JSON lines into the streaming table `orders`
through expectations (malformed records and orders without an id to `orders_quarantine`, non-positive
amounts dropped, a missing customer only counted, an absurd amount stops the run) and keeps the
materialized view `customer_totals`. It runs as `spark-pipelines run` would, with SDP's own flow retries
off: a transient failure restarts the run with backoff (streaming tables resume from their SDP
checkpoints), a fatal one (a missing path, a schema mismatch, a `fail` expectation) degrades it at once,
naming the flow. docs/sdp.md sets it beside Airflow's SparkPipelinesOperator.

Params (override with `airflow dags test ... -c '{...}'` or a run's conf):
  project    the project's spark-pipeline.yml or its folder (default: the bundled example)
  state_dir  the pipeline's state directory (default: $CONDUIT_STATE_ROOT/orders_sdp or .demo/state/orders_sdp)
  faults     fault injection for demos, e.g. {"transient_after_batch": {"flow": "orders", "batch": 0}}
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_conduit.operators.declarative import RecoveringDeclarativePipelineOperator

REPO = Path(__file__).resolve().parents[1]
STATE_ROOT = Path(os.environ.get("CONDUIT_STATE_ROOT", REPO / ".demo" / "state"))

with DAG(
    dag_id="conduit_orders_sdp",
    description="A declarative pipeline (SDP) with expectations and quarantine; restarts on transient errors",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one project, one state directory: runs never overlap
    tags=["conduit", "spark", "sdp", "example"],
    params={
        "project": Param(str(REPO / "examples" / "sdp"), type="string"),
        "state_dir": Param(str(STATE_ROOT / "orders_sdp"), type="string"),
        "faults": Param(None, type=["null", "object"]),
    },
    doc_md=__doc__,
) as dag:
    RecoveringDeclarativePipelineOperator(
        task_id="orders_sdp",
        pipeline_project="{{ params.project }}",
        state_dir="{{ params.state_dir }}",
        conn_id="conduit_local",  # a local Spark Connect server per run; or a connection to sc://host:15002
        min_delay="1s",
        backoff_factor=2,
        max_delay="1m",
        max_retries=5,
        max_retries_window="10m",
        poll_interval=2,
        backend_options={"faults": "{{ params.faults | tojson }}"},
    )
