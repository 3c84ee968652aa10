"""A plain SparkSubmitOperator with SparkErrorRetryPolicy (docs/operators.md): the test sets its parameters
through the CONDUIT_RETRY_POLICY_DAG environment variable (JSON: dag_id, application, application_args)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from airflow_conduit.operators.retry_policy import SparkErrorRetryPolicy

_params = json.loads(os.environ.get("CONDUIT_RETRY_POLICY_DAG") or "{}")

with DAG(_params.get("dag_id", "conduit_retry_policy"), schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    if _params:
        SparkSubmitOperator(
            task_id="submit",
            conn_id="conduit_retry_local",
            application=_params["application"],
            application_args=_params["application_args"],
            retries=3,
            retry_delay=timedelta(minutes=10),  # the policy's delay replaces it: a test would time out on this one
            retry_policy=SparkErrorRetryPolicy(min_delay="1s", backoff_factor=2),
        )
