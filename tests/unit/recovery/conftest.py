"""Fixtures for the recovery engine tests: a fake clock at 15:00 and the seed documents' options."""

from __future__ import annotations

import pytest
from recovery_helpers import at

from airflow_conduit.recovery import FakeClock, RecoveryOptions


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(at("15:00"))


@pytest.fixture
def conduit_example_2() -> RecoveryOptions:
    """Conduit recovery doc, Example 2: max-retries 2, max-retries-window 10m."""
    return RecoveryOptions.from_mapping({"max-retries": "2", "max-retries-window": "10m"})
