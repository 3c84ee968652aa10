"""Reference DAG: a Kafka topic into a Delta Lake table, bad records to a Kafka dead letter queue topic.

Every 15 minutes the pipeline examples/kafka_delta/pipeline.yaml reads what arrived on the topic
`orders` since the last run (its offsets live in the checkpoint of the state directory), appends the
good orders to a Delta table exactly once per micro-batch, sends each bad record to the topic
`orders-dlq` (original bytes, Kafka Connect's error headers) and stops. A broker that cannot be
reached is a transient failure: the task restarts the job with backoff; nothing is read twice or lost.

The broker's address is the worker's environment variable KAFKA_BOOTSTRAP_SERVERS (the spec says
`servers: ${KAFKA_BOOTSTRAP_SERVERS}`); a spec can name an Airflow connection of type `kafka` instead.

Params (override with `airflow dags test ... -c '{...}'` or a run's conf):
  spec       the pipeline spec (default: the bundled Kafka -> Delta example)
  state_dir  the pipeline's state directory (default: $CONDUIT_STATE_ROOT/kafka-orders or .demo/state/kafka-orders)
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
    dag_id="conduit_kafka_orders_to_delta",
    description="Kafka topic orders -> Delta table, bad records -> Kafka DLQ topic; restarts on transient errors",
    schedule="*/15 * * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one pipeline, one state directory: runs never overlap
    tags=["conduit", "spark", "kafka", "delta", "example"],
    params={
        "spec": Param(str(REPO / "examples" / "kafka_delta" / "pipeline.yaml"), type="string"),
        "state_dir": Param(str(STATE_ROOT / "kafka-orders"), type="string"),
    },
    doc_md=__doc__,
) as dag:
    RecoveringSparkPipelineOperator(
        task_id="kafka_orders_to_delta",
        spec="{{ params.spec }}",
        state_dir="{{ params.state_dir }}",
        conn_id="conduit_local",  # Spark embedded on the worker (local[*]); name your spark connection here
        min_delay="1s",
        backoff_factor=2,
        max_delay="1m",
        max_retries=5,
        max_retries_window="5m",
        poll_interval=2,
    )
