"""SparkPipelineTrigger: one event per watch, quiet while the job runs, never submits.

The watched job is real and detached (started by the local backend's wrapper), but it is a tiny
Python stand-in for the Spark entry point (tests/integration/jobs/tiny_job.py, same arguments,
report and exit codes): these tests are about watching, and a spark-submit costs ~25 s here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.recovery import classify, codes
from airflow_conduit.recovery.clock import parse_iso
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.triggers.pipeline import SparkPipelineTrigger
from scripted_master import ScriptedMaster


def start_tiny_job(tiny_job: str, state_dir: Path, run_id: str, faults: dict) -> JobHandle:
    cmd = [sys.executable, tiny_job, "--spec", "unused.yaml", "--run-id", run_id, "--state-dir", str(state_dir),
           "--faults", json.dumps(faults)]
    return LocalBackend().launch(cmd, run_id, str(state_dir))


def starts(state_dir: Path) -> list[str]:
    path = state_dir / "faults" / "tiny_job_starts"
    return path.read_text().split() if path.exists() else []


async def first_event(trigger: SparkPipelineTrigger, timeout: float = 30):
    return await asyncio.wait_for(anext(trigger.run()), timeout)


def test_serialize_round_trips_through_the_classpath(tmp_path):
    handle = JobHandle("local", "r1", str(tmp_path), str(tmp_path / "r.json"), pid=1)
    trigger = SparkPipelineTrigger(handle, poll_interval=0.5, report_progress=True)
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # must survive the trigger table
    assert set(kwargs) == {"handle", "poll_interval", "report_progress", "status_failures_tolerated"}  # ids, not the recovery state
    assert kwargs["handle"] == handle.to_dict()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs) and rebuilt.handle == handle
    assert classpath == "airflow_conduit.triggers.pipeline.SparkPipelineTrigger"


async def test_a_deferral_serialized_by_an_earlier_version_resumes_watching_its_run(tmp_path, tiny_job):
    """A triggerer re-creates the trigger from the kwargs an earlier version stored: its handle names the backend
    ``launcher`` and writes unset keys as null. The rebuilt trigger watches that run to its end."""
    handle = start_tiny_job(tiny_job, tmp_path, "earlier", {"progress": 2, "sleep": 1})
    stored = {**{k: v for k, v in handle.to_dict().items() if k != "backend"}, "launcher": "local", "driver_id": None}
    kwargs = json.loads(json.dumps({"handle": stored, "poll_interval": 0.2, "report_progress": False,
                                    "status_failures_tolerated": 3}))
    trigger = SparkPipelineTrigger(**kwargs)
    assert trigger.handle == handle
    payload = (await first_event(trigger, timeout=120)).payload
    assert payload["status"] == "succeeded" and payload["run_id"] == "earlier"
    assert payload["report"]["totals"]["written"] == {"out": 2}


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


async def test_in_a_triggerer_a_run_that_ends_right_after_submission_is_reported_once_the_deferral_settled(
        tmp_path, tiny_job, monkeypatch, capsys):
    """A job that fails within seconds is reported no earlier than ``deferral_settle_seconds`` after its
    submission when a triggerer runs the trigger (it attaches ``task_instance``), so the worker's deferral
    reaches the scheduler first (apache/airflow#67287). Outside a triggerer (dag.test(), the CLI) nothing is held."""
    from types import SimpleNamespace

    from airflow_conduit.triggers import pipeline as trigger_module

    def logged() -> str:  # the trigger's log (structlog) goes to the captured output
        out, err = capsys.readouterr()
        return out + err

    monkeypatch.setattr(trigger_module, "deferral_settle_seconds", lambda: 3.0)
    plain = start_tiny_job(tiny_job, tmp_path / "plain", "plain", {"exit": 75})
    assert (await first_event(SparkPipelineTrigger(plain, poll_interval=0.2))).payload["status"] == "failed"
    assert "plain failed: exit=75" in (text := logged()) and "ended right after its submission" not in text

    held = start_tiny_job(tiny_job, tmp_path / "held", "held", {"exit": 75})
    trigger = SparkPipelineTrigger(held, poll_interval=0.2)
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="manual_1", task_id="pipeline", map_index=-1)
    payload = (await first_event(trigger)).payload
    assert payload["status"] == "failed" and payload["exit_code"] == 75
    assert "run held ended right after its submission" in logged()
    assert time.time() >= parse_iso(held.submitted_at).timestamp() + 3.0


def test_settle_wait_counts_from_the_submission():
    from airflow_conduit.triggers.pipeline import settle_wait

    at = "2026-11-25T20:00:00+00:00"
    submitted = 1795636800.0  # the same instant
    assert settle_wait(at, submitted + 1.0, 10.0) == 9.0
    assert settle_wait(at, submitted + 30.0, 10.0) == 0.0
    assert settle_wait(at, submitted - 100.0, 10.0) == 10.0  # a clock step back never holds longer than settle
    assert settle_wait(None, submitted, 10.0) == settle_wait("not a time", submitted, 10.0) == 0.0


async def test_error_line_on_stderr_is_used_when_the_report_has_none(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "noreport", {"exit": 75})
    while not Path(handle.exit_path).exists():
        await asyncio.sleep(0.1)
    os.remove(handle.report_path)  # as if the job died before its first report
    payload = (await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))).payload
    assert payload["report"] is None
    assert payload["error"]["code"] == codes.INJECTED_TRANSIENT


async def test_a_driver_killed_by_a_signal_is_recorded_as_killed_by_that_signal(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "killed", {"sleep": 30})
    deadline = time.monotonic() + 120
    while not Path(handle.report_path).exists():  # the job wrote its "running" report (slow on a loaded machine)
        assert time.monotonic() < deadline, "the job wrote no report"
        await asyncio.sleep(0.1)
    os.kill(handle.pid, 0)
    # SIGKILL the job itself (not the wrapper): the wrapper records 137, the report stays "running".
    import psutil

    [job] = psutil.Process(handle.pid).children()
    job.kill()
    payload = (await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))).payload
    assert payload["status"] == "failed" and payload["exit_code"] == 137
    assert payload["report"]["status"] == "running"  # nobody wrote an error: the wrapper saw the signal
    error = payload["error"]
    assert error["code"] == codes.KILLED_BY_SIGNAL and error["extra"] == {"process": "jvm", "signal": 9}
    assert error["message"].startswith("the driver's JVM (spark-submit) was killed by signal 9 (SIGKILL)")
    verdict = classify(error, exit_code=payload["exit_code"])
    assert verdict.code == codes.KILLED_BY_SIGNAL and not verdict.fatal


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


async def wait_started(state_dir: Path, run_id: str, timeout: float = 120) -> None:
    """The job itself runs (not only its wrapper): a signal now reaches it."""
    deadline = time.monotonic() + timeout
    while run_id not in starts(state_dir):
        assert time.monotonic() < deadline, f"{run_id} did not start"
        await asyncio.sleep(0.1)


async def test_on_kill_stops_the_job(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "tokill", {"sleep": 60})
    trigger = SparkPipelineTrigger(handle, poll_interval=0.2)
    await wait_started(tmp_path, "tokill")
    await trigger.on_kill()  # what the triggerer calls when a user marks the deferred task failed
    status = LocalBackend().status(handle)
    assert status.state == "failed" and status.exit_code == 143  # SIGTERM: a graceful stop


async def test_a_run_id_is_used_once(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "once", {})
    await first_event(SparkPipelineTrigger(handle, poll_interval=0.2))
    with pytest.raises(ValueError, match="already ran"):
        start_tiny_job(tiny_job, tmp_path, "once", {})  # its old exit record would pass for the new job's


# -- blips: the watcher tolerates its dependencies --------------------------------------------------


def driver_status(state: str) -> dict:
    """The master's answer to a status request for a driver in ``state``."""
    return {"action": "SubmissionStatusResponse", "success": True, "driverState": state}


QUICK_REST_RETRIES = {"limit": 5, "delay": 0.01, "max_delay": 0.05}  # the hook's rest_retry_* arguments, as a handle carries them


def standalone_handle(tmp_path, port: int, rest_retry: dict = QUICK_REST_RETRIES) -> dict:
    return {"backend": "standalone", "run_id": "s1", "state_dir": str(tmp_path), "report_path": str(tmp_path / "r.json"),
            "log_path": None, "driver_id": "driver-1", "rest_endpoint": f"http://127.0.0.1:{port}", "rest_retry": rest_retry}


async def test_status_blips_and_unknown_driver_states_do_not_end_the_watch(tmp_path):
    # 5xx twice (retried inside one status call), then the master's own words for "not finished yet".
    master = ScriptedMaster([500, 503, *map(driver_status, ["SUBMITTED", "RUNNING", "UNKNOWN", "RELAUNCHING", "RUNNING", "FINISHED"])])
    try:
        payload = (await first_event(SparkPipelineTrigger(standalone_handle(tmp_path, master.port), poll_interval=0.05))).payload
    finally:
        master.close()
    assert payload["status"] == "succeeded" and payload["driver_state"] == "FINISHED"
    assert len(master.requests) == 8


async def test_a_job_that_cannot_be_observed_becomes_a_classified_failure(tmp_path):
    from airflow_conduit.hooks.backends.local import free_port

    handle = standalone_handle(tmp_path, free_port())  # nothing listens there: the master is gone
    payload = (await first_event(SparkPipelineTrigger(handle, poll_interval=0.05), timeout=120)).payload
    assert payload["status"] == "failed"
    assert payload["error"]["code"] == codes.INFRASTRUCTURE and payload["error"]["fatal"] is False
    assert payload["error"]["extra"]["unobservable"] is True
    assert "cannot observe run s1" in payload["error"]["message"]
    assert not classify(payload["error"]).fatal  # the engine restarts it like any transient failure


# -- stopping: the state says stopped, not succeeded or recovering -----------------------------------


async def test_a_run_stopped_on_request_is_reported_stopped(tmp_path, tiny_job):
    handle = start_tiny_job(tiny_job, tmp_path, "stopme", {"sleep": 60, "stop_on_sigterm": True})
    trigger = SparkPipelineTrigger(handle, poll_interval=0.2)
    watching = asyncio.ensure_future(anext(trigger.run()))
    await wait_started(tmp_path, "stopme")  # its SIGTERM handler is installed before it counts its start
    await asyncio.to_thread(LocalBackend().kill, handle, True)  # SIGTERM: the job stops cleanly, exit 0
    payload = (await asyncio.wait_for(watching, 60)).payload
    assert payload["exit_code"] == 0 and payload["report"]["stop_reason"] == "signal SIGTERM"
    assert payload["status"] == "stopped"


async def test_on_kill_records_stopped_for_the_sensors(tmp_path, tiny_job):
    from airflow_conduit.runs.state_dir import StateDir
    from airflow_conduit.recovery import RecoveryOptions
    from airflow_conduit.runs.supervisor import RunSupervisor
    from airflow_conduit.sensors.pipeline import PipelineStateSensor

    handle = start_tiny_job(tiny_job, tmp_path, "running", {"sleep": 60})
    await wait_started(tmp_path, "running")
    session = RunSupervisor(RecoveryOptions.from_mapping({}), pipeline_id="tiny")
    session.engine.on_failure({"code": 1100, "fatal": False, "message": "connection refused"})
    session.engine.on_restarted()  # a recovering pipeline
    session.current = handle
    StateDir(tmp_path).write_recovery(session.recovery_record({"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}))
    assert StateDir(tmp_path).pipeline_state() == "recovering"

    await SparkPipelineTrigger(handle, poll_interval=0.2).on_kill()  # the user marked the task failed

    record = StateDir(tmp_path).read_recovery()
    assert record["pipeline_state"] == "stopped" and record["current"] is None
    assert record["carry"]["recovery"]["audit"][-1]["event"] == "stopped"
    assert record["owner"]["task_id"] == "t"
    assert PipelineStateSensor(task_id="s", state_dir=str(tmp_path), target_states=["stopped"]).poke({})
    assert LocalBackend().status(handle).finished


async def test_stopping_during_the_backoff_wait_records_stopped(tmp_path):
    from datetime import datetime, timedelta, timezone

    from airflow_conduit.runs.state_dir import StateDir
    from airflow_conduit.recovery import RecoveryOptions
    from airflow_conduit.runs.supervisor import RunSupervisor
    from airflow_conduit.triggers.pipeline import BackoffTrigger

    session = RunSupervisor(RecoveryOptions.from_mapping({}), pipeline_id="tiny")
    session.engine.on_failure({"code": 1100, "fatal": False, "message": "connection refused"})  # restart pending
    StateDir(tmp_path).write_recovery(session.recovery_record({"cli": True}))
    assert StateDir(tmp_path).pipeline_state() == "recovering"
    timer = BackoffTrigger(datetime.now(timezone.utc) + timedelta(minutes=5), str(tmp_path))
    classpath, kwargs = timer.serialize()
    assert classpath.endswith("BackoffTrigger") and set(kwargs) == {"moment", "state_dir"}
    await BackoffTrigger(**kwargs).on_kill()
    assert StateDir(tmp_path).pipeline_state() == "stopped"


@pytest.mark.parametrize("task_state, job_stopped", [("deferred", False), ("failed", True), ("success", True), (None, True)])
async def test_on_kill_stops_the_job_only_when_the_user_acted(tmp_path, tiny_job, monkeypatch, task_state, job_stopped):
    """Airflow 3.3 cancels a trigger moved to another triggerer like a user action and calls on_kill
    (apache/airflow#73454): the task's state tells the two apart. The Execution API's answer is stood in
    for (no API server here); the job, its kill and the state dir are real."""
    from types import SimpleNamespace

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    asked = []

    def task_states(**query):
        asked.append(query)
        return {"manual_1": {"pipeline": task_state}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(task_states))
    handle = start_tiny_job(tiny_job, tmp_path, "moved", {"sleep": 60})
    await wait_started(tmp_path, "moved")
    trigger = SparkPipelineTrigger(handle, poll_interval=0.2)
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="manual_1", task_id="pipeline", map_index=-1)
    await trigger.on_kill()
    assert asked == [{"dag_id": "d", "map_index": -1, "task_ids": ["pipeline"], "run_ids": ["manual_1"]}]
    assert LocalBackend().status(handle).finished is job_stopped
    if not job_stopped:
        LocalBackend(graceful_stop_seconds=5).kill(handle)


async def test_on_kill_leaves_the_job_running_when_the_task_state_is_unreadable(tmp_path, tiny_job):
    from types import SimpleNamespace

    handle = start_tiny_job(tiny_job, tmp_path, "unsure", {"sleep": 60})
    await wait_started(tmp_path, "unsure")
    trigger = SparkPipelineTrigger(handle, poll_interval=0.2)
    # No triggerer around: the Execution API cannot be asked, so a move cannot be ruled out.
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="pipeline", map_index=-1)
    await trigger.on_kill()
    assert LocalBackend().status(handle).state == "running"
    LocalBackend(graceful_stop_seconds=5).kill(handle)


async def test_on_kill_finishes_the_stop_when_it_is_cancelled_again(tmp_path, tiny_job, monkeypatch):
    """Airflow 3.3's triggerer re-sends a trigger's cancellation on every sync until the trigger has finished,
    so on_kill is cancelled while it works (seen on the deployment layer: a "mark success" that never
    stopped the job). The stop must finish anyway. The Execution API's answer is stood in for (slow, as under load)."""
    import threading
    from types import SimpleNamespace

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    answered = threading.Event()

    def slow_task_states(**query):
        time.sleep(1.0)
        answered.set()
        return {"manual_1": {"pipeline": "success"}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(slow_task_states))
    handle = start_tiny_job(tiny_job, tmp_path, "cancelled-twice", {"sleep": 60})
    await wait_started(tmp_path, "cancelled-twice")
    trigger = SparkPipelineTrigger(handle, poll_interval=0.2)
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="manual_1", task_id="pipeline", map_index=-1)
    killing = asyncio.ensure_future(trigger.on_kill())
    await asyncio.sleep(0.3)
    killing.cancel()  # the second cancellation, while on_kill waits for the task state
    with pytest.raises(asyncio.CancelledError):
        await killing
    deadline = time.monotonic() + 60
    while not LocalBackend().status(handle).finished:
        assert time.monotonic() < deadline, "the job was not stopped after on_kill was cancelled"
        await asyncio.sleep(0.2)
    assert answered.is_set()
    assert LocalBackend().status(handle).exit_code == 143
