"""Recovery options, named and defaulted as Conduit's ``pipelines.error-recovery.*`` options.

Names are Conduit's (``min-delay``); ``from_mapping`` also takes the underscore
spelling (``min_delay``) that Airflow config, Variables and operator kwargs use,
and the full Conduit key (``pipelines.error-recovery.min-delay``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from airflow_conduit.recovery.budgets import INFINITE_RETRIES, RetryBudget, build_budget
from airflow_conduit.recovery.durations import format_duration, parse_duration
from airflow_conduit.recovery.errors import RecoveryConfigError
from airflow_conduit.recovery.policies import POLICY_CLASSES, POLICY_NAMES, RestartPolicy, build_policy
from airflow_conduit.recovery.rules import ClassificationRule, parse_rules

POLICIES = POLICY_NAMES  # exponential (Conduit), strimzi, fixed: recovery/policies.py
CONDUIT_PREFIX = "pipelines.error-recovery."

_DURATIONS = ("min-delay", "max-delay", "max-retries-window", "backoff-reset-after")


@dataclass(frozen=True)
class RecoveryOptions:
    """Validated recovery options; durations in seconds. ``RecoveryOptions()`` gives Conduit's defaults."""

    min_delay: float = 1.0  # min-delay: 1s
    max_delay: float = 600.0  # max-delay: 10m
    backoff_factor: float = 2  # backoff-factor: 2
    max_retries: int = INFINITE_RETRIES  # max-retries: -1 infinite, 0 disables recovery
    max_retries_window: float = 300.0  # max-retries-window: 5m
    policy: str = "exponential"  # exponential (Conduit) | strimzi | fixed
    backoff_reset_after: float = 300.0  # healthy period that resets the backoff (design doc: 5 minutes)
    reset_on_first_record: bool = True  # design doc: the first record processed end to end also resets it
    jitter: float = 0.0  # fraction of the delay, +/-; 0 = off
    jitter_seed: int | None = None  # fixes the jitter sequence (reproducible runs and tests)
    crash_loop_limit: int = -1  # degrade when the same error ends this many runs in a row, no record between; -1 off (Conduit)
    error_rules: tuple[ClassificationRule, ...] = field(default=())

    def __post_init__(self) -> None:
        # Accept "1s", timedelta, "2" etc. in the constructor too, then validate.
        for f in fields(self):
            object.__setattr__(self, f.name, _convert(f.name.replace("_", "-"), getattr(self, f.name)))
        self._validate()

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None = None, *, strict: bool = True, **overrides: Any) -> "RecoveryOptions":
        """Options from a mapping with hyphen or underscore names; missing keys keep Conduit's defaults.

        Unknown keys are refused (naming the key and the closest known one) unless ``strict=False``.
        Keyword ``overrides`` are applied after ``data``.
        """
        merged: dict[str, Any] = {}
        for source in (data or {}), overrides:
            for raw_key, value in source.items():
                key = canonical_key(str(raw_key))
                if key not in _OPTION_NAMES:
                    if not strict:
                        continue
                    close = difflib.get_close_matches(key, _OPTION_NAMES, n=1)
                    hint = f"; did you mean {close[0]}?" if close else f"; known options: {', '.join(_OPTION_NAMES)}"
                    raise RecoveryConfigError(str(raw_key), value, "unknown recovery option" + hint)
                merged[key] = value
        return cls(**{_OPTION_NAMES[key]: value for key, value in merged.items()})

    def with_changes(self, **changes: Any) -> "RecoveryOptions":
        """A copy with some options changed (hyphen or underscore names), validated again."""
        return RecoveryOptions.from_mapping({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """Hyphen names, JSON-safe values (durations as Conduit strings); ``from_mapping`` reads it back exactly."""
        return {
            "min-delay": format_duration(self.min_delay),
            "max-delay": format_duration(self.max_delay),
            "backoff-factor": self.backoff_factor,
            "max-retries": self.max_retries,
            "max-retries-window": format_duration(self.max_retries_window),
            "policy": self.policy,
            "backoff-reset-after": format_duration(self.backoff_reset_after),
            "reset-on-first-record": self.reset_on_first_record,
            "jitter": self.jitter,
            "jitter-seed": self.jitter_seed,
            "crash-loop-limit": self.crash_loop_limit,
            "error-rules": [rule.to_dict() for rule in self.error_rules],
        }

    # --- derived ---------------------------------------------------------------------------
    @property
    def recovery_enabled(self) -> bool:
        return self.max_retries != 0

    @property
    def retries_unlimited(self) -> bool:
        return self.max_retries == INFINITE_RETRIES

    def _validate(self) -> None:
        for name in ("min_delay", "max_delay", "max_retries_window", "backoff_reset_after"):
            value = getattr(self, name)
            option = name.replace("_", "-")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise RecoveryConfigError(option, value, "expected a duration in seconds")
            if value != value or value in (float("inf"), float("-inf")):
                raise RecoveryConfigError(option, value, "must be a finite duration")
            if value < 0:
                raise RecoveryConfigError(option, format_duration(value), "must not be negative")
        if self.min_delay > self.max_delay:
            raise RecoveryConfigError(
                "min-delay", format_duration(self.min_delay),
                f"is greater than max-delay ({format_duration(self.max_delay)})",
            )
        if self.policy not in POLICIES:
            raise RecoveryConfigError("policy", self.policy, f"must be one of {', '.join(POLICIES)}")
        if POLICY_CLASSES[self.policy].budget.windowed and self.max_retries_window == 0 and self.max_retries > 0:
            raise RecoveryConfigError(
                "max-retries-window", "0s", "must be greater than 0 when max-retries limits the restarts"
            )
        if isinstance(self.backoff_factor, bool) or not isinstance(self.backoff_factor, (int, float)):
            raise RecoveryConfigError("backoff-factor", self.backoff_factor, "expected a number >= 1")
        if not (self.backoff_factor >= 1) or self.backoff_factor == float("inf"):
            raise RecoveryConfigError("backoff-factor", self.backoff_factor, "must be a finite number >= 1")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise RecoveryConfigError("max-retries", self.max_retries, "expected an integer (-1 = infinite, 0 = disabled)")
        if self.max_retries < INFINITE_RETRIES:
            raise RecoveryConfigError("max-retries", self.max_retries, "must be -1 (infinite), 0 (disabled) or more")
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter <= 1:
            raise RecoveryConfigError("jitter", self.jitter, "must be a fraction between 0 and 1 (0.1 = +/-10%)")
        if self.jitter_seed is not None and (isinstance(self.jitter_seed, bool) or not isinstance(self.jitter_seed, int)):
            raise RecoveryConfigError("jitter-seed", self.jitter_seed, "expected an integer or null")
        if isinstance(self.crash_loop_limit, bool) or not isinstance(self.crash_loop_limit, int) or not (
            self.crash_loop_limit == -1 or self.crash_loop_limit >= 2
        ):
            raise RecoveryConfigError("crash-loop-limit", self.crash_loop_limit, "must be -1 (off) or 2 or more")
        if not isinstance(self.reset_on_first_record, bool):
            raise RecoveryConfigError("reset-on-first-record", self.reset_on_first_record, "expected true or false")


# hyphen option name -> dataclass field
_OPTION_NAMES = {f.name.replace("_", "-"): f.name for f in fields(RecoveryOptions)}


def policy_for(options: RecoveryOptions) -> RestartPolicy:
    """The strategy object of ``options.policy``, built from the option values it reads."""
    return build_policy(options.policy, _plain_values(options))


def budget_for(options: RecoveryOptions) -> RetryBudget:
    """The retry budget ``options.policy`` counts with, built from the option values it reads."""
    return build_budget(POLICY_CLASSES[options.policy].budget, _plain_values(options))


def _plain_values(options: RecoveryOptions) -> dict[str, Any]:
    return {f.name: getattr(options, f.name) for f in fields(options)}


def canonical_key(key: str) -> str:
    """One spelling per option: ``min_delay``, ``MIN-DELAY``, ``pipelines.error-recovery.min-delay`` -> ``min-delay``."""
    key = key.strip()
    if key.startswith(CONDUIT_PREFIX):
        key = key[len(CONDUIT_PREFIX) :]
    return key.replace("_", "-").lower()


def _convert(key: str, value: Any) -> Any:
    """Text (Airflow config, YAML strings like max-retries: "2") to the field's type; validation follows."""
    if key in _DURATIONS:
        try:
            return parse_duration(value, option=key)
        except ValueError as exc:
            raise RecoveryConfigError(key, value, str(exc).split(": ", 1)[-1]) from None
    if key in ("max-retries", "jitter-seed", "crash-loop-limit"):
        if value is None and key == "jitter-seed":
            return None
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise RecoveryConfigError(key, value, "expected an integer") from None
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if key in ("backoff-factor", "jitter"):
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                raise RecoveryConfigError(key, value, "expected a number") from None
            return int(number) if number.is_integer() and key == "backoff-factor" else number
        return value
    if key == "reset-on-first-record":
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in ("true", "yes", "1", "on"):
                return True
            if lowered in ("false", "no", "0", "off"):
                return False
            raise RecoveryConfigError(key, value, "expected true or false")
        return value
    if key == "policy":
        return value.strip().lower() if isinstance(value, str) else value
    if key == "error-rules":
        return parse_rules(value) if value else ()
    return value

