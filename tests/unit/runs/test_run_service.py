"""RunService (runs/service.py): the run loop both drivers follow, driven with a fake clock, real watch events
and a real store on disk. The submission is a scripted function (its handle, or a refusal): the service sees
only that function, as it sees the operator's hook or the CLI's backend."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_conduit.names import STORE_KEY, XCOM_JOB, XCOM_STATE
from airflow_conduit.recovery import FakeClock, PipelineState, RecoveryOptions
from airflow_conduit.runs.events import WatchEvent, WatchEventError
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.runs.service import (BackoffOver, Ending, Finished, RunService, RunStateLost, WaitBackoff,
                                          WatchRun)
from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.status import WatchStatus
from airflow_conduit.runs.store import RunStore

TASK = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}
TRANSIENT = {"code": 1500, "fatal": False, "message": "injected transient failure"}
FATAL = {"code": 2700, "fatal": True, "message": "java.io.FileNotFoundException: /in"}


class LeaseHeld(Exception):
    """Stands for the hook's lease refusal (the service only sees the classes it is given)."""


class Unreachable(Exception):
    """Stands for any other refused submission."""


class Submissions:
    """A submit function with a script of outcomes: a handle, or an exception to raise."""

    def __init__(self, state_dir, *outcomes):
        self.state_dir = str(state_dir)
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, run_id: str, previous: JobHandle | None) -> JobHandle:
        self.calls.append((run_id, previous.run_id if previous else None))
        outcome = self.outcomes.pop(0) if self.outcomes else "ok"
        if isinstance(outcome, BaseException):
            raise outcome
        return JobHandle("local", run_id, self.state_dir, f"{self.state_dir}/runs/{run_id}/report.json", pid=4242)


class TaskStateStore:
    def __init__(self):
        self.values: dict = {}

    def get(self, key):
        return self.values.get(key)

    def set(self, key, value):
        self.values[key] = value


def report(written: int, stop_reason: str | None = None) -> dict:
    return {"totals": {"read": written, "filtered": 0, "dlq": 0, "written": {"lake": written}}, "stop_reason": stop_reason}


def ended(step: WatchRun, status: WatchStatus, **more) -> WatchEvent:
    return WatchEvent(status, step.handle.run_id, handle=step.handle, **more)


def service(tmp_path, submit, *, clock=None, tasks=None, published=None, **settings) -> RunService:
    store = RunStore(str(tmp_path), TASK, task_store=tasks,
                     publish=(lambda key, value: published.__setitem__(key, value)) if published is not None else None)
    return RunService(store, submit, (LeaseHeld, Unreachable), (LeaseHeld,), clock=clock or FakeClock(), **settings)


def start(svc: RunService, **options):
    return svc.start(RecoveryOptions(**options), readable_prefix="manual__1-pipeline-t1", pipeline_id="orders")


def test_fail_wait_resubmit_recover_succeed_on_a_fake_clock(tmp_path):
    """One pipeline's life as each driver lives it: every step, and the state each leaves in the store."""
    clock, submit, published = FakeClock(), Submissions(tmp_path), {}
    svc = service(tmp_path, submit, clock=clock, tasks=TaskStateStore(), published=published)

    step = start(svc, max_retries=3, min_delay=10)
    assert isinstance(step, WatchRun) and step.submitted and not step.report_progress
    first = step.handle
    assert first.run_id.startswith("manual__1-pipeline-t1-") and first.run_id.endswith("-s01")
    assert step.lines == (f"submitted: run {first.run_id} (local backend, pid 4242)",)
    assert published[XCOM_JOB] == first.to_dict() and StateDir(tmp_path).read_recovery()["current"] == first.to_dict()

    step = svc.advance(ended(step, WatchStatus.FAILED, error=TRANSIENT, exit_code=75))
    assert isinstance(step, WaitBackoff) and step.seconds == 10 and step.previous == first
    assert step.lines[-1] == "restarting in 10s (restart 1 of 3 within max-retries-window 5m)"
    assert StateDir(tmp_path).pipeline_state() == "recovering" and svc.watched is None

    clock.advance(timedelta(seconds=10))
    step = svc.advance(BackoffOver(step.previous))
    assert isinstance(step, WatchRun) and step.report_progress  # recovering: the first record says "recovered"
    assert submit.calls[-1] == (step.handle.run_id, first.run_id)  # the next submission makes sure s01 is gone
    assert step.handle.run_id.endswith("-s02")

    step = svc.advance(ended(step, WatchStatus.RUNNING, report=report(5)))
    assert isinstance(step, WatchRun) and not step.report_progress and not step.submitted
    assert step.lines[0].startswith(f"recovered: run {step.handle.run_id} wrote its first records")
    assert published[XCOM_STATE] == "running"

    step = svc.advance(ended(step, WatchStatus.SUCCEEDED, report=report(9)))
    assert isinstance(step, Finished) and step.ending is Ending.SUCCEEDED and step.handle.run_id.endswith("-s02")
    assert (step.summary["status"], step.summary["submissions"], step.summary["state_dir"]) == ("succeeded", 2, str(tmp_path))
    assert [e["event"] for e in step.summary["audit_log"]] == [
        "started", "failed", "restart-scheduled", "restarted", "recovered", "backoff-reset", "stopped"]
    assert StateDir(tmp_path).pipeline_state() == "stopped"


def test_a_driver_that_comes_back_resumes_from_the_store_alone(tmp_path):
    """The operator between deferrals: nothing in memory, the same answer as a service that stayed."""
    clock, tasks = FakeClock(), TaskStateStore()
    step = start(service(tmp_path, Submissions(tmp_path), clock=clock, tasks=tasks), max_retries=3)
    carried = []

    def options(started_with: dict) -> RecoveryOptions:
        carried.append(started_with)
        return RecoveryOptions.from_mapping(started_with)

    store = RunStore(str(tmp_path), TASK, task_store=tasks)
    again = RunService.resume(store, Submissions(tmp_path), options, clock=clock)
    assert again.watched == step.handle and carried[0]["max-retries"] == 3
    answer = again.advance(ended(step, WatchStatus.FAILED, error=TRANSIENT, exit_code=75).to_dict())  # a trigger event
    assert isinstance(answer, WaitBackoff) and answer.previous == step.handle


def test_resuming_without_any_stored_state_says_so(tmp_path):
    with pytest.raises(RunStateLost, match=r"nothing in task_state_store nor .*/recovery.json"):
        RunService.resume(RunStore(str(tmp_path), TASK), Submissions(tmp_path), RecoveryOptions.from_mapping)


def test_an_event_about_another_run_or_not_an_event_is_refused(tmp_path):
    svc = service(tmp_path, Submissions(tmp_path))
    step = start(svc)
    with pytest.raises(WatchEventError, match=r"an event about run 'other', but the job watched is run"):
        svc.advance(WatchEvent(WatchStatus.SUCCEEDED, "other"))
    with pytest.raises(WatchEventError, match=r"unknown key\(s\) \['carry'\]"):
        svc.advance({"status": "succeeded", "run_id": step.handle.run_id, "carry": {}})


def test_a_fatal_failure_ends_degraded_with_its_classification(tmp_path):
    svc = service(tmp_path, Submissions(tmp_path))
    step = svc.advance(ended(start(svc), WatchStatus.FAILED, error=FATAL, exit_code=70))
    assert isinstance(step, Finished) and step.ending is Ending.DEGRADED and step.summary is None
    assert (step.classification.kind, step.classification.code) == ("fatal", 2700)
    assert step.message.startswith("pipeline degraded: fatal error, no restart")
    assert "error: java.io.FileNotFoundException: /in" in step.message and "last audit events:" in step.message
    assert step.lines[-1].startswith("degraded because")
    assert StateDir(tmp_path).pipeline_state() == "degraded"


def test_a_run_asked_to_stop_ends_stopped_not_failed(tmp_path):
    svc = service(tmp_path, Submissions(tmp_path))
    step = svc.advance(ended(start(svc), WatchStatus.STOPPED, report=report(3, stop_reason="signal SIGTERM")))
    assert isinstance(step, Finished) and step.ending is Ending.STOPPED
    assert step.summary["status"] == "stopped" and step.summary["stop_reason"] == "signal SIGTERM"
    assert svc.supervisor.engine.state.total_failures == 0


def test_a_refused_submission_is_waited_out_within_the_retry_budget(tmp_path):
    """The operator's answer to a held lease: a transient failure, restarted like any other."""
    clock = FakeClock()
    svc = service(tmp_path, Submissions(tmp_path, LeaseHeld("leased by run x")), clock=clock)
    step = start(svc, max_retries=2, min_delay=5)
    assert isinstance(step, WaitBackoff) and step.seconds == 5 and step.previous is None
    assert step.lines[0].endswith("could not be submitted: leased by run x")
    clock.advance(timedelta(seconds=5))
    assert isinstance(svc.advance(BackoffOver(step.previous)), WatchRun)


def test_a_driver_that_ends_when_leased_ends_refused_and_leaves_the_holders_file(tmp_path):
    """The CLI's answer: it ends at once; the holder's recovery.json is the holder's."""
    RunStore(str(tmp_path), {"cli": True, "pid": 1}).save(_running_supervisor(tmp_path))
    before = (tmp_path / "recovery.json").read_bytes()
    svc = service(tmp_path, Submissions(tmp_path, LeaseHeld("the state dir is leased by run x")), end_when_leased=True)
    step = start(svc)
    assert isinstance(step, Finished) and step.ending is Ending.REFUSED
    assert step.message == "the state dir is leased by run x"
    assert svc.supervisor.pipeline_state is PipelineState.STOPPED
    assert (tmp_path / "recovery.json").read_bytes() == before


def _running_supervisor(tmp_path):
    other = service(tmp_path / "other", Submissions(tmp_path / "other"))
    start(other)
    return other.supervisor


def test_a_refusal_that_is_not_transient_is_raised_and_the_stop_recorded(tmp_path):
    class ConnectionUnusable(Unreachable):
        transient = False

    svc = service(tmp_path, Submissions(tmp_path, ConnectionUnusable("no such connection")))
    with pytest.raises(ConnectionUnusable):
        start(svc)
    svc.stop("not submitted: no such connection")
    assert StateDir(tmp_path).pipeline_state() == "stopped"


def test_a_new_start_watches_the_job_an_earlier_try_left_running(tmp_path):
    tasks, submit = TaskStateStore(), Submissions(tmp_path)
    first = start(service(tmp_path, submit, tasks=tasks))
    step = start(service(tmp_path, submit, tasks=tasks))
    assert isinstance(step, WatchRun) and step.handle == first.handle and not step.submitted
    assert step.lines == (f"resuming: watching run {first.handle.run_id} submitted by an earlier try",)
    assert len(submit.calls) == 1  # watched, never submitted again


def test_a_new_start_of_a_recovering_pipeline_keeps_its_window_and_submits(tmp_path):
    clock, tasks, submit = FakeClock(), TaskStateStore(), Submissions(tmp_path)
    svc = service(tmp_path, submit, clock=clock, tasks=tasks)
    svc.advance(ended(start(svc, max_retries=1), WatchStatus.FAILED, error=TRANSIENT, exit_code=75))
    step = start(service(tmp_path, submit, clock=clock, tasks=tasks), max_retries=1)  # an Airflow retry
    assert isinstance(step, WatchRun) and step.handle.run_id.endswith("-s02")
    assert step.lines[0] == "resuming pipeline orders (recovering) from its persisted recovery state"
    resumed = RunService.resume(RunStore(str(tmp_path), TASK, task_store=tasks), submit, RecoveryOptions.from_mapping,
                                clock=clock)
    step = resumed.advance(ended(step, WatchStatus.FAILED, error=TRANSIENT, exit_code=75))
    assert isinstance(step, Finished) and step.ending is Ending.DEGRADED  # the earlier try's restart counted


@pytest.mark.parametrize("resume_earlier", [True, False])
def test_a_finished_pipeline_starts_afresh(tmp_path, resume_earlier):
    tasks, submit = TaskStateStore(), Submissions(tmp_path)
    svc = service(tmp_path, submit, tasks=tasks)
    svc.advance(ended(start(svc), WatchStatus.FAILED, error=FATAL, exit_code=70))
    assert tasks.values[STORE_KEY]["recovery"]["pipeline_state"] == "degraded"
    fresh = service(tmp_path, submit, tasks=tasks)
    step = fresh.start(RecoveryOptions(), readable_prefix="manual__1-pipeline-t2", pipeline_id="orders",
                       resume_earlier=resume_earlier)
    assert isinstance(step, WatchRun) and step.submitted and "-t2-" in step.handle.run_id
    assert fresh.supervisor.pipeline_state is PipelineState.RUNNING and fresh.supervisor.submissions == 1
    assert any("fresh retry budget" in line for line in step.lines) is resume_earlier


def test_the_state_an_earlier_version_saved_resumes_with_its_job_handle(tmp_path):
    """A task deferred by an earlier version: its saved state names the watched job's backend ``launcher`` and
    writes unset keys as null; the resumed service watches that job and answers its event."""
    tasks = TaskStateStore()
    step = start(service(tmp_path, Submissions(tmp_path), tasks=tasks))
    carry = tasks.values[STORE_KEY]
    carry["current"] = {**{k: v for k, v in carry["current"].items() if k != "backend"}, "launcher": "local",
                        "driver_id": None, "conn_id": None}
    resumed = RunService.resume(RunStore(str(tmp_path), TASK, task_store=tasks), Submissions(tmp_path),
                                RecoveryOptions.from_mapping)
    assert resumed.watched == step.handle
    earlier_event = ended(step, WatchStatus.SUCCEEDED, report=report(2)).to_dict()
    earlier_event["handle"] = carry["current"]
    assert resumed.advance(earlier_event).ending is Ending.SUCCEEDED
