"""Operator extra links: the Spark UI of the running job and the pipeline's dead letter queue."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

XCOM_JOB = "conduit_job"  # the current job handle (spark_ui inside)
XCOM_DLQ = "conduit_dlq"  # where the DLQ is (file URL or a description)


def _xcom(ti_key: Any, key: str) -> Any:
    from airflow.sdk.execution_time.xcom import XCom

    try:
        return XCom.get_value(ti_key=ti_key, key=key)
    except Exception:  # no value yet, or no API reachable
        return None


class SparkUILink(BaseOperatorLink):
    """The local driver's Spark UI, or the standalone master's UI (which lists the driver)."""

    name = "Spark UI"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        handle = getattr(operator, "_conduit_handle", None) or _xcom(ti_key, XCOM_JOB) or {}
        return handle.get("spark_ui") or ""


class DeadLetterQueueLink(BaseOperatorLink):
    """Where the pipeline's dead letter queue records go (a file:// folder for file DLQs)."""

    name = "Dead letter queue"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return getattr(operator, "_conduit_dlq", None) or _xcom(ti_key, XCOM_DLQ) or ""


def dlq_location(spec: Any) -> str:
    """A link target for the spec's DLQ: file:// path for file DLQs, jdbc URL/table, or the log."""
    dlq = spec.dead_letter_queue
    settings = dict(dlq.settings or {})
    if dlq.plugin == "file" and settings.get("path"):
        path = str(settings["path"])
        return path if "://" in path else f"file://{path}"
    if dlq.plugin == "jdbc":
        return f"{settings.get('url', 'jdbc')}#{settings.get('table', '')}"
    return "log: the Spark driver log (builtin:log DLQ)"
