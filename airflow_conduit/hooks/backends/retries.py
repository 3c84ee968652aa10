"""How the standalone backend retries a REST call to the master (tenacity): bounded, exponential backoff.

Set on ``SparkPipelineHook`` and the operator (``rest_retry_limit``, ``rest_retry_delay``,
``rest_retry_max_delay``); the values travel in the job handle, so the trigger's status calls and a
later stop retry the same way as the submission did.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import tenacity

from airflow_conduit.runs.handles import JobHandle

REST_RETRY_LIMIT = 5  # attempts per REST call
REST_RETRY_DELAY = 1.0  # seconds before the second attempt, doubling after each one ...
REST_RETRY_MAX_DELAY = 10.0  # ... up to this many seconds


@dataclass(frozen=True)
class RestRetry:
    """``limit`` attempts per call, waiting ``delay`` seconds after the first, doubling up to ``max_delay``."""

    limit: int = REST_RETRY_LIMIT
    delay: float = REST_RETRY_DELAY
    max_delay: float = REST_RETRY_MAX_DELAY

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"rest_retry_limit: expected a whole number of attempts >= 1, got {self.limit!r}")
        for name, value in (("rest_retry_delay", self.delay), ("rest_retry_max_delay", self.max_delay)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected seconds >= 0, got {value!r}")
        if self.max_delay < self.delay:
            raise ValueError(f"rest_retry_max_delay: {self.max_delay!r} is below rest_retry_delay {self.delay!r}")

    def tenacity_args(self, retry_on: Callable[[BaseException], bool]) -> dict[str, Any]:
        """Arguments of ``tenacity.Retrying``/``AsyncRetrying`` for one call, retrying the errors ``retry_on`` accepts."""
        return {
            "retry": tenacity.retry_if_exception(retry_on),
            "stop": tenacity.stop_after_attempt(self.limit),
            "wait": tenacity.wait_exponential(multiplier=self.delay, min=self.delay, max=self.max_delay),
            "reraise": True,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_handle(cls, handle: JobHandle) -> RestRetry:
        """The retry settings a job was submitted with (the defaults for a handle that carries none)."""
        return cls(**(handle.rest_retry or {}))
