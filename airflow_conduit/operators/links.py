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

