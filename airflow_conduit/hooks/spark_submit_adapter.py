"""The one place that touches private parts of the Apache Spark provider.

The provider has no public way to *build* a spark-submit command line without
running it, nor to read a connection the way it reads it (master URL from
host/port/conn_type, ``deploy-mode``, ``rest-port``...). Reusing both keeps
our command lines identical to what ``SparkSubmitOperator`` would run, so we
use them, here only:

- ``SparkSubmitHook._build_spark_submit_command(application)``
- ``SparkSubmitHook(...)._connection``

``tests/integration/test_spark_submit_adapter.py`` pins the argv this module
produces for a local, a standalone (client and REST), a YARN and a Kubernetes
connection: a provider upgrade that changes either private API fails there.
"""

from __future__ import annotations

from typing import Any

from airflow_conduit.hooks.errors import SparkConnectionError


def _spark_submit_hook(conn_id: str, **kwargs: Any):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    try:
        return SparkSubmitHook(conn_id=conn_id, **kwargs)
    except (RuntimeError, NameError) as exc:  # k8s:// master without apache-airflow-providers-cncf-kubernetes
        raise SparkConnectionError(
            f"Spark connection {conn_id!r}: a Kubernetes master needs apache-airflow-providers-cncf-kubernetes "
            f"installed ({type(exc).__name__}: {exc})"
        ) from exc
    except ValueError as exc:  # e.g. a spark-binary extra the provider does not allow
        raise SparkConnectionError(f"Spark connection {conn_id!r}: {exc}") from exc


def resolved_connection(conn_id: str) -> dict[str, Any]:
    """The connection as the Spark provider reads it.

    Keys: ``master``, ``deploy_mode``, ``queue``, ``namespace``, ``spark_binary``,
    ``rest_scheme``, ``rest_port``, ``rest_endpoint`` (standalone cluster mode only),
    ``principal``, ``keytab``. The caller checks that the connection exists first:
    the provider falls back to ``yarn`` silently when it does not.
    """
    return dict(_spark_submit_hook(conn_id)._connection)


def spark_submit_argv(
    conn_id: str,
    application: str,
    *,
    application_args: list[str],
    conf: dict[str, Any] | None = None,
    py_files: str | None = None,
    name: str = "conduit",
    driver_memory: str | None = None,
    deploy_mode: str | None = None,
) -> list[str]:
    """The spark-submit command line (binary first) the provider builds for this connection.

    ``deploy_mode`` overrides the connection's (the standalone REST backend asks for ``client``:
    its driver already runs inside the cluster).
    """
    hook = _spark_submit_hook(
        conn_id,
        conf=dict(conf or {}),
        py_files=py_files or None,
        name=name,
        application_args=list(application_args),
        driver_memory=driver_memory,
        deploy_mode=deploy_mode,
    )
    return list(hook._build_spark_submit_command(application))
