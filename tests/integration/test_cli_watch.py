"""The CLI's watch: a run's end is seen when its process exits, not at the watcher's next poll.

The watched job is the tiny stand-in of the Spark entry point (tests/integration/jobs/tiny_job.py)
under the local backend's real detached wrapper.
"""

from __future__ import annotations

import asyncio
import json
import sys

from airflow_conduit.cli import run_cmd
from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.runs.handles import JobHandle

AN_HOUR = 3600.0  # the poll interval: a watch that waited for its next poll would not end within the test's deadline
DEADLINE = 180.0


def start_tiny_job(tiny_job: str, state_dir, run_id: str, faults: dict) -> JobHandle:
    cmd = [sys.executable, tiny_job, "--spec", "unused.yaml", "--run-id", run_id, "--state-dir", str(state_dir),
           "--faults", json.dumps(faults)]
    return LocalBackend().launch(cmd, run_id, str(state_dir))


async def test_the_end_of_a_run_is_seen_when_its_process_exits(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "ends", {"progress": 3, "sleep": 2})
    payload = await asyncio.wait_for(run_cmd._watch(handle, AN_HOUR, report_progress=False), DEADLINE)
    assert payload["status"] == "succeeded" and payload["exit_code"] == 0
    assert payload["report"]["totals"]["written"] == {"out": 3}


async def test_a_failed_run_is_seen_with_its_error_when_its_process_exits(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "fails", {"exit": 75, "sleep": 2})
    payload = await asyncio.wait_for(run_cmd._watch(handle, AN_HOUR, report_progress=False), DEADLINE)
    assert payload["status"] == "failed" and payload["exit_code"] == 75


async def test_the_first_record_is_still_reported_while_the_run_goes_on(tmp_path, tiny_job):
    """With report_progress the watch ends at the first record written, not at the process's exit."""
    handle = start_tiny_job(tiny_job, tmp_path, "progress", {"progress": 2, "sleep": 60})
    try:
        payload = await asyncio.wait_for(run_cmd._watch(handle, 0.2, report_progress=True), DEADLINE)
        assert payload["status"] == "running" and payload["report"]["totals"]["written"] == {"out": 2}
    finally:
        LocalBackend().kill(handle, graceful=False)
