"""The run supervisor (runs/supervisor.py): the steps and timeline lines the operator and the CLI print,
driven with a fake clock and real watch events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_conduit.recovery import Action, FakeClock, PipelineState, RecoveryOptions
from airflow_conduit.runs.events import WatchEvent
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.runs.status import WatchStatus
from airflow_conduit.runs.supervisor import RunSupervisor, unique_run_prefix


def job(run_id: str) -> JobHandle:
    return JobHandle("local", run_id, "/state", f"/state/runs/{run_id}/report.json", pid=4242)


def failed_event(run_id: str, error: dict) -> WatchEvent:
    return WatchEvent(WatchStatus.FAILED, run_id, handle=job(run_id), error=error, exit_code=75)


def report(written: int, stop_reason: str | None = None) -> dict:
    return {"totals": {"read": written, "filtered": 0, "dlq": 0, "written": {"lake": written}}, "stop_reason": stop_reason}


TRANSIENT = {"code": 1500, "fatal": False, "message": "injected transient failure 1 of 2"}


class LeaseHeld(Exception):
    """Stands for the hook's lease refusal (the supervisor only sees the classes it is given)."""


class Backend:
    """A submit function with a script of outcomes: a handle, or an exception to raise."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.submitted: list[str] = []

    def __call__(self, run_id: str) -> JobHandle:
        self.submitted.append(run_id)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return job(run_id)


def test_a_transient_failure_restarts_and_says_so_once():
    supervisor = RunSupervisor(RecoveryOptions(max_retries=3), clock=FakeClock())
    step = supervisor.on_event(failed_event("r-s01", TRANSIENT))
    assert step.action is Action.RESTART
    assert "failed: classified as transient, code 1500 (structured error code 1500 (1000-1999 transient))" in step.lines[0]
    assert step.lines[1] == f"  error: {TRANSIENT['message']}"  # the failure's own words, not only its code
    assert step.lines[2] == "restarting in 1s (restart 1 of 3 within max-retries-window 5m)"


def test_strimzi_restart_lines_count_since_the_last_reset():
    supervisor = RunSupervisor(RecoveryOptions(policy="strimzi", max_retries=7), clock=FakeClock())
    assert supervisor.on_event(failed_event("r-s01", TRANSIENT)).lines[2] == "restarting in 0s (restart 1 of 7 since the last reset)"


def test_a_fatal_failure_degrades():
    supervisor = RunSupervisor(RecoveryOptions(), clock=FakeClock())
    step = supervisor.on_event(failed_event("r-s01", {"code": 2700, "fatal": True, "message": "java.io.FileNotFoundException: x"}))
    assert step.action is Action.DEGRADE and supervisor.degraded and supervisor.finished
    assert step.lines[-1].startswith("degraded because fatal error, no restart: fatal 2700")


def test_degraded_message_names_the_cause_not_the_last_stack_frame():
    log = (
        'Exception in thread "main" org.apache.spark.SparkException: Master must either be yarn or start with spark, k8s, or local\n'
        "\tat org.apache.spark.deploy.SparkSubmit.error(SparkSubmit.scala:1068)\n"
        "\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)\n"
    )
    supervisor = RunSupervisor(RecoveryOptions(), clock=FakeClock())
    step = supervisor.on_event(WatchEvent(WatchStatus.FAILED, "r-s01", handle=job("r-s01"), stderr_tail=log, exit_code=1))
    assert step.action is Action.DEGRADE
    text = supervisor.degraded_message(step)
    assert "error: org.apache.spark.SparkException: Master must either be yarn" in text


def test_run_ids_of_two_supervisors_started_in_the_same_second_differ_and_stay_readable():
    prefixes = {unique_run_prefix("cli-20261126T064213") for _ in range(1000)}
    assert len(prefixes) == 1000
    first, second = (RunSupervisor(RecoveryOptions(), run_prefix=p, clock=FakeClock()) for p in sorted(prefixes)[:2])
    assert first.next_run_id() != second.next_run_id()
    prefix = sorted(prefixes)[0]
    assert prefix.startswith("cli-20261126T064213-") and len(prefix) == len("cli-20261126T064213-") + 8
    assert first.run_ids() == [f"{prefix}-s01"]
    airflow = unique_run_prefix("manual__2026-11-26T06:42:13.123456+00:00-pipeline-t1")
    assert airflow.startswith("manual__2026-11-26T06_42_13.123456_00_00-pipeline-t1-")  # a folder name
    assert len(unique_run_prefix("x" * 500)) == 110 + 9  # long task ids are cut, the unique part is kept


def test_submit_watch_fail_restart_recover_succeed_with_a_fake_clock():
    """One pipeline's life as both drivers live it: every step and the state it leaves, in order."""
    clock = FakeClock()
    supervisor = RunSupervisor(RecoveryOptions(max_retries=3, min_delay=10), run_prefix="p", clock=clock)
    backend = Backend("ok", "ok")

    step = supervisor.submit(backend, (LeaseHeld,))
    assert step.action is Action.WATCH and step.handle.run_id == "p-s01" and supervisor.current == step.handle
    assert step.lines == ["submitted: run p-s01 (local backend, pid 4242)"]

    step = supervisor.on_event(failed_event("p-s01", TRANSIENT))
    assert step.action is Action.RESTART and step.delay_seconds == 10 and step.handle == job("p-s01")
    assert supervisor.current is None and supervisor.pipeline_state is PipelineState.RECOVERING

    clock.advance(timedelta(seconds=10))
    supervisor.restarted()
    step = supervisor.submit(backend, (LeaseHeld,), previous=step.handle)
    assert step.handle.run_id == "p-s02" and supervisor.awaiting_first_record

    step = supervisor.on_event(WatchEvent(WatchStatus.RUNNING, "p-s02", handle=step.handle, report=report(5)))
    assert step.action is Action.WATCH and step.lines[0].startswith("recovered: run p-s02 wrote its first records")
    assert supervisor.current.run_id == "p-s02" and not supervisor.awaiting_first_record

    step = supervisor.on_event(WatchEvent(WatchStatus.SUCCEEDED, "p-s02", handle=supervisor.current, report=report(9)))
    assert step.action is Action.DONE and supervisor.pipeline_state is PipelineState.STOPPED
    summary = supervisor.run_summary(step, "/state")
    assert (summary["status"], summary["run_id"], summary["submissions"]) == ("succeeded", "p-s02", 2)
    assert [e["event"] for e in summary["audit_log"]] == [
        "started", "failed", "restart-scheduled", "restarted", "recovered", "backoff-reset", "stopped"]


def test_a_stopped_run_is_done_and_not_a_failure():
    supervisor = RunSupervisor(RecoveryOptions(), clock=FakeClock())
    step = supervisor.on_event(WatchEvent(WatchStatus.STOPPED, "r-s01", handle=job("r-s01"),
                                          report=report(3, stop_reason="signal SIGTERM")))
    assert step.action is Action.DONE and step.lines[0].startswith("stopped: run r-s01 (signal SIGTERM)")
    assert supervisor.pipeline_state is PipelineState.STOPPED and supervisor.engine.state.total_failures == 0


@pytest.mark.parametrize("refusal, by_lease", [(LeaseHeld("the state dir is leased by run x"), True),
                                               (OSError("connection refused"), False)])
def test_a_refused_submission_is_a_transient_infrastructure_failure(refusal, by_lease):
    """The same answer for both drivers: the engine restarts it (or degrades when the budget is spent)."""
    supervisor = RunSupervisor(RecoveryOptions(max_retries=1), run_prefix="p", clock=FakeClock())
    previous = job("p-s00")
    step = supervisor.submit(Backend(refusal), (LeaseHeld, OSError), (LeaseHeld,), previous=previous)
    assert step.action is Action.RESTART and step.refusal is refusal and step.refused_by_lease is by_lease
    assert step.handle is previous  # the job the next submission must see gone is still the previous one
    assert step.event.error["code"] == 1400 and step.event.error["message"].startswith(f"not submitted: {type(refusal).__name__}")
    assert step.lines[0] == f"run p-s01 could not be submitted: {refusal}"
    assert "classified as transient, code 1400" in step.lines[1]
    step = supervisor.submit(Backend(refusal), (LeaseHeld, OSError), (LeaseHeld,))
    assert step.action is Action.DEGRADE and supervisor.degraded  # max-retries 1: the second refusal is one too many


def test_an_unexpected_exception_is_not_taken_for_a_refusal():
    supervisor = RunSupervisor(RecoveryOptions(), clock=FakeClock())
    with pytest.raises(KeyError):
        supervisor.submit(Backend(KeyError("bug")), (LeaseHeld,))


def test_a_refusal_that_says_it_is_not_transient_is_raised_not_retried():
    class ConnectionUnusable(LeaseHeld):
        transient = False

    supervisor = RunSupervisor(RecoveryOptions(), clock=FakeClock())
    with pytest.raises(ConnectionUnusable):
        supervisor.submit(Backend(ConnectionUnusable("no such connection")), (LeaseHeld,))
    assert supervisor.engine.state.total_failures == 0


def test_carry_round_trip_resumes_the_same_supervisor():
    clock = FakeClock()
    supervisor = RunSupervisor(RecoveryOptions(max_retries=3), run_prefix="p", pipeline_id="orders", clock=clock)
    supervisor.submit(Backend("ok"), ())
    supervisor.on_event(failed_event("p-s01", TRANSIENT))
    again = RunSupervisor.from_carry(supervisor.carry(), clock=clock)
    assert again.carry() == supervisor.carry()
    assert again.pipeline_state is PipelineState.RECOVERING and again.next_run_id() == "p-s02"
