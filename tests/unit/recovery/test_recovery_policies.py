"""Backoff policies: Conduit's exponential, Strimzi's, fixed; jitter; the reset periods."""

from __future__ import annotations

from airflow_conduit.recovery import RecoveryOptions
from airflow_conduit.recovery.policies import base_delay, jittered_delay, reset_period


def delays(options: RecoveryOptions, count: int) -> list[float]:
    return [base_delay(options, attempt) for attempt in range(1, count + 1)]


def test_conduit_example_1_max_delay_10s():
    # Conduit recovery doc, Example 1: 1s, 2s, 4s, 8s, 10s, 10s, ..., 10s
    assert delays(RecoveryOptions.from_mapping({"max-delay": "10s"}), 8) == [1, 2, 4, 8, 10, 10, 10, 10]


def test_conduit_defaults_double_up_to_ten_minutes():
    assert delays(RecoveryOptions(), 12) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]


def test_exponential_survives_huge_attempt_numbers():
    assert base_delay(RecoveryOptions(), 10_000) == 600


def test_strimzi_sequence():
    # Strimzi proposal 055: immediate, then min(n*n + n, 60) minutes.
    minutes = [d / 60 for d in delays(RecoveryOptions(policy="strimzi"), 11)]
    assert minutes == [0, 2, 6, 12, 20, 30, 42, 56, 60, 60, 60]


def test_fixed_policy_always_waits_min_delay():
    assert delays(RecoveryOptions(policy="fixed", min_delay="30s"), 5) == [30] * 5


def test_backoff_factor_three():
    assert delays(RecoveryOptions(backoff_factor=3, max_delay="1m"), 5) == [1, 3, 9, 27, 60]


def test_jitter_is_off_by_default():
    options = RecoveryOptions()
    assert [jittered_delay(options, 3, seed=s, draw=d) for s in range(3) for d in range(3)] == [4.0] * 9


def test_jitter_is_bounded_varies_and_is_reproducible():
    options = RecoveryOptions(jitter=0.5, max_delay="10m")
    drawn = [jittered_delay(options, 4, seed=42, draw=d) for d in range(50)]
    assert all(4 <= d <= 12 for d in drawn)  # 8s +/- 50%
    assert len(set(drawn)) > 10
    assert drawn == [jittered_delay(options, 4, seed=42, draw=d) for d in range(50)]
    assert drawn != [jittered_delay(options, 4, seed=43, draw=d) for d in range(50)]


def test_jitter_never_leaves_min_max():
    options = RecoveryOptions(jitter=1, min_delay="1s", max_delay="10s")
    for attempt in (1, 5, 9):
        for draw in range(200):
            assert 1 <= jittered_delay(options, attempt, seed=1, draw=draw) <= 10


def test_reset_periods():
    assert reset_period(RecoveryOptions(), 3) == 300
    assert reset_period(RecoveryOptions(backoff_reset_after="1m"), 3) == 60
    strimzi = RecoveryOptions(policy="strimzi")
    # "if it was restarted 4 times, it needs to run for 20 minutes for the restart counter to be reset"
    assert reset_period(strimzi, 4) == 20 * 60
    assert reset_period(strimzi, 1) == 2 * 60
    assert reset_period(strimzi, 12) == 60 * 60
