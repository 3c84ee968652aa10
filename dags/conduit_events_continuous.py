"""Reference DAG: a long-running `continuous` pipeline, kept alive by the recovery engine.

The pipeline runs until it is stopped; the task stays deferred (no worker slot) while Spark runs.
Transient failures restart it with Conduit's exponential backoff under an unlimited retry budget
(max-retries -1), so it degrades only on a fatal error. With `@continuous` scheduling Airflow
starts a new run when one ends, and `max_active_runs=1` keeps a single pipeline.

The spec is inline (written to STATE_DIR/pipeline.yaml): generated events, a few of them bad on
purpose, to JSON files under the state directory.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

REPO = Path(__file__).resolve().parents[1]
STATE_ROOT = Path(os.environ.get("CONDUIT_STATE_ROOT", REPO / ".demo" / "state"))

EVENTS_SPEC = """\
version: "1"
pipeline:
  id: events
  description: "Generated click events to JSON files; malformed ones to a JSON dead letter queue."
  mode: continuous
  trigger-interval: 10s
  sources:
    - id: clicks
      plugin: builtin:generator
      settings:
        records: 1000000
        rate: 20
        fields: {user: STRING, page: STRING, ms: INT}
        bad-record-ratio: 0.01
  processors:
    - id: slow-pages
      plugin: sql
      settings:
        select: ["*", "ms > 1000 AS slow"]
  destinations:
    - id: events-out
      plugin: builtin:file
      settings:
        path: out/events
        format: json
  dead-letter-queue:
    plugin: builtin:file
    settings:
      path: out/dlq
      format: json
    window-size: 100
    window-nack-threshold: 10
"""

with DAG(
    dag_id="conduit_events_continuous",
    description="A continuous pipeline restarted with backoff on transient errors",
    schedule="@continuous",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["conduit", "spark", "example"],
    doc_md=__doc__,
) as dag:
    RecoveringSparkPipelineOperator(
        task_id="events_pipeline",
        spec=EVENTS_SPEC,
        state_dir=str(STATE_ROOT / "events"),
        conn_id="conduit_local",  # Spark embedded on the worker (local[*]); name your spark connection here
        max_retries=-1,  # Conduit's default: restart forever on transient errors
        max_delay="10m",
        poll_interval=10,
    )
