"""The query's progress, kept in the run's folder for the UI: rows per second and, for a Kafka source, how far
each partition is behind the topic's end.

Spark's Kafka source reports ``latestOffset`` (the topic's end when the batch was planned) beside the batch's
``endOffset``, and ``avgOffsetsBehindLatest`` / ``maxOffsetsBehindLatest`` in its metrics; nothing else records
them. ``ProgressRecorder.record`` is called from the runner's wait loop: one JVM round trip (``lastProgress``) per
call, a file write only when a new batch's progress arrived. ``STATE_DIR/runs/<run-id>/progress.json`` keeps the
run's last ``KEEP`` batches (rewritten atomically, not fsync'd: it is a view, not a guarantee).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from airflow_conduit.runs.report import write_json_atomic

log = logging.getLogger(__name__)

PROGRESS_FILE = "progress.json"
KEEP = 100


def source_entry(source: dict[str, Any]) -> dict[str, Any]:
    metrics = source.get("metrics") or {}
    return {
        "description": str(source.get("description") or ""),
        "end_offset": source.get("endOffset"),
        "latest_offset": source.get("latestOffset"),
        "avg_offsets_behind_latest": _number(metrics.get("avgOffsetsBehindLatest")),
        "max_offsets_behind_latest": _number(metrics.get("maxOffsetsBehindLatest")),
        "input_rows_per_second": _number(source.get("inputRowsPerSecond")),
        "processed_rows_per_second": _number(source.get("processedRowsPerSecond")),
    }


def progress_entry(progress: dict[str, Any]) -> dict[str, Any]:
    """What the UI needs of one ``StreamingQueryProgress`` (its JSON as PySpark returns it)."""
    return {
        "batch_id": progress.get("batchId"),
        "at": progress.get("timestamp"),
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": _number(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _number(progress.get("processedRowsPerSecond")),
        "sources": [source_entry(s) for s in progress.get("sources") or [] if isinstance(s, dict)],
    }


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class ProgressRecorder:
    """Keeps the query's progress events in ``<run folder>/progress.json`` (the runner's wait loop calls ``record``)."""

    def __init__(self, run_folder: Path):
        self.path = Path(run_folder) / PROGRESS_FILE
        self.entries: list[dict[str, Any]] = []
        self._last: tuple[Any, Any] | None = None

    def record(self, query: Any) -> None:
        try:
            progress = query.lastProgress
            if not progress:
                return
            key = (progress.get("id"), progress.get("batchId"))
            if key == self._last:
                return
            self._last = key
            self.entries = [*self.entries, progress_entry(progress)][-KEEP:]
            write_json_atomic(self.path, {"progress": self.entries}, durable=False)
        except Exception:  # noqa: BLE001 - a view for the UI: never the run's failure
            log.debug("query progress not recorded", exc_info=True)
