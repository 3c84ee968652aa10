"""Batch numbers that go on across checkpoints: STATE_DIR/batch-numbers.json.

Spark numbers a streaming query's micro-batches from 0, and a new checkpoint (one deleted to start over,
or a corrupt one replaced) starts at 0 again. Everything the runner keeps or replaces per batch is keyed
on the batch's number: the commit markers (``commits/<destination>/<n>``), the DLQ nack window
(``dlq-window/<n>.json``), the expectation stops (``expectations/<n>.json``), the Kafka intents, a file
destination's ``batch_id=<n>`` folder, a JDBC destination's rows with ``_conduit_batch_id = n``. Keyed on
Spark's id alone, a new checkpoint's batch 0 would be taken for the old one's (skipped as committed: its
records lost) or written over it (the old batch's records lost).

So each checkpoint, known by its streaming query's id (kept in its ``metadata`` file, new with a new
checkpoint), gets a base: its batch ``n`` is number ``base + n``. The first checkpoint's base is 0 (numbers
are Spark's ids); a later one's is one more than any number used before. A re-run of an uncommitted batch
(same checkpoint, same Spark id) gets the same number, so it is recognised exactly as before.
The file: ``{"query_id", "base", "last"}``, ``last`` being the highest number started (written before
the batch runs, so a batch that died before its first marker is never reused either).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_conduit.runs.report import read_json, write_json_atomic

FILE = "batch-numbers.json"
# the per-batch state a state dir may hold, for the numbers it used before this file existed
PER_BATCH = ("commits/*/*", "dlq-window/*.json", "expectations/*.json", "kafka-intents/*/*.json")


def checkpoint_query_id(checkpoint: Path) -> str | None:
    """The streaming query's id kept in the checkpoint's ``metadata`` file; None when there is none yet."""
    try:
        first = (checkpoint / "metadata").read_text().splitlines()[0]
        query_id = json.loads(first).get("id")
    except (FileNotFoundError, IndexError, ValueError, AttributeError):
        return None
    return str(query_id) if query_id else None


def _number_in(path: Path) -> int | None:
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


class BatchNumbers:
    """The base of the current checkpoint's batch numbers, kept in ``STATE_DIR/batch-numbers.json``."""

    def __init__(self, state_dir: str | Path):
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / FILE
        self._data: dict[str, Any] | None = None

    def adopt(self, query_id: str | None) -> None:
        """At a run's start, before its query starts: a state dir kept before this file existed whose
        checkpoint is still there goes on numbering as Spark does (its markers are that checkpoint's)."""
        if query_id is not None and read_json(self.path) is None:
            write_json_atomic(self.path, {"query_id": query_id, "base": 0, "last": -1})

    def number(self, query_id: str, batch_id: int) -> int:
        """Batch ``batch_id`` of the checkpoint ``query_id``'s number (recorded as started before it is returned)."""
        data = self._data or read_json(self.path)
        changed = not data or data.get("query_id") != query_id
        if changed:
            data = {"query_id": query_id, "base": self._next_free(data), "last": -1}
        number = int(data["base"]) + batch_id
        if number > int(data["last"]):
            data, changed = {**data, "last": number}, True
        if changed:
            write_json_atomic(self.path, data, durable=False)  # per batch: see write_json_atomic
        self._data = data
        return number

    def _next_free(self, previous: dict[str, Any] | None) -> int:
        """One more than any batch number this state dir used: the last checkpoint's, and any per-batch file's."""
        used = [int(previous.get("last", -1))] if previous else []
        for pattern in PER_BATCH:
            used += [n for n in (_number_in(p) for p in self.state_dir.glob(pattern)) if n is not None]
        return max(used, default=-1) + 1
