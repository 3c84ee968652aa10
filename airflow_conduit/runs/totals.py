"""A run's totals on one line: what the recovery timeline, the task log and the CLI print about a run.

``totals`` is the run report's object (``runs/report.py``): read, filtered, dlq and written per
destination. A module of its own so the trigger's progress lines and the supervisor's timeline quote
one text.
"""

from __future__ import annotations

from typing import Any


def totals_text(totals: dict[str, Any]) -> str:
    """``read=.. written[dest=..] filtered=.. dlq=..``: a report's totals as one line."""
    written = ", ".join(f"{dest}={n}" for dest, n in sorted((totals.get("written") or {}).items())) or "0"
    return f"read={totals.get('read', 0)} written[{written}] filtered={totals.get('filtered', 0)} dlq={totals.get('dlq', 0)}"
