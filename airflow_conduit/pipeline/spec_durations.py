"""Durations in a spec: the recovery engine's parser (one syntax across the project), non-negative only."""

from __future__ import annotations

from airflow_conduit.recovery.durations import parse_duration as _parse

_OPTION = "duration"


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
