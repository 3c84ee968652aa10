"""Read and write what a pipeline keeps in its state directory (docs/architecture.md, state directory).

``recovery.json`` is written through ``runs.store`` only (the operators and ``airflow-conduit run``);
the sensors, triggers and the UI read it here. Every read tolerates a missing or half-created directory.
"""

from __future__ import annotations

import errno
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_conduit.runs.no_space import is_no_space, no_space_message
from airflow_conduit.runs.report import RunReport, read_json, utc_now_iso, write_json_atomic
from airflow_conduit.recovery.clock import parse_iso
from airflow_conduit.recovery.state import PipelineState

RECOVERY_FILE = "recovery.json"
RECOVERY_FORMAT = 1
# Space kept free for recovery.json: released when the file system is full, so the state written then (the
# pipeline degraded because the disk is full) still reaches the file the sensors and the UI read.
RESERVE_FILE = ".recovery-reserve"
RESERVE_BYTES = 512 * 1024


class StateDirFull(OSError):
    """recovery.json could not be written: the state directory's file system is full (even after its reserve)."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


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
    #   "submissions": int, "current": job handle | null, "last_event": WatchEvent.digest() | null,
    #   "carry": RunSupervisor.carry() (options, recovery state with the window and the audit log)
    # }

    def read_recovery(self) -> dict[str, Any] | None:
        try:
            return read_json(self.recovery_path)
        except ValueError:  # not ours: read as absent
            return None

    def write_recovery(self, record: dict[str, Any]) -> None:
        """Replace recovery.json; on a full file system, release the reserve kept for it and try once more
        (``StateDirFull`` when that fails too)."""
        record = dict(record, format=RECOVERY_FORMAT, updated_at=utc_now_iso())
        try:
            write_json_atomic(self.recovery_path, record)
        except OSError as exc:
            if not is_no_space(exc):
                raise
            if self._release_reserve():
                try:
                    write_json_atomic(self.recovery_path, record)
                    return
                except OSError as again:
                    exc = again
            self._overwrite_in_place(record, exc)
            return
        self.keep_reserve()

    def _overwrite_in_place(self, record: dict[str, Any], cause: OSError) -> None:
        """The last resort on a full disk with no reserve left: recovery.json truncated and written again in its
        own blocks (the file it replaces is about as long). Not atomic: a reader that finds it half-written reads
        it as absent (``read_recovery``), which is still better than a stale ``running``."""
        try:
            with open(self.recovery_path, "r+b") as fh:
                fh.truncate(0)
                fh.write(json.dumps(record, indent=2, default=str).encode("utf-8"))
        except OSError as exc:
            raise StateDirFull(no_space_message(cause, self.path)) from exc

    @property
    def reserve_path(self) -> Path:
        return self.path / RESERVE_FILE

    def keep_reserve(self) -> None:
        """Make the reserve when it is missing and there is room for it (else at a later write)."""
        path = self.reserve_path
        if path.exists():
            return
        try:
            with open(path, "wb") as fh:
                os.posix_fallocate(fh.fileno(), 0, RESERVE_BYTES)
        except (OSError, AttributeError):  # no room now, or no fallocate: no reserve (tried again next time)
            path.unlink(missing_ok=True)

    def _release_reserve(self) -> bool:
        try:
            self.reserve_path.unlink()
        except FileNotFoundError:
            return False
        return True

    def pipeline_state(self) -> PipelineState | None:
        record = self.read_recovery()
        try:
            return PipelineState(record["pipeline_state"]) if record else None
        except (KeyError, ValueError):  # not ours: read as absent
            return None

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

    def dlq_records_since(self, since: datetime | str | None) -> int:
        """Records sent to the DLQ in batches committed at or after ``since`` (all of them when None).

        A report keeps its last 100 batches; for a run with more, the batches that fell out of the
        window count through the report's totals when the run started after ``since``.
        """
        since_dt = parse_iso(since)
        total = 0
        for report in self.reports():
            started = parse_iso(report.started_at)
            if since_dt is None or (started is not None and started >= since_dt):
                total += int(report.totals.get("dlq") or 0)
                continue
            total += sum(int(b.get("dlq") or 0) for b in report.batches if (parse_iso(b.get("at")) or since_dt) >= since_dt)
        return total
