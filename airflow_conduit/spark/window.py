"""Conduit's DLQ nack window, evaluated over the ordered record stream across batches (pure Python).

Conduit's semantics (pkg/pipeline/stream/dlq.go): the window holds the
outcome (ack or nack) of the last ``window-size`` records, all acks at first;
a nack is tolerated while the nacks in the window do not exceed
``window-nack-threshold``. Defaults 1 and 0: the first nack stops the
pipeline. ``window-size`` 0 disables the window: nacks never stop it. With a
threshold of 0 the size does not matter (Conduit shrinks it to 1). Once the
threshold is exceeded the window is frozen.

The state is small (the last ``size`` outcomes) and is saved per batch in
STATE_DIR/dlq-window/<batch-id>.json, so the window continues across batches
and restarts.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any, Iterable

from airflow_conduit.runs.report import read_json, write_json_atomic

KEEP_FILES = 20


class NackWindow:
    """The last ``size`` outcomes, kept as the positions of their nacks: a batch costs O(its nacks), not O(its
    records) (acks between two nacks are a count, not ``size`` appends)."""

    def __init__(self, size: int = 1, threshold: int = 0, outcomes: Iterable[bool] = (), exceeded: bool = False):
        if size > 0 and threshold == 0:
            size = 1
        self.size = size
        self.threshold = threshold
        self.exceeded = exceeded
        self._end = 0  # records seen: the next record's position
        self._nacked: deque[int] = deque()  # positions of the nacks among the last ``size`` records
        if size:
            kept = list(outcomes)
            self._nacked.extend(i - len(kept) for i, nacked in enumerate(kept) if nacked)
            self._expire()

    @property
    def nacks(self) -> int:
        return len(self._nacked)

    def _expire(self) -> None:
        oldest = self._end - self.size
        while self._nacked and self._nacked[0] < oldest:
            self._nacked.popleft()

    def ack(self, count: int = 1) -> None:
        if self.size == 0 or self.exceeded or count <= 0:
            return
        self._end += count
        self._expire()

    def nack(self) -> bool:
        """Record a nack; False when it exceeds the threshold (the pipeline must stop)."""
        if self.size == 0:
            return True
        if self.exceeded:
            return False
        self._nacked.append(self._end)
        self._end += 1
        self._expire()
        if self.nacks > self.threshold:
            self.exceeded = True
        return not self.exceeded

    def apply_batch(self, total: int, nack_indices: Iterable[int]) -> int | None:
        """Feed a batch of ``total`` ordered records whose nacks are at ``nack_indices`` (0-based, sorted).

        Returns the index of the record that exceeded the threshold, or None.
        """
        crossed: int | None = None
        previous = -1
        for index in nack_indices:
            self.ack(index - previous - 1)
            if not self.nack() and crossed is None:
                crossed = index
            previous = index
        self.ack(total - previous - 1)
        return crossed

    def to_dict(self) -> dict[str, Any]:
        outcomes = ""
        if self.size:
            flags = ["0"] * self.size
            oldest = self._end - self.size
            for position in self._nacked:
                flags[position - oldest] = "1"
            outcomes = "".join(flags)
        return {"size": self.size, "threshold": self.threshold, "outcomes": outcomes, "exceeded": self.exceeded}

    @classmethod
    def from_dict(cls, data: dict[str, Any], size: int, threshold: int) -> "NackWindow":
        """Restore the recent outcomes (as many as the spec's size keeps); the freeze is not restored.

        A run that exceeded the threshold stopped as degraded; whoever restarts it decided to go on,
        so the window is unfrozen, but its recent nacks still count: the next nack stops it again
        unless enough acks pushed them out.
        """
        outcomes = [c == "1" for c in data.get("outcomes", "")]
        return cls(size, threshold, outcomes)


class WindowStore:
    """STATE_DIR/dlq-window/<batch-id>.json: the window after each batch."""

    def __init__(self, state_dir: str | Path):
        self.root = Path(state_dir) / "dlq-window"
        self._cleared = False  # a disabled window's files removed (once per run)

    def _batches(self) -> list[int]:
        if not self.root.exists():
            return []
        return sorted(int(p.stem) for p in self.root.glob("*.json") if p.stem.isdigit())

    def get(self, batch_id: int) -> dict[str, Any] | None:
        return read_json(self.root / f"{batch_id}.json")

    def before(self, batch_id: int, size: int, threshold: int) -> NackWindow:
        """The window as it was after the last batch before ``batch_id`` (a fresh one when none, or when disabled)."""
        if size == 0:
            return NackWindow(size, threshold)
        earlier = [b for b in self._batches() if b < batch_id]
        if not earlier:
            return NackWindow(size, threshold)
        data = self.get(earlier[-1]) or {}
        return NackWindow.from_dict(data.get("window", {}), size, threshold)

    def save(self, batch_id: int, window: NackWindow, crossed_at: int | None) -> None:
        """Keep the window after batch ``batch_id``. A disabled window (size 0) keeps nothing and never stops
        the run: its batches write no file, and a window enabled later starts fresh (older files are removed)."""
        if window.size == 0:
            if not self._cleared:
                for old in self._batches():
                    (self.root / f"{old}.json").unlink(missing_ok=True)
                self._cleared = True
            return
        write_json_atomic(
            self.root / f"{batch_id}.json",
            {"batch_id": batch_id, "window": window.to_dict(), "crossed_at_record": crossed_at},
            durable=False,  # per batch: see write_json_atomic
        )
        for old in self._batches()[:-KEEP_FILES]:
            (self.root / f"{old}.json").unlink(missing_ok=True)
