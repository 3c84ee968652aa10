"""Installed in the venv, the package is an Airflow provider: `airflow providers list` and `airflow config list` show it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def airflow(*args: str) -> str:
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), *args], capture_output=True, text=True, check=True)
    return result.stdout


def test_airflow_providers_list_shows_airflow_conduit():
    rows = [line.split("|")[0].strip() for line in airflow("providers", "list").splitlines()]
    assert rows.count("airflow-conduit") == 1


def test_airflow_config_list_shows_the_conduit_section_with_conduit_defaults():
    text = airflow("config", "list", "--section", "conduit", "--defaults", "--show-values")
    assert "[conduit]" in text
    assert "min_delay = 1s" in text
    assert "max_retries_window = 5m" in text
