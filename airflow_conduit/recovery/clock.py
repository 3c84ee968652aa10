"""Injectable clocks: the engine never reads the time itself, so every rule is testable without sleeping."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""


def as_utc(moment: datetime) -> datetime:
    """A timezone-aware UTC datetime; naive datetimes are taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def parse_iso(value: str | datetime | None) -> datetime | None:
    """ISO-8601 text (``Z`` or an offset) or a datetime, as an aware UTC datetime; None and "" give None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return as_utc(value)


def clock_text(moment: datetime) -> str:
    """``HH:MM:SS``, how timelines and audit messages show a moment."""
    return moment.strftime("%H:%M:%S")


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class FakeClock:
    """A clock that only moves when told to (tests, the simulator)."""

    def __init__(self, start: datetime | None = None):
        self._now = as_utc(start) if start is not None else datetime(2024, 1, 1, tzinfo=timezone.utc)

    def now(self) -> datetime:
        return self._now

    def advance(self, amount: float | timedelta) -> datetime:
        step = amount if isinstance(amount, timedelta) else timedelta(seconds=amount)
        if step < timedelta(0):
            raise ValueError(f"FakeClock cannot go back in time (advance by {amount!r})")
        self._now += step
        return self._now

    def set(self, moment: datetime) -> datetime:
        moment = as_utc(moment)
        if moment < self._now:
            raise ValueError(f"FakeClock cannot go back in time ({moment.isoformat()} < {self._now.isoformat()})")
        self._now = moment
        return self._now
