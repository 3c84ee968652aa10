"""Backoff policies: how long to wait before restart number ``attempt`` (1-based), and when the counter resets.

- exponential (Conduit): ``min-delay * backoff-factor ** (attempt - 1)``, capped at ``max-delay``.
- strimzi (Strimzi proposal 055): ``min(c*c + c, 60)`` minutes with ``c = attempt - 1`` restarts already
  done, i.e. 0, 2, 6, 12, 20, 30, 42, 56, 60, 60... minutes. It has its own bounds: the
  min-delay/max-delay/backoff-factor options do not apply.
- fixed: always ``min-delay``.
"""

from __future__ import annotations

import random

from airflow_conduit.recovery.options import RecoveryOptions

STRIMZI_MAX_MINUTES = 60


def strimzi_minutes(restarts_done: int) -> int:
    """Strimzi's ``minimum(restartCount * restartCount + restartCount, 60)``."""
    return min(restarts_done * restarts_done + restarts_done, STRIMZI_MAX_MINUTES)


def base_delay(options: RecoveryOptions, attempt: int) -> float:
    """Delay in seconds before restart ``attempt`` (1 = first restart after a reset), without jitter."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if options.policy == "strimzi":
        return float(strimzi_minutes(attempt - 1) * 60)
    if options.policy == "fixed":
        return float(options.min_delay)
    try:
        delay = options.min_delay * float(options.backoff_factor) ** (attempt - 1)
    except OverflowError:
        return float(options.max_delay)
    return float(min(delay, options.max_delay))


def delay_bounds(options: RecoveryOptions) -> tuple[float, float]:
    """The interval every delay of the policy lies in, jitter included."""
    if options.policy == "strimzi":
        return 0.0, float(STRIMZI_MAX_MINUTES * 60)
    return float(options.min_delay), float(options.max_delay)


def jittered_delay(options: RecoveryOptions, attempt: int, *, seed: int, draw: int) -> float:
    """The policy delay with +/- ``jitter`` applied, kept inside ``delay_bounds``.

    The random factor depends only on (seed, draw) so a resumed engine, or a second
    run with the same seed, draws the same jitter.
    """
    delay = base_delay(options, attempt)
    if not options.jitter:
        return delay
    spread = random.Random(f"{seed}:{draw}").uniform(-options.jitter, options.jitter)
    low, high = delay_bounds(options)
    return min(max(delay * (1.0 + spread), low), high)


def reset_period(options: RecoveryOptions, attempt: int) -> float:
    """Seconds a restarted pipeline must run without failure before the attempt counter goes back to 0.

    exponential/fixed: ``backoff-reset-after``. strimzi: the backoff interval for the restarts
    already done (restarted 4 times -> 20 minutes), as Strimzi does.
    """
    if options.policy == "strimzi":
        return float(strimzi_minutes(attempt) * 60)
    return float(options.backoff_reset_after)


def resets_on_first_record(options: RecoveryOptions) -> bool:
    """Design doc rule: the first record processed end to end resets the counter (not for strimzi)."""
    return options.reset_on_first_record and options.policy != "strimzi"
