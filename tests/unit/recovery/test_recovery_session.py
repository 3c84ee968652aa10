"""The recovery session (recovery/session.py): the steps and timeline lines the operator and the CLI print."""

from __future__ import annotations

from airflow_conduit.recovery import Action, FakeClock, RecoveryOptions
from airflow_conduit.recovery.session import RecoverySession, apply_event


def failed_event(run_id: str, error: dict) -> dict:
    return {"status": "failed", "handle": {"run_id": run_id}, "error": error, "exit_code": 75}


TRANSIENT = {"code": 1500, "fatal": False, "message": "injected transient failure 1 of 2"}


def test_a_transient_failure_restarts_and_says_so_once():
    session = RecoverySession(RecoveryOptions(max_retries=3), clock=FakeClock())
    step = apply_event(session, failed_event("r-s01", TRANSIENT))
    assert step.action is Action.RESTART
    assert "failed: classified as transient, code 1500 (structured error code 1500 (1000-1999 transient))" in step.lines[0]
    assert step.lines[1] == "restarting in 1s (restart 1 of 3 within max-retries-window 5m)"


def test_strimzi_restart_lines_count_since_the_last_reset():
    session = RecoverySession(RecoveryOptions(policy="strimzi", max_retries=7), clock=FakeClock())
    assert apply_event(session, failed_event("r-s01", TRANSIENT)).lines[1] == "restarting in 0s (restart 1 of 7 since the last reset)"


def test_a_fatal_failure_degrades():
    session = RecoverySession(RecoveryOptions(), clock=FakeClock())
    step = apply_event(session, failed_event("r-s01", {"code": 2700, "fatal": True, "message": "java.io.FileNotFoundException: x"}))
    assert step.action is Action.DEGRADE and session.degraded
    assert step.lines[-1].startswith("degraded because fatal error, no restart: fatal 2700")


def test_degraded_message_names_the_cause_not_the_last_stack_frame():
    from airflow_conduit.recovery.session import degraded_message

    log = (
        'Exception in thread "main" org.apache.spark.SparkException: Master must either be yarn or start with spark, k8s, or local\n'
        "\tat org.apache.spark.deploy.SparkSubmit.error(SparkSubmit.scala:1068)\n"
        "\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)\n"
    )
    session = RecoverySession(RecoveryOptions(), clock=FakeClock())
    step = apply_event(session, {"status": "failed", "handle": {"run_id": "r-s01"}, "stderr_tail": log, "exit_code": 1})
    assert step.action is Action.DEGRADE
    text = degraded_message(session, step.decision, step.error)
    assert "error: org.apache.spark.SparkException: Master must either be yarn" in text


def test_run_ids_of_two_sessions_started_in_the_same_second_differ_and_stay_readable():
    from airflow_conduit.recovery.session import unique_run_prefix

    prefixes = {unique_run_prefix("cli-20261126T064213") for _ in range(1000)}
    assert len(prefixes) == 1000
    first, second = (RecoverySession(RecoveryOptions(), run_prefix=p, clock=FakeClock()) for p in sorted(prefixes)[:2])
    assert first.next_run_id() != second.next_run_id()
    prefix = sorted(prefixes)[0]
    assert prefix.startswith("cli-20261126T064213-") and len(prefix) == len("cli-20261126T064213-") + 8
    assert first.run_ids() == [f"{prefix}-s01"]
    airflow = unique_run_prefix("manual__2026-11-26T06:42:13.123456+00:00-pipeline-t1")
    assert airflow.startswith("manual__2026-11-26T06_42_13.123456_00_00-pipeline-t1-")  # a folder name
    assert len(unique_run_prefix("x" * 500)) == 110 + 9  # long task ids are cut, the unique part is kept
