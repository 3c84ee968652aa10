"""Per-record retries (KIP-298 ``errors.retry.*``): how a ``custom`` processor retries one record.

Pure (tenacity only): the Python workers run it for each record; tests drive it with a fake clock.
"""

from __future__ import annotations

import time
from typing import Callable

import tenacity

from airflow_conduit.recovery.errors import TransientError

FIRST_WAIT_SECONDS = 0.05  # the first wait between two attempts; each next one doubles, up to errors.retry.delay.max
RETRIED = (TransientError, ConnectionError, TimeoutError)  # exceptions that say "try again"; others nack at once


def record_retrying(timeout_s: float, delay_max_s: float, *, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> tenacity.Retrying:
    """KIP-298's retry of one record: exponential waits within ``errors.retry.timeout``, as Kafka Connect does it.

    Connect (``RetryWithToleranceOperator``) retries while the deadline (first attempt + timeout) is
    not reached and cuts each wait at the deadline, so the last attempt starts at the deadline at the
    latest and the record is given up when it fails. ``tenacity.stop_after_delay`` alone is checked
    only after an attempt, so the last wait could overrun the timeout by up to ``delay.max``: here each
    wait is capped by the time left. ``clock`` and ``sleep`` are injectable for tests.
    """
    started = clock()
    exponential = tenacity.wait_exponential(multiplier=FIRST_WAIT_SECONDS, max=max(delay_max_s, 0.001))

    def time_left() -> float:
        return timeout_s - (clock() - started)

    def wait(state: tenacity.RetryCallState) -> float:
        return max(0.0, min(exponential(state), time_left()))

    def stop(state: tenacity.RetryCallState) -> bool:
        return time_left() <= 0

    return tenacity.Retrying(stop=stop, wait=wait, sleep=sleep, reraise=True,
                             retry=tenacity.retry_if_exception_type(RETRIED))
