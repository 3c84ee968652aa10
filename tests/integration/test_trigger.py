"""SparkPipelineTrigger: one event per watch, quiet while the job runs, never submits.

The watched job is real and detached (started by the local backend's wrapper), but it is a tiny
Python stand-in for the Spark entry point (tests/integration/jobs/tiny_job.py, same arguments,
report and exit codes): these tests are about watching, and a spark-submit costs ~25 s here.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.recovery import classify, codes
from airflow_conduit.triggers.pipeline import SparkPipelineTrigger


def start_tiny_job(tiny_job: str, state_dir: Path, run_id: str, faults: dict) -> dict:
    cmd = [sys.executable, tiny_job, "--spec", "unused.yaml", "--run-id", run_id, "--state-dir", str(state_dir),
           "--faults", json.dumps(faults)]
    return LocalBackend().launch(cmd, run_id, str(state_dir))


def starts(state_dir: Path) -> list[str]:
    path = state_dir / "faults" / "tiny_job_starts"
    return path.read_text().split() if path.exists() else []


async def first_event(trigger: SparkPipelineTrigger, timeout: float = 30):
    return await asyncio.wait_for(anext(trigger.run()), timeout)


def test_serialize_round_trips_through_the_classpath(tmp_path):
    handle = {"launcher": "local", "run_id": "r1", "report_path": str(tmp_path / "r.json"), "pid": 1}
    trigger = SparkPipelineTrigger(handle, poll_interval=0.5, report_progress=True)
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # must survive the trigger table
    assert set(kwargs) == {"handle", "poll_interval", "report_progress"}  # ids, not the recovery state
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert classpath == "airflow_conduit.triggers.pipeline.SparkPipelineTrigger"


async def test_success_event_carries_the_report_counts(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "ok", {"progress": 7})
    event = await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))
    payload = event.payload
    assert payload["status"] == "succeeded"
    assert payload["exit_code"] == 0 and payload["error"] is None
    assert payload["report"]["totals"] == {"read": 9, "filtered": 1, "dlq": 1, "written": {"out": 7}}
    assert payload["run_id"] == "ok" and "carry" not in payload


@pytest.mark.parametrize("exit_code, fatal, code", [(75, False, codes.INJECTED_TRANSIENT), (70, True, codes.INJECTED_FATAL)])
async def test_failure_event_carries_the_structured_error(tmp_path, tiny_job, exit_code, fatal, code):
    handle = start_tiny_job(tiny_job, tmp_path, "bad", {"exit": exit_code})
    payload = (await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))).payload
    assert payload["status"] == "failed"
    assert payload["exit_code"] == exit_code
    assert payload["error"]["code"] == code and payload["error"]["fatal"] is fatal
    assert "AIRFLOW_CONDUIT_ERROR" in payload["stderr_tail"]


async def test_error_line_on_stderr_is_used_when_the_report_has_none(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "noreport", {"exit": 75})
    while not Path(handle["exit_path"]).exists():
        await asyncio.sleep(0.1)
    os.remove(handle["report_path"])  # as if the job died before its first report
    payload = (await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))).payload
    assert payload["report"] is None
    assert payload["error"]["code"] == codes.INJECTED_TRANSIENT


async def test_a_driver_killed_by_a_signal_is_an_infrastructure_error(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "killed", {"sleep": 30})
    await asyncio.sleep(1.0)
    os.kill(handle["pid"], 0)
    # SIGKILL the job itself (not the wrapper): the wrapper records 137, the report stays "running".
    import psutil

    [job] = psutil.Process(handle["pid"]).children()
    job.kill()
    payload = (await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))).payload
    assert payload["status"] == "failed" and payload["exit_code"] == 137
    assert payload["error"] is None  # nobody wrote one: the engine classifies the exit code
    assert payload["report"]["status"] == "running"
    verdict = classify(payload["stderr_tail"], exit_code=payload["exit_code"])
    assert verdict.code == codes.INFRASTRUCTURE and not verdict.fatal


async def test_stays_quiet_while_the_job_runs_and_keeps_the_event_loop_free(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "slow", {"sleep": 4, "progress": 2})
    trigger = SparkPipelineTrigger(handle, poll_interval=0.1)
    gaps = []

    async def ticker():
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    events = trigger.run()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(pending := asyncio.ensure_future(anext(events))), 2.5)
    assert LocalBackend().status(handle).state == "running"  # quiet because it is running, not because it died
    event = await asyncio.wait_for(pending, 20)
    tick.cancel()
    assert event.payload["status"] == "succeeded"
    assert max(gaps) < 0.5, f"event loop blocked for {max(gaps):.2f}s"


async def test_progress_event_when_asked_for(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "progress", {"sleep": 6, "progress": 3})
    payload = (await first_event(SparkPipelineTrigger(handle, poll_interval=0.2, report_progress=True))).payload
    assert payload["status"] == "running"
    assert payload["report"]["totals"]["written"] == {"out": 3}
    assert LocalBackend().status(handle).state == "running"


async def test_recreated_trigger_watches_the_same_job_without_a_second_submission(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "watched", {"sleep": 3})
    first = SparkPipelineTrigger(handle, poll_interval=0.2)
    watching = asyncio.ensure_future(anext(first.run()))
    await asyncio.sleep(1.0)
    watching.cancel()  # the triggerer went away mid-watch
    with pytest.raises(asyncio.CancelledError):
        await watching
    classpath, kwargs = first.serialize()
    again = SparkPipelineTrigger(**kwargs)  # what a new triggerer does with the stored kwargs
    payload = (await first_event(again)).payload
    assert payload["status"] == "succeeded" and payload["run_id"] == "watched"
    assert starts(tmp_path) == ["watched"]  # one start: the job was never submitted again


async def test_on_kill_stops_the_job(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "tokill", {"sleep": 60})
    trigger = SparkPipelineTrigger(handle, poll_interval=0.2)
    await asyncio.sleep(0.5)
    await trigger.on_kill()  # what the triggerer calls when a user marks the deferred task failed
    status = LocalBackend().status(handle)
    assert status.state == "failed" and status.exit_code == 143  # SIGTERM: a graceful stop


async def test_a_run_id_is_used_once(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "once", {})
    await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))
    with pytest.raises(ValueError, match="already ran"):
        start_tiny_job(tiny_job, tmp_path, "once", {})  # its old exit record would pass for the new job's
