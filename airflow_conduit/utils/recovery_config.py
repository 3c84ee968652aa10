"""Recovery options from the three places a user can set them, lowest precedence first:

1. the provider config section ``[conduit]`` (``airflow.cfg`` or ``AIRFLOW__CONDUIT__MIN_DELAY``...),
   whose defaults are Conduit's;
2. the Airflow Variable named by ``[conduit] variable`` (default ``conduit_recovery``), a JSON object;
3. the operator's arguments.

The recovery engine validates the merged mapping (``RecoveryOptions.from_mapping``).

A Variable that exists but cannot be read (API server or secrets backend
unreachable, no permission) is not ignored: ``RecoveryVariableUnreadable``
names it. The operator fails the task with it when a pipeline starts, and
warns and keeps the options it started with when the pipeline is already
running (docs/configuration.md).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from airflow_conduit.get_provider_info import RECOVERY_CONFIG_OPTIONS
from airflow_conduit.recovery.options import canonical_key


SECTION = "conduit"
# The recovery options the [conduit] section carries ("variable" names the Variable, it is not an option).
OPTION_KEYS = tuple(name for name in RECOVERY_CONFIG_OPTIONS if name != "variable")


def _conf():
    try:
        from airflow.sdk import conf
    except ImportError:  # pragma: no cover - older Airflow
        from airflow.configuration import conf
    return conf


def options_from_config() -> dict[str, Any]:
    """``[conduit]`` options, falling back to the defaults declared in provider info."""
    conf = _conf()
    values = {}
    for name in OPTION_KEYS:
        default = RECOVERY_CONFIG_OPTIONS[name][1]
        values[name] = conf.get(SECTION, name, fallback=default)
    return values


def variable_name() -> str:
    return _conf().get(SECTION, "variable", fallback=RECOVERY_CONFIG_OPTIONS["variable"][1])


class RecoveryVariableUnreadable(RuntimeError):
    """The Airflow Variable of recovery options exists or may exist, but could not be read."""


def options_from_variable(name: str | None = None) -> dict[str, Any]:
    """The JSON object in the Airflow Variable (empty when the Variable does not exist)."""
    from airflow.sdk import Variable

    name = name or variable_name()
    if not name:
        return {}
    try:
        raw = Variable.get(name, default=None)
    except Exception as exc:  # API server / metadata DB / secrets backend unreachable, or refused
        raise RecoveryVariableUnreadable(
            f"Airflow Variable {name!r} (recovery options, [conduit] variable) could not be read: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if raw is None or raw == "":
        return {}
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise ValueError(f"Airflow Variable {name!r} must hold a JSON object of recovery options, got {raw!r}")
    return value


def resolve_recovery_options(arguments: Mapping[str, Any] | None = None, *, use_airflow: bool = True) -> dict[str, Any]:
    """Merge config < Variable < arguments (``None`` arguments do not override), keyed by one spelling per option."""
    merged: dict[str, Any] = {}
    if use_airflow:
        merged.update({canonical_key(k): v for k, v in options_from_config().items()})
        merged.update({canonical_key(k): v for k, v in options_from_variable().items()})
    merged.update({canonical_key(k): v for k, v in (arguments or {}).items() if v is not None})
    return merged
