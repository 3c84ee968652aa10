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

``plain_master_argv`` builds, without Airflow, the argv the provider builds for a connection that is only a
local or standalone master URL (what ``airflow-conduit run --master`` submits to); the same test pins it to
the provider's.
"""

from __future__ import annotations

import re
from typing import Any

SPARK_SUBMIT = "spark-submit"  # the provider's default spark binary
# The masters ``plain_master_argv`` serves: local[...] and a standalone master in client mode.
PLAIN_MASTER = re.compile(r"local(\[[0-9*]+(,[0-9]+)?\])?|spark://[^\s,]+")


def _spark_submit_hook(conn_id: str, **kwargs: Any):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_conduit.hooks.errors import SparkConnectionError

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


def is_plain_master(master: str) -> bool:
    """Whether ``plain_master_argv`` serves ``master`` (``local``, ``local[N]``, ``local[*]``, ``spark://host:port``)."""
    return PLAIN_MASTER.fullmatch(master) is not None


def plain_master_argv(
    master: str,
    application: str,
    *,
    application_args: list[str],
    conf: dict[str, Any] | None = None,
    py_files: str | None = None,
    name: str = "conduit",
    driver_memory: str | None = None,
) -> list[str]:
    """``spark_submit_argv`` for a connection that is only ``master`` (a plain master, ``is_plain_master``), built
    without Airflow: ``airflow-conduit run --master`` starts and ends its run without loading it."""
    if not is_plain_master(master):
        raise ValueError(f"not a plain local or standalone master URL: {master!r}")
    argv = [SPARK_SUBMIT, "--master", master]
    for key, value in dict(conf or {}).items():
        argv += ["--conf", f"{key}={value}"]
    if py_files:
        argv += ["--py-files", py_files]
    if driver_memory:
        argv += ["--driver-memory", driver_memory]
    if name:
        argv += ["--name", name]
    return [*argv, application, *application_args]
