"""Restart policies as strategies: Conduit's exponential, Strimzi's, fixed; jitter; reset periods; what max-retries counts."""

from __future__ import annotations

import pytest

from airflow_conduit.recovery import RecoveryOptions
from airflow_conduit.recovery.budgets import SinceResetBudget, WindowBudget
from airflow_conduit.recovery.options import budget_for, policy_for
from airflow_conduit.recovery.policies import (
    POLICY_CLASSES,
    ExponentialBackoff,
    FixedDelay,
    StrimziBackoff,
    jittered_delay,
)


def delays(options: RecoveryOptions, count: int) -> list[float]:
    policy = policy_for(options)
    return [policy.delay(attempt) for attempt in range(1, count + 1)]


def jittered(options: RecoveryOptions, attempt: int, *, seed: int, draw: int) -> float:
    return jittered_delay(policy_for(options), attempt, jitter=options.jitter, seed=seed, draw=draw)


def test_each_policy_name_is_one_strategy_class():
    assert {name: type(policy_for(RecoveryOptions(policy=name))) for name in POLICY_CLASSES} == {
        "exponential": ExponentialBackoff,
        "strimzi": StrimziBackoff,
        "fixed": FixedDelay,
    }


def test_conduit_example_1_max_delay_10s():
    # Conduit recovery doc, Example 1: 1s, 2s, 4s, 8s, 10s, 10s, ..., 10s
    assert delays(RecoveryOptions.from_mapping({"max-delay": "10s"}), 8) == [1, 2, 4, 8, 10, 10, 10, 10]


def test_conduit_defaults_double_up_to_ten_minutes():
    assert delays(RecoveryOptions(), 12) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]


def test_exponential_survives_huge_attempt_numbers():
    assert policy_for(RecoveryOptions()).delay(10_000) == 600


def test_attempt_numbers_start_at_one():
    for name in POLICY_CLASSES:
        with pytest.raises(ValueError, match="attempt must be >= 1"):
            policy_for(RecoveryOptions(policy=name)).delay(0)


def test_strimzi_sequence():
    # Strimzi proposal 055: immediate, then min(n*n + n, 60) minutes.
    minutes = [d / 60 for d in delays(RecoveryOptions(policy="strimzi"), 11)]
    assert minutes == [0, 2, 6, 12, 20, 30, 42, 56, 60, 60, 60]


def test_strimzi_ignores_conduit_delay_options():
    shaped = RecoveryOptions(policy="strimzi", min_delay="5s", max_delay="10s", backoff_factor=3)
    assert delays(shaped, 5) == delays(RecoveryOptions(policy="strimzi"), 5)
    assert policy_for(shaped).bounds() == (0.0, 3600.0)


def test_fixed_policy_always_waits_min_delay():
    assert delays(RecoveryOptions(policy="fixed", min_delay="30s"), 5) == [30] * 5


def test_backoff_factor_three():
    assert delays(RecoveryOptions(backoff_factor=3, max_delay="1m"), 5) == [1, 3, 9, 27, 60]


def test_jitter_is_off_by_default():
    options = RecoveryOptions()
    assert [jittered(options, 3, seed=s, draw=d) for s in range(3) for d in range(3)] == [4.0] * 9


def test_jitter_is_bounded_varies_and_is_reproducible():
    options = RecoveryOptions(jitter=0.5, max_delay="10m")
    drawn = [jittered(options, 4, seed=42, draw=d) for d in range(50)]
    assert all(4 <= d <= 12 for d in drawn)  # 8s +/- 50%
    assert len(set(drawn)) > 10
    assert drawn == [jittered(options, 4, seed=42, draw=d) for d in range(50)]
    assert drawn != [jittered(options, 4, seed=43, draw=d) for d in range(50)]


def test_jitter_never_leaves_min_max():
    options = RecoveryOptions(jitter=1, min_delay="1s", max_delay="10s")
    for attempt in (1, 5, 9):
        for draw in range(200):
            assert 1 <= jittered(options, attempt, seed=1, draw=draw) <= 10


def test_reset_periods():
    assert policy_for(RecoveryOptions()).reset_period(3) == 300
    assert policy_for(RecoveryOptions(backoff_reset_after="1m")).reset_period(3) == 60
    strimzi = policy_for(RecoveryOptions(policy="strimzi"))
    # "if it was restarted 4 times, it needs to run for 20 minutes for the restart counter to be reset"
    assert strimzi.reset_period(4) == 20 * 60
    assert strimzi.reset_period(1) == 2 * 60
    assert strimzi.reset_period(12) == 60 * 60


def test_first_record_resets_only_conduit_style_policies():
    assert policy_for(RecoveryOptions()).resets_on_first_record
    assert not policy_for(RecoveryOptions(reset_on_first_record=False)).resets_on_first_record
    assert policy_for(RecoveryOptions(policy="fixed")).resets_on_first_record
    assert not policy_for(RecoveryOptions(policy="strimzi", reset_on_first_record=True)).resets_on_first_record


def test_what_max_retries_counts():
    assert budget_for(RecoveryOptions(max_retries=3)) == WindowBudget(max_retries=3, max_retries_window=300)
    assert budget_for(RecoveryOptions(policy="fixed", max_retries_window="1m")) == WindowBudget(-1, 60)
    assert budget_for(RecoveryOptions(policy="strimzi", max_retries=7)) == SinceResetBudget(max_retries=7)
    assert budget_for(RecoveryOptions(max_retries_window="10m")).counted_text() == "within max-retries-window 10m"
    assert budget_for(RecoveryOptions(policy="strimzi")).counted_text() == "since the last reset"
