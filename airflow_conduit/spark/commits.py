"""Per-destination, per-batch commit markers: STATE_DIR/commits/<destination-id>/<batch-id>.

Spark re-runs an uncommitted micro-batch after a crash with the same batch id
and input. A destination whose marker for that batch exists is skipped, so a
crash after destination A wrote and before B wrote leads, on restart, to B
being written and A not written again. Writers are themselves idempotent per
batch (batch-scoped overwrite, delete-then-insert in one transaction), so a
crash after a write and before its marker only rewrites the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic

KEEP_BATCHES = 100  # as many as Spark's own checkpoint keeps (spark.sql.streaming.minBatchesToRetain)


class CommitLog:
    def __init__(self, state_dir: str | Path):
        self.root = Path(state_dir) / "commits"

    def path(self, destination_id: str, batch_id: int) -> Path:
        return self.root / destination_id / str(batch_id)

    def get(self, destination_id: str, batch_id: int) -> dict[str, Any] | None:
        """The marker's content (rows written, run id, time), or None when the batch is not committed there."""
        return read_json(self.path(destination_id, batch_id))

    def batches(self, destination_id: str) -> list[int]:
        """The batches committed to ``destination_id`` whose markers are kept (the last ``KEEP_BATCHES``), in order."""
        folder = self.root / destination_id
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir() if p.name.lstrip("-").isdigit())

    def has_any(self, destination_id: str) -> bool:
        """Whether this state directory ever committed a batch to ``destination_id`` (a marker is kept)."""
        return bool(self.batches(destination_id))

    def remove_leftovers(self) -> int:
        """Delete the temp files of markers whose writer was killed before its rename (``.<batch>.*.tmp``).

        Such a file is never a marker (a marker exists only once renamed into place), so a killed run or replay
        would otherwise leave it for good. Called when a run starts: one driver per state dir (the lease)
        means no writer is mid-write then. Returns how many were deleted.
        """
        if not self.root.is_dir():
            return 0
        removed = 0
        for leftover in self.root.glob("*/.*.tmp"):
            leftover.unlink(missing_ok=True)
            removed += 1
        return removed

    def mark(self, destination_id: str, batch_id: int, *, rows: int, run_id: str) -> None:
        write_json_atomic(
            self.path(destination_id, batch_id),
            {"destination": destination_id, "batch_id": batch_id, "rows": rows, "run_id": run_id, "at": utc_now_iso()},
            durable=False,  # per batch: see write_json_atomic
        )
        self.path(destination_id, batch_id - KEEP_BATCHES).unlink(missing_ok=True)
