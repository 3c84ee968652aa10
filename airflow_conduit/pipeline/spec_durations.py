"""Durations in a spec: the recovery engine's parser (one syntax across the project), non-negative only.

A bare number is seconds, as everywhere in the project, except under ``errors.retry``: those keys are
Kafka Connect's (KIP-298), whose values are milliseconds, and a Connect config copied into a spec
(``errors.retry.timeout: 300000``) must mean what its author meant (``parse_duration_bare_ms``).
"""

from __future__ import annotations

import re

from airflow_conduit.recovery.durations import parse_duration as _parse

_OPTION = "duration"
_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def parse_duration(value: object) -> float:
    """Seconds from ``"5s"``, ``"1m30s"``, ``"500ms"`` or a number of seconds; ValueError without a key prefix."""
    try:
        seconds = _parse(value, option=_OPTION)
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message[len(_OPTION) + 2:] if message.startswith(_OPTION + ": ") else message) from None
    if seconds < 0:
        raise ValueError(f"expected a duration of 0 or more, got {value!r}")
    return seconds


def is_bare_number(value: object) -> bool:
    """A number without a unit: ``100``, ``1.5``, ``"100"``."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and _NUMBER.fullmatch(value.strip()) is not None


def parse_duration_bare_ms(value: object) -> float:
    """Seconds from a duration with a unit (``"5s"``, ``"500ms"``) or a bare number of **milliseconds** (Connect's unit)."""
    if not is_bare_number(value):
        try:
            return parse_duration(value)
        except ValueError as exc:  # the shared parser's hint says a bare number is seconds: not here
            raise ValueError(str(exc).replace("a number of seconds", "a number of milliseconds")) from None
    try:
        milliseconds = float(str(value).strip()) if isinstance(value, str) else float(value)
        return parse_duration(milliseconds / 1000.0)
    except (ValueError, OverflowError):
        raise ValueError(
            f"expected 0 or more milliseconds up to 366 days (a number without a unit is milliseconds here, as in "
            f"Kafka Connect), got {value!r}"
        ) from None
