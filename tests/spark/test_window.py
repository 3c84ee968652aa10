"""Conduit's DLQ nack window (pure Python) and the run report file: no Spark needed."""

from __future__ import annotations

import json
import random

from airflow_conduit.runs.report import RunReport, report_path
from airflow_conduit.spark.window import NackWindow, WindowStore


def test_defaults_stop_at_the_first_nack():
    window = NackWindow()  # window-size 1, window-nack-threshold 0
    window.ack(10)
    assert window.nack() is False
    assert window.exceeded


def test_size_zero_never_stops():
    window = NackWindow(size=0, threshold=0)
    assert all(window.nack() for _ in range(1000))


def test_threshold_counts_nacks_in_the_last_size_records():
    window = NackWindow(size=4, threshold=2)
    assert window.nack() and window.nack()  # [A A N N]: 2 nacks tolerated
    window.ack(1)  # [A N N A]
    assert window.nack() is False  # [N N A N]: 3 > 2


def test_sliding_window_forgets_old_nacks():
    window = NackWindow(size=3, threshold=1)
    assert window.nack()  # [A A N] 1 nack
    window.ack(3)  # [A A A]
    assert window.nack()  # [A A N]
    window.ack(1)  # [A N A]
    assert window.nack() is False  # [N A N] 2 > 1
    assert window.exceeded and window.nack() is False  # frozen


def test_apply_batch_returns_the_crossing_record_and_continues_across_batches(tmp_path):
    store = WindowStore(tmp_path)
    window = store.before(0, 5, 1)
    assert window.apply_batch(10, [8]) is None  # one nack in the last 5: tolerated
    store.save(0, window, None)
    again = store.before(1, 5, 1)  # the next batch continues from the saved window
    assert again.apply_batch(10, [1]) == 1  # batch 0's record 8 is still in the window: 2 nacks > 1
    fresh = store.before(1, 5, 1)
    assert fresh.apply_batch(10, [5]) is None  # by record 5 of batch 1 the nack of batch 0 slid out


class OutcomeByOutcome:
    """Conduit's window as its docs describe it, one outcome per record: the model ``NackWindow`` must match."""

    def __init__(self, size: int, threshold: int, outcomes: tuple[bool, ...] | list[bool] = ()):
        self.size = 1 if size > 0 and threshold == 0 else size
        self.threshold = threshold
        self.outcomes = ([False] * self.size + list(outcomes))[-self.size:] if self.size else []
        self.exceeded = False

    def record(self, nacked: bool) -> bool:
        if self.size == 0:
            return True
        if not self.exceeded:
            self.outcomes = (self.outcomes + [nacked])[-self.size:]
            self.exceeded = nacked and sum(self.outcomes) > self.threshold  # only a nack can exceed it
        return not (nacked and self.exceeded)

    def apply_batch(self, total: int, nacks: set[int]) -> int | None:
        crossed = None
        for index in range(total):
            if not self.record(index in nacks) and crossed is None:
                crossed = index
        return crossed


def test_window_matches_outcome_by_outcome_across_batches_and_restores():
    rng = random.Random(8)
    for _ in range(300):
        size, threshold = rng.choice([0, 1, 2, 5, 13]), rng.choice([0, 1, 2, 4])
        fast, slow = NackWindow(size, threshold), OutcomeByOutcome(size, threshold)
        for _ in range(rng.randint(1, 4)):
            total = rng.randint(0, 40)
            nacks = sorted(rng.sample(range(total), k=rng.randint(0, min(total, 8))))
            assert fast.apply_batch(total, nacks) == slow.apply_batch(total, set(nacks))
            saved = fast.to_dict()
            assert saved["outcomes"] == "".join("1" if o else "0" for o in slow.outcomes)
            assert fast.exceeded == slow.exceeded
            fast = NackWindow.from_dict(saved, size, threshold)  # restored as a restart does: unfrozen
            slow = OutcomeByOutcome(size, threshold, slow.outcomes)


def test_report_round_trip_and_atomic_write(tmp_path):
    path = report_path(tmp_path, "run-1")
    report = RunReport(pipeline_id="p", run_id="run-1", status="running")
    report.add_batch(0, read=5, filtered=1, dlq=1, written={"a": 3, "b": 3})
    report.add_batch(1, read=2, filtered=0, dlq=0, written={"a": 2, "b": 0})
    report.add_counters(total_record_failures=1, deadletterqueue_records_produced=1)
    report.write_atomic(path)
    data = json.loads(path.read_text())
    assert data["totals"] == {"read": 7, "filtered": 1, "dlq": 1, "written": {"a": 5, "b": 3}}
    assert data["counters"]["total-record-failures"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]  # no temp file left behind
    assert RunReport.read(path).to_dict() == report.to_dict()
    assert RunReport.read(tmp_path / "missing.json") is None
