"""Per-record retries (KIP-298 ``errors.retry.*``) against Kafka Connect's ``RetryWithToleranceOperator``.

A fake clock: each attempt takes 0.35 s, the waits are what the retry asks for. Connect cuts the
last wait at the deadline (start + ``errors.retry.timeout``), so the last attempt starts at the
deadline, never later; ``tenacity.stop_after_delay`` alone started it up to ``delay.max`` late.
"""

from __future__ import annotations

import pytest

from airflow_conduit.recovery.errors import TransientError
from airflow_conduit.recovery.record_retry import record_retrying

ATTEMPT_SECONDS = 0.35


class FakeTime:
    def __init__(self):
        self.now = 1000.0
        self.waits: list[float] = []
        self.attempts: list[float] = []  # when each attempt started, seconds after the first

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def failing(self, exc: Exception, succeed_at: int | None = None):
        start = self.now

        def attempt():
            self.attempts.append(self.now - start)
            self.now += ATTEMPT_SECONDS
            if succeed_at is not None and len(self.attempts) == succeed_at:
                return "ok"
            raise exc

        return attempt


def test_the_last_wait_ends_at_the_retry_timeout():
    """The issue's case: 5 s timeout, delay.max 60 s (the default): given up at 6.35 s with stop_after_delay alone."""
    t = FakeTime()
    with pytest.raises(ConnectionError):
        record_retrying(5.0, 60.0, clock=t.clock, sleep=t.sleep)(t.failing(ConnectionError("down")))
    assert t.attempts[-2] + ATTEMPT_SECONDS < 5.0  # the attempt before ended before the deadline...
    assert t.attempts[-1] == pytest.approx(5.0)  # ...so the last wait ended at the deadline, and one attempt ran there
    assert t.now - 1000.0 == pytest.approx(5.0 + ATTEMPT_SECONDS)  # given up when that attempt failed
    assert t.waits[:4] == pytest.approx([0.05, 0.1, 0.2, 0.4])  # doubling from 50 ms


@pytest.mark.parametrize("timeout, delay_max", [(5.0, 1.0), (0.3, 60.0), (2.5, 60.0), (100.0, 7.0), (1.0, 0.01)])
def test_no_wait_reaches_past_the_deadline_and_none_is_longer_than_delay_max(timeout, delay_max):
    t = FakeTime()
    with pytest.raises(ConnectionError):
        record_retrying(timeout, delay_max, clock=t.clock, sleep=t.sleep)(t.failing(ConnectionError("down")))
    assert all(start <= timeout + 1e-9 for start in t.attempts)  # every attempt starts by the deadline
    given_up = t.now - 1000.0
    assert timeout <= given_up + 1e-9 and given_up <= timeout + ATTEMPT_SECONDS + 1e-9  # never more than one attempt late
    assert all(0 <= wait <= delay_max + 1e-9 for wait in t.waits)
    if t.attempts[-1] + ATTEMPT_SECONDS < timeout:
        pytest.fail("gave up before the deadline")


def test_waits_double_up_to_delay_max():
    t = FakeTime()
    with pytest.raises(TransientError):
        record_retrying(30.0, 1.0, clock=t.clock, sleep=t.sleep)(t.failing(TransientError("busy")))
    assert t.waits[:6] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0])
    assert t.waits[6:-1] == pytest.approx([1.0] * len(t.waits[6:-1]))


def test_an_attempt_at_the_deadline_that_succeeds_is_the_result():
    t = FakeTime()
    retrying = record_retrying(2.0, 60.0, clock=t.clock, sleep=t.sleep)
    first = FakeTime()
    with pytest.raises(ConnectionError):
        record_retrying(2.0, 60.0, clock=first.clock, sleep=first.sleep)(first.failing(ConnectionError("down")))
    assert retrying(t.failing(ConnectionError("down"), succeed_at=len(first.attempts))) == "ok"
    assert t.attempts[-1] == pytest.approx(2.0)


def test_an_exception_that_does_not_say_try_again_is_not_retried():
    t = FakeTime()
    with pytest.raises(ValueError):
        record_retrying(5.0, 60.0, clock=t.clock, sleep=t.sleep)(t.failing(ValueError("bad record")))
    assert t.attempts == [0.0] and t.waits == []
