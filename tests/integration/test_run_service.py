"""RunService (runs/service.py) over the real local backend: real detached jobs, the real watcher, real
recovery.json; the engine's time is a fake clock, so a backoff wait is a clock step, not a sleep.

The job is the tiny stand-in of the Spark entry point (tests/integration/jobs/tiny_job.py, same arguments,
report and exit codes) under the local backend's detached wrapper: this is about the loop, not about pipelines.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta

from airflow_conduit.hooks.backends import lease
from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.hooks.backends.watch import RunWatcher
from airflow_conduit.recovery import FakeClock, RecoveryOptions
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.runs.service import BackoffOver, Ending, Finished, RunService, WaitBackoff, WatchRun
from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.store import RunStore

DEADLINE = 180.0


def tiny_job_submitter(tiny_job: str, state_dir, faults: dict):
    """How a driver of the tiny job submits: the previous run made gone, then the job under the detached wrapper."""
    backend = LocalBackend()

    def submit(run_id: str, previous: JobHandle | None) -> JobHandle:
        if previous is not None:
            backend.ensure_gone(previous)
        cmd = [sys.executable, tiny_job, "--spec", "unused.yaml", "--run-id", run_id, "--state-dir", str(state_dir),
               "--faults", json.dumps(faults)]
        return backend.launch(cmd, run_id, str(state_dir))

    return submit


def watch(step: WatchRun) -> dict:
    watcher = RunWatcher(step.handle, poll_interval=0.2, report_progress=step.report_progress)
    return asyncio.run(asyncio.wait_for(anext(watcher.events()), DEADLINE))


def test_a_transient_failure_is_restarted_and_the_pipeline_ends_well(tmp_path, tiny_job):
    clock = FakeClock()
    store = RunStore(str(tmp_path), {"cli": True, "pid": 0})
    service = RunService(store, tiny_job_submitter(tiny_job, tmp_path, {"transient_first_runs": 1, "progress": 4}),
                         (lease.LeaseHeld,), (lease.LeaseHeld,), clock=clock)
    step = service.start(RecoveryOptions(min_delay=30, max_retries=2), readable_prefix="loop", pipeline_id="tiny")
    seen = []
    while not isinstance(step, Finished):
        seen.append(type(step).__name__)
        if isinstance(step, WaitBackoff):
            assert step.seconds == 30 and StateDir(tmp_path).pipeline_state() == "recovering"
            clock.advance(timedelta(seconds=step.seconds))
            step = service.advance(BackoffOver(step.previous))
        else:
            step = service.advance(watch(step))
    # failed; waited; resubmitted (watched to its first records, then to its end: a fast job may end in between)
    assert seen[:3] == ["WatchRun", "WaitBackoff", "WatchRun"] and set(seen[3:]) <= {"WatchRun"}
    assert step.ending is Ending.SUCCEEDED and step.summary["submissions"] == 2
    assert "recovered" in [event["event"] for event in step.summary["audit_log"]]
    assert step.summary["report"]["totals"]["written"] == {"out": 4}
    starts = (tmp_path / "faults" / "tiny_job_starts").read_text().split()
    assert starts == [f"{step.handle.run_id[:-4]}-s01", step.handle.run_id]
    assert StateDir(tmp_path).pipeline_state() == "stopped"
    assert lease.wait_released(step.handle.lease_path, DEADLINE)
