"""Read and write what a pipeline keeps in its state directory (docs/architecture.md, state directory).

Shared by the operator and the ``airflow-conduit run`` command (writers of
``recovery.json``) and by the sensors and triggers (readers). Imports no
Airflow; every read tolerates a missing or half-created directory.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_conduit.pipeline.report import RunReport, utc_now_iso, write_json_atomic

RECOVERY_FILE = "recovery.json"
RECOVERY_FORMAT = 1


def parse_time(value: str | datetime | None) -> datetime | None:
    """ISO-8601 (with Z or offset) to an aware UTC datetime; naive input is taken as UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


class StateDir:
    """One pipeline's state directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def recovery_path(self) -> Path:
        return self.path / RECOVERY_FILE

    # -- recovery.json ---------------------------------------------------------------------------
    # {
    #   "format": 1, "updated_at": ISO, "pipeline_id": str|null,
    #   "pipeline_state": "running"|"recovering"|"degraded"|"stopped",
    #   "owner": {"dag_id", "run_id", "task_id", "map_index"} | {"cli": true},
    #   "submissions": int, "current": job handle | null, "last_event": trigger event | null,
    #   "recovery": RecoveryState JSON (options, window, audit log)
    # }

    def read_recovery(self) -> dict[str, Any] | None:
        try:
            with open(self.recovery_path, encoding="utf-8") as fh:
                return json.load(fh)
        except (FileNotFoundError, ValueError):
            return None

    def write_recovery(self, record: dict[str, Any]) -> None:
        record = dict(record, format=RECOVERY_FORMAT, updated_at=utc_now_iso())
        write_json_atomic(self.recovery_path, record)

    def pipeline_state(self) -> str | None:
        record = self.read_recovery()
        return record.get("pipeline_state") if record else None

    # -- run reports -----------------------------------------------------------------------------

    def reports(self) -> list[RunReport]:
        """Every run report, oldest first (by start time, then run id)."""
        found = []
        for path in sorted((self.path / "runs").glob("*/report.json")):
            try:
                report = RunReport.read(path)
            except ValueError:  # never half-written (atomic), but a stranger's file could be anything
                continue
            if report is not None:
                found.append(report)
        return sorted(found, key=lambda r: (r.started_at or "", r.run_id))

    def latest_report(self) -> RunReport | None:
        reports = self.reports()
        return reports[-1] if reports else None

    def dlq_records_since(self, since: datetime | str | None) -> int:
        """Records sent to the DLQ in batches committed at or after ``since`` (all of them when None).

        A report keeps its last 100 batches; for a run with more, the batches that fell out of the
        window count through the report's totals when the run started after ``since``.
        """
        since_dt = parse_time(since)
        total = 0
        for report in self.reports():
            started = parse_time(report.started_at)
            if since_dt is None or (started is not None and started >= since_dt):
                total += int(report.totals.get("dlq") or 0)
                continue
            total += sum(int(b.get("dlq") or 0) for b in report.batches if (parse_time(b.get("at")) or since_dt) >= since_dt)
        return total
