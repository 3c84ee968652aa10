"""Options: Conduit names and defaults, durations, both spellings, clear refusals."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from airflow_conduit.recovery import RecoveryConfigError, RecoveryOptions, format_duration, parse_duration


def test_defaults_are_conduits():
    options = RecoveryOptions()
    assert options.min_delay == 1
    assert options.max_delay == 600
    assert options.backoff_factor == 2
    assert options.max_retries == -1
    assert options.max_retries_window == 300
    assert options.policy == "exponential"
    assert options.backoff_reset_after == 300  # design doc: 5 minutes
    assert options.jitter == 0
    assert options.recovery_enabled and options.retries_unlimited


def test_to_dict_uses_conduit_names_and_is_json_safe():
    data = RecoveryOptions().to_dict()
    assert data["min-delay"] == "1s"
    assert data["max-delay"] == "10m"
    assert data["backoff-factor"] == 2
    assert data["max-retries"] == -1
    assert data["max-retries-window"] == "5m"
    assert json.loads(json.dumps(data)) == data


@pytest.mark.parametrize(
    "mapping",
    [
        {"min-delay": "500ms", "max-delay": "1h30m", "max-retries": 3, "max-retries-window": "10m"},
        {"min_delay": "500ms", "max_delay": "1h30m", "max_retries": "3", "max_retries_window": 600},
        {
            "pipelines.error-recovery.min-delay": 0.5,
            "pipelines.error-recovery.max-delay": timedelta(hours=1, minutes=30),
            "pipelines.error-recovery.max-retries": "3",
            "pipelines.error-recovery.max-retries-window": timedelta(minutes=10),
        },
    ],
    ids=["hyphen", "underscore-airflow", "conduit-keys-timedelta"],
)
def test_from_mapping_accepts_every_spelling(mapping):
    options = RecoveryOptions.from_mapping(mapping)
    assert (options.min_delay, options.max_delay, options.max_retries, options.max_retries_window) == (0.5, 5400, 3, 600)


def test_round_trip_through_json_is_exact():
    options = RecoveryOptions.from_mapping(
        {
            "min-delay": "250ms",
            "max-delay": "1h2m3s",
            "backoff-factor": 1.5,
            "max-retries": 4,
            "policy": "fixed",
            "jitter": 0.2,
            "jitter-seed": 7,
            "error-rules": [{"sqlstate": "40001", "as": "transient", "name": "serialization"}],
        }
    )
    assert RecoveryOptions.from_mapping(json.loads(json.dumps(options.to_dict()))) == options


def test_airflow_config_strings_are_read():
    # What the provider's [conduit] section hands over: everything is text.
    options = RecoveryOptions.from_mapping(
        {"min_delay": "1s", "max_delay": "10m", "backoff_factor": "3", "max_retries": "-1", "max_retries_window": "5m", "policy": "Strimzi"}
    )
    assert options.backoff_factor == 3 and options.max_retries == -1 and options.policy == "strimzi"


@pytest.mark.parametrize(
    "mapping, option, value",
    [
        ({"min-delay": "20m"}, "min-delay", "20m"),  # greater than max-delay 10m
        ({"min-delay": "-1s"}, "min-delay", "-1s"),
        ({"max-delay": -5}, "max-delay", "-5s"),
        ({"max-retries-window": "-1m"}, "max-retries-window", "-1m"),
        ({"backoff-reset-after": "-2s"}, "backoff-reset-after", "-2s"),
        ({"backoff-factor": 0.5}, "backoff-factor", "0.5"),
        ({"max-retries": -2}, "max-retries", "-2"),
        ({"max-retries": "two"}, "max-retries", "two"),
        ({"policy": "linear"}, "policy", "linear"),
        ({"jitter": 1.5}, "jitter", "1.5"),
        ({"max-delay": "10 minutes"}, "max-delay", "10 minutes"),
    ],
)
def test_invalid_options_are_refused_naming_option_and_value(mapping, option, value):
    with pytest.raises(RecoveryConfigError) as caught:
        RecoveryOptions.from_mapping(mapping)
    message = str(caught.value)
    assert option in message and value in message
    assert caught.value.option == option


def test_min_delay_greater_than_max_delay_names_both():
    with pytest.raises(RecoveryConfigError, match=r"min-delay='20s'.*max-delay \(10s\)"):
        RecoveryOptions.from_mapping({"min-delay": "20s", "max-delay": "10s"})


def test_unknown_option_is_refused_with_a_suggestion():
    with pytest.raises(RecoveryConfigError, match="did you mean max-retries-window"):
        RecoveryOptions.from_mapping({"max_retries_windows": "5m"})
    # Callers that merge wider mappings (Airflow's [conduit] section has "variable") can ask to skip unknown keys.
    assert RecoveryOptions.from_mapping({"variable": "conduit_recovery"}, strict=False) == RecoveryOptions()


def test_max_retries_zero_disables_recovery():
    assert not RecoveryOptions.from_mapping({"max-retries": 0}).recovery_enabled


def test_constructor_accepts_duration_text_and_timedelta():
    assert RecoveryOptions(min_delay="2s", max_delay=timedelta(minutes=1)) == RecoveryOptions.from_mapping(
        {"min-delay": 2, "max-delay": "1m"}
    )


def test_bad_error_rules_are_refused_naming_the_rule():
    with pytest.raises(RecoveryConfigError, match=r"error-rules\[1\]\.as"):
        RecoveryOptions.from_mapping({"error-rules": [{"class": "X", "as": "fatal"}, {"class": "Y", "as": "maybe"}]})
    with pytest.raises(RecoveryConfigError, match=r"error-rules\[0\]\.message.*regular expression"):
        RecoveryOptions.from_mapping({"error-rules": [{"message": "(unclosed", "as": "fatal"}]})
    with pytest.raises(RecoveryConfigError, match=r"error-rules\[0\].*needs at least one"):
        RecoveryOptions.from_mapping({"error-rules": [{"as": "fatal"}]})
    with pytest.raises(RecoveryConfigError, match=r"error-rules\[0\]\.error-code"):
        RecoveryOptions.from_mapping({"error-rules": [{"class": "X", "as": "fatal", "error-code": 1100}]})


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("1s", 1), ("10m", 600), ("1h30m", 5400), ("500ms", 0.5), ("1.5s", 1.5), ("2m30s", 150),
        ("30", 30), ("0", 0), ("250us", 0.00025), ("1h", 3600),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("seconds, text", [(1, "1s"), (600, "10m"), (5400, "1h30m"), (0.5, "500ms"), (0, "0s"), (3723, "1h2m3s"), (1.5, "1.5s")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


# --- durations a user can type wrong (no IndexError, no OverflowError) ------------------------------------------------


@pytest.mark.parametrize("value", ["", "   ", "-", "+"])
def test_empty_or_sign_only_duration_is_refused_by_name(value):
    with pytest.raises(RecoveryConfigError, match="min-delay"):
        RecoveryOptions.from_mapping({"min-delay": value})


@pytest.mark.parametrize("value", ["99999999999h", "8785h", 10**12, 10**400, timedelta(days=400)])
def test_durations_beyond_366_days_are_refused_by_name(value):
    with pytest.raises(RecoveryConfigError, match="max-retries-window.*longer than the maximum 8784h"):
        RecoveryOptions.from_mapping({"max-retries-window": value})


def test_the_longest_durations_run_through_the_engine():
    from airflow_conduit.recovery import FakeClock, RecoveryEngine

    options = RecoveryOptions.from_mapping(
        {"min-delay": "8784h", "max-delay": "8784h", "max-retries-window": "8784h", "backoff-reset-after": "8784h", "max-retries": 3}
    )
    engine = RecoveryEngine(options, clock=FakeClock())
    engine.start()
    decision = engine.on_failure("connection refused")
    assert decision.restart and decision.delay_seconds == 8784 * 3600
