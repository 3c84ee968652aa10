"""Contract test of the one adapter over the Spark provider's private API (hooks/spark_submit_adapter.py).

It pins the spark-submit argv and the connection reading for the five kinds of connection the
provider serves us: a Spark provider upgrade that changes ``_build_spark_submit_command`` or
``_connection`` fails here, not in production. No Spark runs: these are command lines.
"""

from __future__ import annotations

import json

import pytest

from airflow_conduit.hooks.spark_submit_adapter import SparkConnectionError, resolved_connection, spark_submit_argv

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
