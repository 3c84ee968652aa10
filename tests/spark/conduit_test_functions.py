"""User functions for the ``custom`` processor tests (shipped to the Python workers by value)."""

from __future__ import annotations

import os
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
    """Fails with ConnectionError on the first two attempts per record (counted in a file per record id)."""
    from airflow_conduit.recovery.errors import TransientError

    folder = Path(os.environ.get("CONDUIT_TEST_FLAKY_DIR", "/tmp"))
    counter = folder / f"attempts-{record['id']}"
    attempts = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(attempts + 1))
    if record["id"] % 2 == 0 and attempts < 2:
        raise ConnectionError("service unavailable")
    if record["id"] == 3:
        raise TransientError("always down")
    return record
