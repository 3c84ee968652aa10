"""Recovery option precedence: [conduit] config < the JSON Variable it names < operator arguments."""

from __future__ import annotations

import json

from airflow_conduit.utils.recovery_config import resolve_recovery_options
from airflow_conduit.recovery import RecoveryOptions


def test_defaults_come_from_the_provider_config_section(monkeypatch):
    monkeypatch.delenv("AIRFLOW_VAR_CONDUIT_RECOVERY", raising=False)
    options = RecoveryOptions.from_mapping(resolve_recovery_options({}))
    assert (options.min_delay, options.max_delay, options.backoff_factor) == (1.0, 600.0, 2)
    assert (options.max_retries, options.max_retries_window, options.policy) == (-1, 300.0, "exponential")


def test_config_then_variable_then_arguments(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CONDUIT__MIN_DELAY", "3s")
    monkeypatch.setenv("AIRFLOW__CONDUIT__MAX_RETRIES", "7")
    monkeypatch.setenv("AIRFLOW__CONDUIT__POLICY", "fixed")
    monkeypatch.setenv("AIRFLOW_VAR_CONDUIT_RECOVERY", json.dumps({"max-retries": 4, "max-delay": "2m"}))
    merged = resolve_recovery_options({"max_delay": "30s", "backoff_factor": None})
    options = RecoveryOptions.from_mapping(merged)
    assert options.min_delay == 3.0  # config
    assert options.policy == "fixed"  # config
    assert options.max_retries == 4  # Variable over config
    assert options.max_delay == 30.0  # argument over Variable
    assert options.backoff_factor == 2  # None argument: not an override


def test_variable_name_is_configurable(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CONDUIT__VARIABLE", "team_recovery")
    monkeypatch.setenv("AIRFLOW_VAR_TEAM_RECOVERY", json.dumps({"max_retries": 1}))
    assert RecoveryOptions.from_mapping(resolve_recovery_options({})).max_retries == 1
