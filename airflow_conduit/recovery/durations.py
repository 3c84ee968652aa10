"""Durations as Conduit writes them ("1s", "10m", "1h30m", "500ms"), numbers of seconds, or timedelta.

Internally every duration is a float number of seconds. ``format_duration`` writes
the shortest Conduit-style string that ``parse_duration`` reads back to the very
same float, so options survive a JSON round trip exactly.

Durations are bounded by ``MAX_DURATION_SECONDS`` (366 days): longer ones mean a typo,
and ``datetime + timedelta`` overflows long before Python's float does.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

_UNIT_SECONDS = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
}
MAX_DURATION_SECONDS = 366 * 24 * 3600.0  # 8784h
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s)")
_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def parse_duration(value: object, *, option: str = "duration") -> float:
    """Seconds from ``"1h30m"``, ``"500ms"``, ``"30"``, ``30``, ``1.5`` or a ``timedelta``.

    Raises ``ValueError`` naming ``option`` and the value when it cannot be read.
    A leading minus is accepted here; callers refuse negative values with their own message.
    """
    if isinstance(value, bool):
        raise ValueError(f"{option}: expected a duration like '1s', '10m' or a number of seconds, got {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond float range
            raise ValueError(f"{option}: duration {value!r} is longer than the maximum {format_duration(MAX_DURATION_SECONDS)} (366 days)") from None
    elif isinstance(value, str):
        seconds = _parse_text(value.strip(), option)
    else:
        raise ValueError(
            f"{option}: expected a duration like '1s', '10m' or a number of seconds, got {type(value).__name__} {value!r}"
        )
    if not math.isfinite(seconds):
        raise ValueError(f"{option}: duration must be finite, got {value!r}")
    if abs(seconds) > MAX_DURATION_SECONDS:
        raise ValueError(f"{option}: duration {value!r} is longer than the maximum {format_duration(MAX_DURATION_SECONDS)} (366 days)")
    return seconds


def _parse_text(text: str, option: str) -> float:
    if not text:
        raise ValueError(f"{option}: empty duration; use a number of seconds or units h, m, s, ms, us, ns (e.g. '1s', '10m')")
    if _NUMBER.fullmatch(text):
        return float(text)
    plain_seconds = re.fullmatch(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)s", text)
    if plain_seconds:  # "1.5s", "1e-05s": exactly float(<number>), so format/parse round trips
        return float(plain_seconds.group(1))
    sign = 1.0
    body = text
    if body[:1] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    position = 0
    total = 0.0
    for match in _PART.finditer(body):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise ValueError(
            f"{option}: cannot read duration {text!r}; use a number of seconds or units h, m, s, ms, us, ns "
            "(e.g. '1s', '10m', '1h30m', '500ms')"
        )
    return sign * total


def format_duration(seconds: float) -> str:
    """Conduit-style text for a number of seconds; ``parse_duration(format_duration(x)) == x`` for finite x >= 0."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if float(seconds).is_integer():
        whole = int(seconds)
        hours, rest = divmod(whole, 3600)
        minutes, secs = divmod(rest, 60)
        text = ""
        if hours:
            text += f"{hours}h"
        if minutes:
            text += f"{minutes}m"
        if secs:
            text += f"{secs}s"
        return text
    if seconds < 1:
        millis = seconds * 1000
        if float(millis).is_integer() and parse_duration(f"{int(millis)}ms") == seconds:
            return f"{int(millis)}ms"
    return f"{float(seconds)!r}s"
