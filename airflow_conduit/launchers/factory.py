"""Pick the launcher for a Spark connection, or for an existing job handle."""

from __future__ import annotations

from typing import Any

from airflow_conduit.launchers.base import JobHandle, Launcher

LAUNCHER_KINDS = ("local", "standalone")


def launcher_kind_for_connection(conn_id: str) -> str:
    """``standalone`` for spark://host:port in cluster deploy mode (REST submission); ``local`` otherwise.

    ``local`` means spark-submit from this machine: local[*] (also when the connection does not exist),
    a standalone master in client mode, YARN or Kubernetes.
    """
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_conduit.launchers.local import connection_exists

    if not connection_exists(conn_id):
        return "local"
    connection = SparkSubmitHook(conn_id=conn_id)._connection
    if connection["master"].startswith("spark://") and connection["deploy_mode"] == "cluster":
        return "standalone"
    return "local"


def make_launcher(kind: str, conn_id: str = "spark_default", **options: Any) -> Launcher:
    if kind == "local":
        from airflow_conduit.launchers.local import LocalLauncher

        return LocalLauncher(conn_id, **options)
    if kind == "standalone":
        from airflow_conduit.launchers.standalone import StandaloneLauncher

        return StandaloneLauncher(conn_id, **options)
    raise ValueError(f"unknown launcher {kind!r}: expected one of {', '.join(LAUNCHER_KINDS)}")


def launcher_for_connection(conn_id: str = "spark_default", kind: str | None = None, **options: Any) -> Launcher:
    return make_launcher(kind or launcher_kind_for_connection(conn_id), conn_id, **options)


def launcher_for_handle(handle: JobHandle) -> Launcher:
    """A launcher able to poll and kill an existing job: built from the handle alone, no connection lookup."""
    return make_launcher(handle["launcher"], handle.get("conn_id") or "spark_default")
