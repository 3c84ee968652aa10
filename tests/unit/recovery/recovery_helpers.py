"""Helpers shared by the recovery tests (a module with a unique name: tests/ folders are not packages)."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_conduit.recovery import FakeClock, RecoveryEngine, RecoveryOptions

DAY = datetime(2024, 1, 1, tzinfo=timezone.utc)


def at(clock_time: str) -> datetime:
    """15:10 or 15:10:30 on the test day (UTC)."""
    parts = [int(p) for p in clock_time.split(":")]
    hours, minutes, seconds = (parts + [0])[:3]
    return DAY.replace(hour=hours, minute=minutes, second=seconds)


def started(options: RecoveryOptions, clock: FakeClock) -> RecoveryEngine:
    engine = RecoveryEngine(options, clock=clock)
    engine.start()
    return engine
