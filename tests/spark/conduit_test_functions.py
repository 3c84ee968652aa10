"""User functions for the ``custom`` processor tests (shipped to the Python workers by value)."""

from __future__ import annotations

from pathlib import Path


def tag_or_fail(record: dict) -> dict | None:
    """Fails on names containing 'boom', drops names containing 'drop', tags the rest."""
    name = record.get("name") or ""
    if "boom" in name:
        raise ValueError(f"cannot process {name}")
    if "drop" in name:
        return None
    return {**record, "tag": f"t-{record['id']}"}


def flaky(record: dict) -> dict:
    """Even ids fail twice with ConnectionError, then work; id 3 is always down (TransientError).

    Attempts are counted in files in the folder named by the record's ``name`` (the Python
    workers do not see the test's environment).
    """
    from airflow_conduit.recovery.errors import TransientError

    folder = Path(record["name"])
    counter = folder / f"attempts-{record['id']}"
    attempts = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(attempts + 1))
    if record["id"] % 2 == 0 and attempts < 2:
        raise ConnectionError("service unavailable")
    if record["id"] == 3:
        raise TransientError("always down")
    return record


def slow_the_first_time(record: dict) -> dict:
    """Takes 600 s for the first record it sees (a hung call), then nothing: the folder named by the record's ``name``
    remembers that it happened."""
    import time

    marker = Path(record["name"]) / "slow-once"
    if not marker.exists():
        marker.write_text("slow\n")
        time.sleep(600)
    return record
