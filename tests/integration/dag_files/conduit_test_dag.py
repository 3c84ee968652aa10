"""One parameterised DAG for the integration tests: its id and operator arguments come from
the CONDUIT_TEST_DAG environment variable (JSON), set by tests/integration/conftest.run_test_dag."""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
from airflow_conduit.operators.replay import DeadLetterQueueReplayOperator

_params = json.loads(os.environ.get("CONDUIT_TEST_DAG") or '{"dag_id": "conduit_test", "operator": null}')

with DAG(_params["dag_id"], schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    if _params["operator"]:
        RecoveringSparkPipelineOperator(task_id="pipeline", **_params["operator"])
    if _params.get("replay"):
        DeadLetterQueueReplayOperator(task_id="replay", **_params["replay"])
    if _params.get("plain_task"):
        EmptyOperator(task_id="plain")  # a task that is not a pipeline (the UI plugin's tests)
