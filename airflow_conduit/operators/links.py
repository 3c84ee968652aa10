"""Operator extra links: the UI plugin's driver log page (with the live Spark UI while it runs) and DLQ page."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from airflow_conduit.plugins.urls import plugin_page


class SparkUILink(BaseOperatorLink):
    """The current run's driver log page; it links the live Spark UI while the driver runs (docs/ui.md)."""

    name = "Spark UI"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return plugin_page("log", ti_key)


class DeadLetterQueueLink(BaseOperatorLink):
    """The DLQ page: records of this task instance's runs grouped by stage, component and error."""

    name = "Dead letter queue"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return plugin_page("dlq", ti_key)


def dlq_location(spec: Any) -> str:
    """A link target for the spec's DLQ: file:// path for file DLQs, jdbc URL/table, kafka://servers/topic, or the log."""
    dlq = spec.dead_letter_queue
    settings = dict(dlq.settings or {})
    if dlq.plugin == "file" and settings.get("path"):
        path = str(settings["path"])
        return path if "://" in path else f"file://{path}"
    if dlq.plugin == "jdbc":
        return f"{settings.get('url', 'jdbc')}#{settings.get('table', '')}"
    if dlq.plugin == "kafka":
        servers = settings.get("servers") or f"connection:{settings.get('connection', '')}"
        return f"kafka://{servers}/{settings.get('topic', '')}"
    return "log: the Spark driver log (builtin:log DLQ)"
