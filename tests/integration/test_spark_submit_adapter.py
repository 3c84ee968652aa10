"""Contract test of the one adapter over the Spark provider's private API (hooks/spark_submit_adapter.py).

It pins the spark-submit argv and the connection reading for the five kinds of connection the
provider serves us: a Spark provider upgrade that changes ``_build_spark_submit_command`` or
``_connection`` fails here, not in production. No Spark runs: these are command lines.
"""

from __future__ import annotations

import json

import pytest

from airflow_conduit.hooks.errors import SparkConnectionError
from airflow_conduit.hooks.spark_submit_adapter import resolved_connection, spark_submit_argv

CONNECTIONS = {
    "local": {"conn_type": "spark", "host": "local[*]"},
    "standalone_client": {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077},
    "standalone_rest": {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077,
                        "extra": {"deploy-mode": "cluster", "rest-port": "6066"}},
    "yarn": {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "etl"}},
    "k8s": {"conn_type": "spark", "host": "k8s://https://k8s.example:6443",
            "extra": {"deploy-mode": "cluster", "namespace": "pipelines"}},
}
COMMON = ["--conf", "spark.ui.port=4050"]
TAIL = ["--py-files", "/app/conduit.zip", "--name", "conduit-r1"]
APP = ["/app/entrypoint.py", "--spec", "/p.yaml", "--run-id", "r1", "--state-dir", "/state"]

EXPECTED_ARGV = {
    "local": ["spark-submit", "--master", "local[*]", *COMMON, *TAIL, *APP],
    "standalone_client": ["spark-submit", "--master", "spark://127.0.0.1:7077", *COMMON, *TAIL, *APP],
    # the REST backend's inner command: client mode, the driver already runs in the cluster
    "standalone_rest": ["spark-submit", "--master", "spark://127.0.0.1:7077", *COMMON, *TAIL, "--deploy-mode", "client", *APP],
    "yarn": ["spark-submit", "--master", "yarn", *COMMON, *TAIL, "--queue", "etl", "--deploy-mode", "cluster", *APP],
    "k8s": ["spark-submit", "--master", "k8s://https://k8s.example:6443", *COMMON,
            "--conf", "spark.kubernetes.namespace=pipelines", *TAIL, "--deploy-mode", "cluster", *APP],
}
EXPECTED_CONNECTION = {
    "local": {"master": "local[*]", "deploy_mode": None, "rest_endpoint": None},
    "standalone_client": {"master": "spark://127.0.0.1:7077", "deploy_mode": None, "rest_endpoint": None},
    "standalone_rest": {"master": "spark://127.0.0.1:7077", "deploy_mode": "cluster",
                        "rest_endpoint": "http://127.0.0.1:6066", "rest_scheme": "http", "rest_port": 6066},
    "yarn": {"master": "yarn", "deploy_mode": "cluster", "queue": "etl", "rest_endpoint": None},
    "k8s": {"master": "k8s://https://k8s.example:6443", "deploy_mode": "cluster", "namespace": "pipelines"},
}


@pytest.fixture(autouse=True)
def spark_connections(monkeypatch):
    for name, connection in CONNECTIONS.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_CONTRACT_{name.upper()}", json.dumps(connection))


@pytest.fixture
def kubernetes_client(monkeypatch):
    """A stand-in for apache-airflow-providers-cncf-kubernetes (not installed here; no cluster either)."""
    from airflow.providers.apache.spark.hooks import spark_submit

    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)


@pytest.mark.parametrize("kind", sorted(CONNECTIONS))
def test_argv_pinned(kind, kubernetes_client):
    argv = spark_submit_argv(
        f"contract_{kind}",
        "/app/entrypoint.py",
        application_args=APP[1:],
        conf={"spark.ui.port": "4050"},
        py_files="/app/conduit.zip",
        name="conduit-r1",
        deploy_mode="client" if kind == "standalone_rest" else None,
    )
    assert argv == EXPECTED_ARGV[kind]


@pytest.mark.parametrize("kind", sorted(CONNECTIONS))
def test_connection_reading_pinned(kind, kubernetes_client):
    connection = resolved_connection(f"contract_{kind}")
    assert {key: connection[key] for key in EXPECTED_CONNECTION[kind]} == EXPECTED_CONNECTION[kind]
    assert connection["spark_binary"] == "spark-submit"


def test_kubernetes_without_its_provider_is_a_named_error(monkeypatch):
    from airflow.providers.apache.spark.hooks import spark_submit

    monkeypatch.delattr(spark_submit, "kube_client", raising=False)
    with pytest.raises(SparkConnectionError, match=r"'contract_k8s'.*cncf-kubernetes"):
        resolved_connection("contract_k8s")


@pytest.mark.parametrize("master", ["local[*]", "local[2]", "local", "spark://127.0.0.1:7077"])
@pytest.mark.parametrize("driver_memory", [None, "2g"])
def test_the_plain_master_argv_is_the_providers(master, driver_memory, monkeypatch):
    """``airflow-conduit run --master M`` builds its argv without Airflow: the same as the provider's for a connection
    that is only M (what the CLI made of --master before)."""
    from airflow_conduit.hooks.spark_submit_adapter import plain_master_argv

    monkeypatch.setenv("AIRFLOW_CONN_CONTRACT_PLAIN", json.dumps({"conn_type": "spark", "host": master}))
    arguments = dict(application_args=APP[1:], conf={"spark.ui.port": "4050", "spark.ui.enabled": "false"},
                     py_files="/app/conduit.zip", name="conduit-r1", driver_memory=driver_memory)
    assert plain_master_argv(master, "/app/entrypoint.py", **arguments) == spark_submit_argv(
        "contract_plain", "/app/entrypoint.py", **arguments)


def test_a_master_that_is_not_plain_is_left_to_the_provider():
    from airflow_conduit.hooks.spark_submit_adapter import is_plain_master, plain_master_argv

    assert not any(is_plain_master(m) for m in ("yarn", "k8s://https://k8s.example:6443", "bogus://nowhere", ""))
    with pytest.raises(ValueError, match="yarn"):
        plain_master_argv("yarn", "/app/entrypoint.py", application_args=[])
