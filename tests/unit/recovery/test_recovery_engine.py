"""The engine on a fake clock: the seed scenarios, windowed accounting, resets, states, audit log."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from recovery_helpers import at, started

from airflow_conduit.recovery import (
    AuditEvent,
    Decision,
    FakeClock,
    FatalError,
    InvalidTransition,
    PipelineState,
    RecoveryEngine,
    RecoveryOptions,
    RecoveryState,
    SystemClock,
    TransientError,
)
from airflow_conduit.recovery.errors import ProcessorError

UNAVAILABLE = "source system unavailable"


def events(engine: RecoveryEngine) -> list[str]:
    return [e.event for e in engine.state.audit]


# --- the seed scenarios (Conduit recovery doc, Example 2: max-retries 2, max-retries-window 10m) ---------


def test_conduit_scenario_1_third_failure_at_1515_degrades(conduit_example_2, clock):
    engine = started(conduit_example_2, clock)
    clock.set(at("15:10"))
    first = engine.on_failure(UNAVAILABLE)
    assert (first.action, first.attempt, first.delay_seconds, first.restarts_counted) == ("restart", 1, 1, 1)
    clock.set(at("15:10:01"))
    engine.on_restarted()
    clock.set(at("15:11"))
    second = engine.on_failure(UNAVAILABLE)
    assert (second.action, second.attempt, second.delay_seconds, second.restarts_counted) == ("restart", 2, 2, 2)
    clock.set(at("15:11:02"))
    engine.on_restarted()
    clock.set(at("15:15"))
    third = engine.on_failure(UNAVAILABLE)
    assert third.action == "degrade"
    assert third.restarts_counted == 2 and third.max_retries == 2
    assert "max-retries" in third.reason and "10m" in third.reason
    assert engine.state.pipeline_state is PipelineState.DEGRADED


def test_conduit_scenario_2_failure_at_1535_restarts(conduit_example_2, clock):
    engine = started(conduit_example_2, clock)
    for failure, restart in (("15:10", "15:10:01"), ("15:11", "15:11:02")):
        clock.set(at(failure))
        assert engine.on_failure(UNAVAILABLE).restart
        clock.set(at(restart))
        engine.on_restarted()
    # 15:20: 10 minutes since the first retry: one slot is available again.
    clock.set(at("15:20:01"))
    assert engine.restarts_in_window() == 1
    clock.set(at("15:35"))
    decision = engine.on_failure(UNAVAILABLE)
    assert decision.action == "restart"
    assert decision.restarts_counted == 1
    # It ran healthy for far more than backoff-reset-after (5m): the backoff started over.
    assert (decision.attempt, decision.delay_seconds) == (1, 1)
    assert engine.state.pipeline_state is PipelineState.RECOVERING


def test_scenarios_hold_without_on_restarted_calls(conduit_example_2, clock):
    """A later event implies the scheduled restart happened (the simulator and a resumed trigger rely on it)."""
    engine = started(conduit_example_2, clock)
    decisions = []
    for failure in ("15:10", "15:11", "15:15"):
        clock.set(at(failure))
        decisions.append(engine.on_failure(UNAVAILABLE).action)
    assert decisions == ["restart", "restart", "degrade"]
    restarted = [e for e in engine.state.audit if e.event == "restarted"]
    assert [e.at for e in restarted] == [at("15:10:01"), at("15:11:02")]
    assert all(e.details["implicit"] for e in restarted)


# --- windowed accounting -------------------------------------------------------------------------------------


def test_window_counts_restarts_until_window_after_the_restart(clock):
    options = RecoveryOptions.from_mapping({"max-retries": 1, "max-retries-window": "10m", "min-delay": "1m", "max-delay": "1m"})
    engine = started(options, clock)
    clock.set(at("15:10"))
    assert engine.on_failure(UNAVAILABLE).restart  # restart at 15:11
    clock.set(at("15:11"))
    engine.on_restarted()
    clock.set(at("15:20:59"))
    assert engine.restarts_in_window() == 1
    clock.set(at("15:21"))
    assert engine.restarts_in_window() == 0  # 10 minutes after the restart (not after the decision)


def test_failure_while_slot_still_held_degrades_and_one_after_restarts(clock):
    options = RecoveryOptions.from_mapping({"max-retries": 1, "max-retries-window": "10m", "backoff-reset-after": "1h"})
    engine = started(options, clock)
    clock.set(at("15:00:10"))
    engine.on_failure(UNAVAILABLE)  # restart at 15:00:11, holds its slot until 15:10:11
    clock.set(at("15:00:11"))
    engine.on_restarted()
    clock.set(at("15:10:11"))
    assert engine.on_failure(UNAVAILABLE).restart

    other = started(options, FakeClock(at("15:00")))
    other.clock.set(at("15:00:10"))
    other.on_failure(UNAVAILABLE)
    other.clock.set(at("15:00:11"))
    other.on_restarted()
    other.clock.set(at("15:10:10"))
    assert other.on_failure(UNAVAILABLE).action == "degrade"


def test_unlimited_retries_never_degrade_on_transient_errors(clock):
    engine = started(RecoveryOptions(), clock)
    for _ in range(200):
        decision = engine.on_failure(TimeoutError("read timed out"))
        assert decision.restart
        clock.advance(decision.delay_seconds)
        engine.on_restarted()
    assert decision.delay_seconds == 600
    assert len(engine.state.window) <= 2  # expired restarts are dropped: the state stays small


def test_max_retries_zero_degrades_on_the_first_error(clock):
    engine = started(RecoveryOptions(max_retries=0), clock)
    decision = engine.on_failure(ConnectionRefusedError("connection refused"))
    assert decision.action == "degrade"
    assert not decision.classification.fatal  # a transient error, yet recovery is disabled
    assert "disabled" in decision.reason
    assert engine.state.pipeline_state is PipelineState.DEGRADED


# --- fatal errors ---------------------------------------------------------------------------------------------


def test_fatal_error_goes_straight_from_running_to_degraded(clock):
    engine = started(RecoveryOptions(), clock)
    decision = engine.on_failure(FatalError("schema changed"))
    assert decision.action == "degrade" and decision.classification.fatal
    assert [(e.event, e.pipeline_state.value) for e in engine.state.audit] == [
        ("started", "running"),
        ("failed", "running"),
        ("degraded", "degraded"),
    ]
    assert engine.state.degraded_reason.startswith("fatal error")


def test_fatal_error_while_recovering_degrades(clock):
    engine = started(RecoveryOptions(), clock)
    engine.on_failure(UNAVAILABLE)
    clock.advance(1)
    engine.on_restarted()
    clock.advance(5)
    decision = engine.on_failure(ProcessorError("field.set failed on record 17"))
    assert decision.action == "degrade" and decision.classification.code == 2200
    states = [e.pipeline_state.value for e in engine.state.audit]
    assert states[-3:] == ["recovering", "recovering", "degraded"]


# --- backoff reset ---------------------------------------------------------------------------------------------


def _fail_and_restart(engine: RecoveryEngine, clock: FakeClock, times: int) -> list[Decision]:
    decisions = []
    for _ in range(times):
        decision = engine.on_failure(UNAVAILABLE)
        decisions.append(decision)
        clock.advance(decision.delay_seconds)
        engine.on_restarted()
    return decisions


def test_first_record_end_to_end_after_restart_recovers_and_resets_backoff(clock):
    engine = started(RecoveryOptions(), clock)
    assert [d.delay_seconds for d in _fail_and_restart(engine, clock, 3)] == [1, 2, 4]
    engine.on_progress(0)  # nothing written yet: still recovering
    assert engine.state.pipeline_state is PipelineState.RECOVERING
    clock.advance(3)
    engine.on_progress(5)
    assert engine.state.pipeline_state is PipelineState.RUNNING
    assert engine.state.attempt == 0
    assert events(engine)[-2:] == ["recovered", "backoff-reset"]
    clock.advance(1)
    assert engine.on_failure(UNAVAILABLE).delay_seconds == 1


def test_reset_does_not_clear_the_retry_window(clock):
    options = RecoveryOptions.from_mapping({"max-retries": 2, "max-retries-window": "10m"})
    engine = started(options, clock)
    _fail_and_restart(engine, clock, 2)
    clock.advance(10)
    engine.on_progress(1)  # backoff reset...
    assert engine.state.attempt == 0
    clock.advance(10)
    decision = engine.on_failure(UNAVAILABLE)  # ...but 2 restarts are still within 10 minutes
    assert decision.action == "degrade"
    assert decision.attempt == 1


def test_healthy_period_resets_backoff_through_check_healthy(clock):
    engine = started(RecoveryOptions(), clock)
    _fail_and_restart(engine, clock, 3)
    restarted_at = clock.now()
    clock.advance(299)
    assert not engine.check_healthy()
    assert engine.state.pipeline_state is PipelineState.RECOVERING
    clock.advance(1)
    assert engine.check_healthy()
    assert engine.state.pipeline_state is PipelineState.RUNNING and engine.state.attempt == 0
    recovered = [e for e in engine.state.audit if e.event == "recovered"]
    assert recovered[0].at == restarted_at + timedelta(minutes=5)
    assert not engine.check_healthy()  # nothing left to do


def test_healthy_period_applies_at_the_next_failure_without_check(clock):
    engine = started(RecoveryOptions(backoff_reset_after="2m"), clock)
    _fail_and_restart(engine, clock, 4)
    restarted_at = clock.now()
    clock.advance(3600)
    decision = engine.on_failure(UNAVAILABLE)
    assert (decision.attempt, decision.delay_seconds) == (1, 1)
    reset = next(e for e in engine.state.audit if e.event == "backoff-reset")
    assert reset.at == restarted_at + timedelta(minutes=2)  # dated when it became true
    times = [e.at for e in engine.state.audit]
    assert times == sorted(times)


def test_reset_on_first_record_can_be_turned_off(clock):
    engine = started(RecoveryOptions(reset_on_first_record=False), clock)
    _fail_and_restart(engine, clock, 3)
    engine.on_progress(10)
    assert engine.state.pipeline_state is PipelineState.RUNNING  # it is visibly working again
    assert engine.state.attempt == 3  # but the backoff waits for the healthy period
    clock.advance(300)
    assert engine.check_healthy() and engine.state.attempt == 0


def test_strimzi_resets_after_running_for_the_current_backoff_interval(clock):
    engine = started(RecoveryOptions(policy="strimzi"), clock)
    decisions = _fail_and_restart(engine, clock, 4)
    assert [d.delay_seconds / 60 for d in decisions] == [0, 2, 6, 12]
    engine.on_progress(100)  # Strimzi knows nothing of records: the counter stays
    assert engine.state.pipeline_state is PipelineState.RUNNING
    assert engine.state.attempt == 4
    clock.advance(20 * 60 - 1)  # restarted 4 times: it must run 20 minutes
    assert not engine.check_healthy()
    assert engine.state.attempt == 4
    clock.advance(1)
    assert engine.check_healthy()
    assert engine.state.attempt == 0
    assert engine.on_failure(UNAVAILABLE).delay_seconds == 0  # immediate again


def test_strimzi_failure_before_interval_continues_the_sequence(clock):
    engine = started(RecoveryOptions(policy="strimzi"), clock)
    _fail_and_restart(engine, clock, 2)  # 0, 2m
    clock.advance(5 * 60)  # restarted twice: needs 6 minutes
    assert engine.on_failure(UNAVAILABLE).delay_seconds == 6 * 60


def test_strimzi_max_restarts_7_degrades_after_the_7th_restart_however_far_apart(clock):
    # Strimzi proposal 055: "After 7th restart, the connector will not be automatically restarted anymore."
    # The delays pass the 5m max-retries-window from the 4th restart on: a windowed count would never reach 7.
    engine = started(RecoveryOptions(policy="strimzi", max_retries=7), clock)
    decisions = []
    for _ in range(7):
        clock.advance(30)  # fails 30 s after each (re)start
        decision = engine.on_failure(UNAVAILABLE)
        assert decision.restart
        decisions.append(decision)
        clock.advance(decision.delay_seconds)
        engine.on_restarted()
    assert [d.restarts_counted for d in decisions] == [1, 2, 3, 4, 5, 6, 7]
    assert {d.counted for d in decisions} == {"since the last reset"}
    assert engine.restarts_in_window() < 7  # the window alone would have allowed more
    clock.advance(30)
    last = engine.on_failure(UNAVAILABLE)
    assert last.action == "degrade" and last.restarts_counted == 7
    assert last.reason.startswith("max-retries reached: 7 restarts since the last reset")
    assert engine.state.pipeline_state is PipelineState.DEGRADED


def test_strimzi_count_starts_again_after_the_reset_interval(clock):
    engine = started(RecoveryOptions(policy="strimzi", max_retries=2), clock)
    _fail_and_restart(engine, clock, 2)
    engine.on_progress(5)  # a record does not reset Strimzi's count
    clock.advance(6 * 60)  # restarted twice: 6 minutes without failure reset the count
    again = engine.on_failure(UNAVAILABLE)
    assert again.restart and again.restarts_counted == 1 and again.delay_seconds == 0


def test_strimzi_without_reset_interval_keeps_counting(clock):
    engine = started(RecoveryOptions(policy="strimzi", max_retries=2), clock)
    _fail_and_restart(engine, clock, 2)
    clock.advance(6 * 60 - 1)
    assert engine.on_failure(UNAVAILABLE).action == "degrade"


def test_strimzi_ignores_max_retries_window_even_zero():
    assert RecoveryOptions(policy="strimzi", max_retries=3, max_retries_window=0).max_retries == 3
    with pytest.raises(ValueError, match="max-retries-window"):
        RecoveryOptions(policy="exponential", max_retries=3, max_retries_window=0)


def test_exponential_keeps_the_windowed_count_after_a_backoff_reset(clock):
    # Conduit's reading, unchanged: the reset shortens the delay but the window still holds the restarts.
    engine = started(RecoveryOptions(max_retries=2, max_retries_window="10m"), clock)
    _fail_and_restart(engine, clock, 2)
    engine.on_progress(1)  # first record: backoff reset
    assert engine.state.attempt == 0
    clock.advance(60)
    decision = engine.on_failure(UNAVAILABLE)
    assert decision.action == "degrade" and decision.restarts_counted == 2
    assert "within max-retries-window 10m" in decision.reason


def test_decision_round_trip_keeps_the_action_enum_and_reads_old_dicts(clock):
    engine = started(RecoveryOptions(policy="strimzi", max_retries=3), clock)
    decision = engine.on_failure(UNAVAILABLE)
    data = json.loads(json.dumps(decision.to_dict()))
    assert data["action"] == "restart" and data["restarts_counted"] == 1
    assert Decision.from_dict(data) == decision
    old = dict(data)
    old["restarts_in_window"] = old.pop("restarts_counted")
    del old["counted"]
    assert Decision.from_dict(old).restarts_counted == 1


def test_crash_loop_guard_is_off_by_default_as_in_conduit(clock):
    engine = started(RecoveryOptions(), clock)
    for _ in range(20):
        decision = engine.on_failure("java.io.IOException: disk quota exceeded on /data/part-0001")
        assert decision.restart
        clock.advance(decision.delay_seconds)
        engine.on_restarted()


def test_crash_loop_guard_degrades_on_the_same_error_n_runs_in_a_row(clock):
    engine = started(RecoveryOptions(crash_loop_limit=3), clock)
    for run in range(2):
        decision = engine.on_failure(f"java.io.IOException: disk quota exceeded on /data/part-000{run}")  # digits vary
        assert decision.restart
        clock.advance(decision.delay_seconds)
        engine.on_restarted()
    third = engine.on_failure("java.io.IOException: disk quota exceeded on /data/part-0009")
    assert third.action == "degrade"
    assert third.reason == "crash loop: the same error ended 3 runs in a row with no record processed (crash-loop-limit 3)"


def test_crash_loop_count_restarts_on_progress_or_another_error(clock):
    engine = started(RecoveryOptions(crash_loop_limit=2), clock)

    def fail(error: str, records: int = 0) -> str:
        decision = engine.on_failure(error, records=records)
        if decision.restart:
            clock.advance(decision.delay_seconds)
            engine.on_restarted()
        return decision.action

    assert fail("source unavailable") == "restart"
    assert fail("source unavailable", records=5) == "restart"  # that run processed records: not a loop
    assert fail("connection refused") == "restart"  # another error
    engine.on_progress(1)  # records end to end after the restart
    assert fail("connection refused") == "restart"
    assert fail("connection refused") == "degrade"
    engine.start()  # a person restarts it: counting starts again
    assert fail("connection refused") == "restart"


def test_crash_loop_limit_is_validated():
    with pytest.raises(ValueError, match="crash-loop-limit"):
        RecoveryOptions(crash_loop_limit=1)
    assert RecoveryOptions.from_mapping({"crash-loop-limit": "5"}).crash_loop_limit == 5


# --- states and transitions -------------------------------------------------------------------------------------


def test_full_lifecycle_audit_log(clock):
    engine = RecoveryEngine(RecoveryOptions(), clock=clock)
    assert engine.state.pipeline_state is PipelineState.STOPPED
    engine.start()
    clock.advance(60)
    decision = engine.on_failure(ConnectionResetError("connection reset by peer"))
    clock.advance(decision.delay_seconds)
    engine.on_restarted()
    clock.advance(5)
    engine.on_progress(3)
    clock.advance(60)
    engine.on_success()
    log = [(e.event, e.pipeline_state.value) for e in engine.state.audit]
    assert log == [
        ("started", "running"),
        ("failed", "running"),
        ("restart-scheduled", "recovering"),
        ("restarted", "recovering"),
        ("recovered", "running"),
        ("backoff-reset", "running"),
        ("stopped", "stopped"),
    ]
    failed = engine.state.audit[1]
    assert failed.details["classification"]["code"] == 1100
    assert failed.details["classification"]["fatal"] is False
    scheduled = engine.state.audit[2].details
    assert (scheduled["attempt"], scheduled["delay_seconds"]) == (1, 1.0)
    assert engine.state.audit[-1].message == "job finished"
    assert all(e.at.tzinfo is not None for e in engine.state.audit)


def test_stop_during_backoff_gives_the_window_slot_back(clock):
    engine = started(RecoveryOptions(max_retries=1), clock)
    engine.on_failure(UNAVAILABLE)
    engine.stop("user stopped the DAG run")
    assert engine.state.pipeline_state is PipelineState.STOPPED
    assert engine.state.window == [] and engine.state.attempt == 0
    assert engine.state.audit[-1].message == "user stopped the DAG run"
    engine.stop()  # stopping twice is harmless
    assert events(engine).count("stopped") == 1


def test_start_again_after_degraded_keeps_the_window(clock):
    engine = started(RecoveryOptions(max_retries=1, max_retries_window="10m"), clock)
    engine.on_failure(UNAVAILABLE)
    clock.advance(30)
    assert engine.on_failure(UNAVAILABLE).action == "degrade"
    clock.advance(30)
    engine.start()  # a user restarts the degraded pipeline by hand
    assert engine.state.pipeline_state is PipelineState.RUNNING and engine.state.attempt == 0
    assert engine.state.audit[-1].details["previous_state"] == "degraded"
    assert engine.on_failure(UNAVAILABLE).action == "degrade"  # automatic restarts still bounded


@pytest.mark.parametrize(
    "prepare, call",
    [
        (lambda e: None, lambda e: e.on_failure("x")),  # never started
        (lambda e: e.start(), lambda e: e.start()),
        (lambda e: e.start(), lambda e: e.on_restarted()),  # nothing pending
        (lambda e: (e.start(), e.on_failure(FatalError("x"))), lambda e: e.on_failure("y")),
        (lambda e: (e.start(), e.on_failure(FatalError("x"))), lambda e: e.on_success()),
    ],
    ids=["failure-before-start", "double-start", "restarted-without-decision", "failure-when-degraded", "success-when-degraded"],
)
def test_impossible_transitions_are_refused(clock, prepare, call):
    engine = RecoveryEngine(RecoveryOptions(), clock=clock)
    prepare(engine)
    with pytest.raises(InvalidTransition):
        call(engine)


def test_pipeline_state_values():
    assert [s.value for s in PipelineState] == ["running", "recovering", "degraded", "stopped"]
    assert PipelineState.RUNNING.value == "running" and PipelineState("recovering") is PipelineState.RECOVERING


# --- serialisation and resume --------------------------------------------------------------------------------------


def test_state_json_round_trip_is_exact_mid_recovery(conduit_example_2, clock):
    engine = started(conduit_example_2, clock)
    clock.set(at("15:10"))
    clock.advance(0.25)  # sub-second timestamps must survive too
    engine.on_failure(TransientError("broker down"))
    clock.advance(timedelta(milliseconds=1500))
    engine.on_restarted()
    text = engine.state.to_json()
    assert json.loads(text) == engine.state.to_dict()
    restored = RecoveryState.from_json(text)
    assert restored == engine.state
    assert restored.to_json() == text
    assert RecoveryState.from_dict(json.loads(json.dumps(engine.state.to_dict()))) == engine.state


def test_resumed_engine_decides_exactly_like_the_original(conduit_example_2):
    def run(resume_after: int | None) -> list[dict]:
        clock = FakeClock(at("15:00"))
        engine = started(conduit_example_2, clock)
        decisions = []
        for index, failure in enumerate(("15:10", "15:11", "15:15")):
            if resume_after is not None and index == resume_after:
                # e.g. the triggerer restarted: only the JSON survived
                engine = RecoveryEngine(conduit_example_2, clock=clock, state=RecoveryState.from_json(engine.state.to_json()))
            clock.set(at(failure))
            decisions.append(engine.on_failure(UNAVAILABLE).to_dict())
        return decisions

    assert run(None) == run(1) == run(2)


def test_decision_and_audit_event_round_trip(clock):
    engine = started(RecoveryOptions(), clock)
    decision = engine.on_failure(UNAVAILABLE)
    assert Decision.from_dict(json.loads(json.dumps(decision.to_dict()))) == decision
    for event in engine.state.audit:
        assert AuditEvent.from_dict(json.loads(json.dumps(event.to_dict()))) == event


def test_jitter_is_reproducible_across_resume(clock):
    options = RecoveryOptions(jitter=0.3, jitter_seed=5)
    engine = started(options, clock)
    first = engine.on_failure(UNAVAILABLE).delay_seconds
    clock.advance(first)
    resumed = RecoveryEngine(options, clock=clock, state=RecoveryState.from_json(engine.state.to_json()))
    second = resumed.on_failure(UNAVAILABLE).delay_seconds

    again = started(options, FakeClock(at("15:00")))
    assert again.on_failure(UNAVAILABLE).delay_seconds == first
    again.clock.advance(first)
    assert again.on_failure(UNAVAILABLE).delay_seconds == second
    assert 0.7 * 2 <= second <= 1.3 * 2


def test_system_clock_is_utc():
    now = SystemClock().now()
    assert now.utcoffset() == timedelta(0)


def test_fake_clock_only_moves_forward():
    clock = FakeClock(at("15:00"))
    clock.advance(timedelta(minutes=1))
    clock.advance(30)
    assert clock.now() == at("15:01:30")
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.set(at("15:00"))


def test_window_slot_is_held_from_the_restart_not_the_decision(clock):
    """A long backoff followed by a reset must not let a third restart into the same window."""
    options = RecoveryOptions(min_delay=1, backoff_factor=100, max_delay=100, max_retries=2, max_retries_window=60)
    engine = started(options, clock)
    start = clock.now()

    def moment(seconds: float) -> None:
        clock.set(start + timedelta(seconds=seconds))

    moment(0)
    assert engine.on_failure(UNAVAILABLE).delay_seconds == 1  # restart at 1s
    moment(2)
    assert engine.on_failure(UNAVAILABLE).delay_seconds == 100  # decided at 2s, restart at 102s
    moment(103)
    engine.on_progress(1)  # backoff reset; the restart at 102s still holds its slot until 162s
    moment(104)
    assert engine.on_failure(UNAVAILABLE).restart  # restart at 105s: 2 in the window
    moment(106)
    decision = engine.on_failure(UNAVAILABLE)
    assert decision.action == "degrade" and decision.restarts_counted == 2


@pytest.mark.parametrize("policy", ["exponential", "fixed", "strimzi"])
def test_stop_during_backoff_gives_the_restart_back_to_either_budget(clock, policy):
    engine = started(RecoveryOptions(policy=policy, max_retries=1), clock)
    assert engine.on_failure(UNAVAILABLE).restart
    assert engine.restarts_counted() == 1
    engine.stop("user stopped the DAG run")
    assert engine.restarts_counted() == 0
    engine.start()
    assert engine.on_failure(UNAVAILABLE).restart  # the cancelled restart did not spend the budget


@pytest.mark.parametrize("policy", ["exponential", "fixed", "strimzi"])
def test_max_retries_1_refuses_the_second_restart_with_either_budget(clock, policy):
    engine = started(RecoveryOptions(policy=policy, max_retries=1), clock)
    first = engine.on_failure(UNAVAILABLE)
    clock.advance(first.delay_seconds)
    engine.on_restarted()
    clock.advance(10)
    second = engine.on_failure(UNAVAILABLE)
    assert second.action == "degrade" and second.restarts_counted == 1
    assert second.reason.startswith(f"max-retries reached: 1 restarts {engine.budget.counted_text()}")
