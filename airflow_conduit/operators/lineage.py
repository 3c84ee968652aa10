"""``PipelineLineageMixin``: a pipeline operator's OpenLineage (docs/lineage.md).

The provider's listener calls ``get_openlineage_facets_on_start`` / ``_on_complete`` / ``_on_failure`` (its
``DefaultExtractor``); the operator calls ``lineage_spark_conf`` where it builds a run's Spark settings. Without
the OpenLineage provider the listener never calls the former and the latter returns the settings untouched.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class PipelineLineageMixin:
    """Task-level lineage from the spec and the run reports, and the Spark listener's settings for each run."""

    spec: str
    state_dir: str
    # A DLQ replay reads the pipeline's DLQ (its input) and writes the destinations and the DLQ.
    lineage_reads_dlq: bool = False

    # -- the Spark application's settings ------------------------------------------------------------------------

    def lineage_spark_conf(self, conf: dict[str, Any] | None) -> dict[str, Any] | None:
        """``conf`` with OpenLineage's Spark listener added when lineage is on (``lineage.spark_listener``); with
        lineage off, ``conf`` itself."""
        from airflow_conduit.lineage.spark_listener import lineage_enabled, lineage_spark_conf

        if not lineage_enabled(self):
            return conf
        from airflow.sdk import get_current_context

        try:
            context = get_current_context()
        except Exception:  # noqa: BLE001 - outside a running task (a hook made by hand): no task to be the parent
            return conf
        return lineage_spark_conf(conf, context, app_name=self._lineage_app_name(), operator=self)

    def _lineage_app_name(self) -> str | None:
        spec = self._lineage_spec()
        return f"conduit.{spec.id}" if spec is not None else None

    # -- the task's events ---------------------------------------------------------------------------------------

    def _lineage_spec(self) -> Any:
        """The (rendered) spec, or None when it does not load (the task fails on it with its own message)."""
        from airflow_conduit.pipeline import SpecError, load_pipeline

        try:
            return load_pipeline(self._spec_path())  # type: ignore[attr-defined]
        except (SpecError, OSError):
            return None

    def _lineage_datasets(self, spec: Any) -> Any:
        from airflow_conduit.lineage.datasets import pipeline_datasets, replay_datasets

        datasets = pipeline_datasets(spec, servers_of=_kafka_servers)
        return replay_datasets(datasets) if self.lineage_reads_dlq else datasets

    def _lineage_records(self, task_instance: Any = None) -> tuple[Any, list[dict]]:
        """This task's ``recovery.json`` record and the reports of its supervisor's runs, oldest first (none when
        the record is another task's: the state dir is the pipeline's, shared by its DAG runs)."""
        from pathlib import Path

        from airflow_conduit.lineage.datasets import task_run_ids
        from airflow_conduit.runs.report import read_json, report_path
        from airflow_conduit.runs.state_dir import StateDir

        state_dir = Path(self.state_dir).absolute()
        recovery = StateDir(str(state_dir)).read_recovery()
        owner = (recovery or {}).get("owner") or {}
        if task_instance is not None and any(
                owner.get(key) != getattr(task_instance, key, None) for key in ("dag_id", "run_id", "task_id")):
            return None, []
        reports = []
        for run_id in task_run_ids(recovery):
            try:
                reports.append(read_json(report_path(state_dir, run_id)))
            except ValueError:  # a report being replaced is never half-written; an unreadable one is left out
                continue
        return recovery, [report for report in reports if report]

    def get_openlineage_facets_on_start(self) -> Any:
        from airflow_conduit.lineage.facets import operator_lineage

        spec = self._lineage_spec()
        return None if spec is None else operator_lineage(self._lineage_datasets(spec))

    def get_openlineage_facets_on_complete(self, task_instance: Any = None) -> Any:
        return self._lineage_after_runs(task_instance, failed=False)

    def get_openlineage_facets_on_failure(self, task_instance: Any = None) -> Any:
        return self._lineage_after_runs(task_instance, failed=True)

    def _lineage_after_runs(self, task_instance: Any, *, failed: bool) -> Any:
        from airflow_conduit.lineage.datasets import counts_over_runs, last_failure
        from airflow_conduit.lineage.facets import operator_lineage

        spec = self._lineage_spec()
        if spec is None:
            return None
        recovery, reports = self._lineage_records(task_instance)
        failure = last_failure(recovery) if failed else None
        return operator_lineage(self._lineage_datasets(spec), counts_over_runs(reports), spec, failure)


def _kafka_servers(conn_id: str) -> str | None:
    """The bootstrap servers of the Airflow ``kafka`` connection ``conn_id`` (its extra's ``bootstrap.servers``)."""
    try:
        from airflow.sdk import BaseHook

        extra = BaseHook.get_connection(conn_id).extra_dejson
    except Exception:  # noqa: BLE001 - the dataset is then named by the connection's id
        log.debug("Kafka connection %s not readable for lineage", conn_id, exc_info=True)
        return None
    return extra.get("bootstrap.servers") or extra.get("bootstrap_servers")
