"""SparkErrorRetryPolicy on a plain SparkSubmitOperator: real dag.test(), real spark-submit (local[1]).

Transient failures are retried after the policy's backoff (not the task's 10-minute retry_delay);
a fatal one fails the task at once although retries are left.
"""

from __future__ import annotations

import importlib.util
import json
import os
from datetime import timedelta

import pytest

from airflow_conduit.operators.retry_policy import SparkErrorRetryPolicy
from conftest import JOBS, TEST_DAGS, task_instance

pytestmark = pytest.mark.integration


def run_policy_dag(dag_id: str, counter, failures: int, kind: str):
    os.environ["AIRFLOW_CONN_CONDUIT_RETRY_LOCAL"] = json.dumps({"conn_type": "spark", "host": "local[1]"})
    os.environ["CONDUIT_RETRY_POLICY_DAG"] = json.dumps(
        {"dag_id": dag_id, "application": str(JOBS / "flaky_app.py"), "application_args": [str(counter), str(failures), kind]}
    )
    spec = importlib.util.spec_from_file_location(f"retry_policy_dag_{dag_id}", TEST_DAGS / "retry_policy_dag.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag.test()


def test_transient_failures_are_retried_with_the_policy_backoff(airflow_db, tmp_path):
    counter = tmp_path / "runs"
    dr = run_policy_dag("retry_policy_transient", counter, 2, "transient")
    assert dr.state == "success"
    assert counter.read_text() == "3"  # two transient failures, then success
    assert task_instance(dr.dag_id, dr.run_id, "submit").try_number == 3


def test_a_fatal_failure_is_not_retried(airflow_db, tmp_path):
    counter = tmp_path / "runs"
    dr = run_policy_dag("retry_policy_fatal", counter, 5, "fatal")
    assert dr.state == "failed"
    assert counter.read_text() == "1"  # retries=3 left, but a missing table does not appear on a retry


def test_decisions_name_the_classification_and_follow_the_backoff():
    from airflow.providers.common.compat.sdk import AirflowException
    from airflow.sdk.definitions.retry_policy import RetryAction

    policy = SparkErrorRetryPolicy({"min-delay": "2s", "backoff-factor": 3, "max-delay": "10s"})
    transient = AirflowException("Cannot execute: spark-submit app.py. Error code is: 1.\nLast spark-submit output:\n"
                                 "java.net.ConnectException: Connection refused")
    delays = [policy.evaluate(transient, n, 5).retry_delay for n in (1, 2, 3)]
    assert delays == [timedelta(seconds=2), timedelta(seconds=6), timedelta(seconds=10)]
    decision = policy.evaluate(AirflowException("Cannot execute: x. Error code is: 70."), 1, 5)  # the job's EXIT_FATAL
    assert decision.action is RetryAction.FAIL and "fatal" in decision.reason
    assert SparkErrorRetryPolicy.deserialize(policy.serialize()).options == policy.options
