"""Restart policies as strategies: one small class per policy, like Flink's restart strategies or tenacity's waits.

A policy answers four questions for the engine (``RestartPolicy``):

- ``delay(attempt)``: how long to wait before restart number ``attempt`` (1 = first since the last reset);
- ``bounds()``: the interval every delay lies in, jitter included;
- ``reset_period(attempt)``: how long a restarted pipeline must run without failure before the
  attempt counter goes back to 0 (and whether the first record resets it too);
- ``budget``: the retry budget class that goes with it (``budgets.py``): Conduit counts restarts inside a
  sliding ``max-retries-window``; Strimzi counts restarts since the last reset.

Policies:

- exponential (Conduit): ``min-delay * backoff-factor ** (attempt - 1)``, capped at ``max-delay``.
- strimzi (Strimzi proposal 055): ``min(c*c + c, 60)`` minutes with ``c = attempt - 1`` restarts already
  done, i.e. 0, 2, 6, 12, 20, 30, 42, 56, 60, 60... minutes. It has its own bounds: the
  min-delay/max-delay/backoff-factor/max-retries-window options do not apply.
- fixed: always ``min-delay``.

A new policy is one frozen dataclass with a ``name`` and a ``budget``, registered in ``POLICY_CLASSES``. Its
fields are the options it reads, as plain values (``build_policy``); ``recovery.options.policy_for`` builds it
from the options, so this module does not know the options type.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping, Protocol

from airflow_conduit.recovery.budgets import RetryBudget, SinceResetBudget, WindowBudget

STRIMZI_MAX_MINUTES = 60


class RestartPolicy(Protocol):
    name: ClassVar[str]
    budget: ClassVar[type[RetryBudget]]  # what max-retries counts under this policy

    def delay(self, attempt: int) -> float: ...

    def bounds(self) -> tuple[float, float]: ...

    def reset_period(self, attempt: int) -> float: ...

    @property
    def resets_on_first_record(self) -> bool: ...


def _check_attempt(attempt: int) -> None:
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")


@dataclass(frozen=True)
class _ConduitResets:
    """Conduit/design-doc resets: a healthy ``backoff-reset-after``, or the first record end to end; windowed counting."""

    budget: ClassVar[type[RetryBudget]] = WindowBudget

    min_delay: float
    max_delay: float
    backoff_reset_after: float
    reset_on_first_record: bool

    def bounds(self) -> tuple[float, float]:
        return float(self.min_delay), float(self.max_delay)

    def reset_period(self, attempt: int) -> float:
        return float(self.backoff_reset_after)

    @property
    def resets_on_first_record(self) -> bool:
        return self.reset_on_first_record


@dataclass(frozen=True)
class ExponentialBackoff(_ConduitResets):
    """Conduit's policy: the delay doubles (``backoff-factor``) from ``min-delay`` up to ``max-delay``."""

    name: ClassVar[str] = "exponential"

    backoff_factor: float = 2

    def delay(self, attempt: int) -> float:
        _check_attempt(attempt)
        try:
            delay = self.min_delay * float(self.backoff_factor) ** (attempt - 1)
        except OverflowError:
            return float(self.max_delay)
        return float(min(delay, self.max_delay))


@dataclass(frozen=True)
class FixedDelay(_ConduitResets):
    """Always ``min-delay``; resets and counting as Conduit's."""

    name: ClassVar[str] = "fixed"

    def delay(self, attempt: int) -> float:
        _check_attempt(attempt)
        return float(self.min_delay)


def strimzi_minutes(restarts_done: int) -> int:
    """Strimzi's ``minimum(restartCount * restartCount + restartCount, 60)``."""
    return min(restarts_done * restarts_done + restarts_done, STRIMZI_MAX_MINUTES)


@dataclass(frozen=True)
class StrimziBackoff:
    """Strimzi proposal 055: restart at once, then 2, 6, 12... minutes up to 60; count restarts since the last reset.

    The counter resets only after the connector ran for the backoff interval of the restarts
    already done ("if it was restarted 4 times, it needs to run for 20 minutes"), never on the
    first record, and ``max-retries`` bounds the restarts since that reset, with no window.
    """

    name: ClassVar[str] = "strimzi"
    budget: ClassVar[type[RetryBudget]] = SinceResetBudget  # its own formula: no option shapes it, so no fields

    def delay(self, attempt: int) -> float:
        _check_attempt(attempt)
        return float(strimzi_minutes(attempt - 1) * 60)

    def bounds(self) -> tuple[float, float]:
        return 0.0, float(STRIMZI_MAX_MINUTES * 60)

    def reset_period(self, attempt: int) -> float:
        return float(strimzi_minutes(attempt) * 60)

    @property
    def resets_on_first_record(self) -> bool:
        return False


POLICY_CLASSES: dict[str, type] = {cls.name: cls for cls in (ExponentialBackoff, StrimziBackoff, FixedDelay)}
POLICY_NAMES: tuple[str, ...] = tuple(POLICY_CLASSES)


def build_policy(name: str, values: Mapping[str, Any]) -> RestartPolicy:
    """The policy called ``name``, its fields taken from ``values`` (plain option values by field name)."""
    cls = POLICY_CLASSES[name]
    return cls(**{f.name: values[f.name] for f in fields(cls)})


def jittered_delay(policy: RestartPolicy, attempt: int, *, jitter: float, seed: int, draw: int) -> float:
    """The policy delay with +/- ``jitter`` applied, kept inside the policy's bounds.

    The random factor depends only on (seed, draw) so a resumed engine, or a second
    run with the same seed, draws the same jitter.
    """
    delay = policy.delay(attempt)
    if not jitter:
        return delay
    spread = random.Random(f"{seed}:{draw}").uniform(-jitter, jitter)
    low, high = policy.bounds()
    return min(max(delay * (1.0 + spread), low), high)
