"""Property tests: the window guarantee, delay bounds and exact JSON round trips hold for any history."""

from __future__ import annotations

import json
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from recovery_helpers import at

from airflow_conduit.recovery import (
    FakeClock,
    FatalError,
    InvalidTransition,
    PipelineState,
    RecoveryEngine,
    RecoveryOptions,
    RecoveryState,
    format_duration,
    parse_duration,
)
from airflow_conduit.recovery.options import policy_for
from airflow_conduit.recovery.policies import jittered_delay

durations = st.integers(min_value=0, max_value=3 * 3600).map(float) | st.floats(min_value=0, max_value=600, allow_nan=False)


@st.composite
def recovery_options(draw, limited: bool | None = None, policies: tuple[str, ...] = ("exponential", "strimzi", "fixed")):
    min_delay = draw(st.sampled_from([0, 0.5, 1, 5, 30, 60]))
    max_delay = min_delay + draw(st.sampled_from([0, 1, 10, 60, 600, 3600]))
    max_retries = draw(st.integers(1, 5)) if limited else draw(st.integers(-1, 5))
    return RecoveryOptions(
        min_delay=min_delay,
        max_delay=max_delay,
        backoff_factor=draw(st.sampled_from([1, 1.5, 2, 3, 10])),
        max_retries=max_retries,
        max_retries_window=draw(st.sampled_from([1, 30, 60, 300, 600, 3600])),
        policy=draw(st.sampled_from(policies)),
        backoff_reset_after=draw(st.sampled_from([0, 10, 60, 300])),
        reset_on_first_record=draw(st.booleans()),
        jitter=draw(st.sampled_from([0, 0, 0.1, 0.5, 1])),
        jitter_seed=draw(st.integers(0, 1000)),
        crash_loop_limit=draw(st.sampled_from([-1, -1, 2, 3])),
    )


steps = st.lists(
    st.tuples(
        st.sampled_from(["fail", "fail", "fail", "fatal", "restart", "restart", "progress", "check", "start", "success"]),
        st.floats(min_value=0, max_value=900, allow_nan=False),
    ),
    max_size=40,
)


def drive(engine: RecoveryEngine, clock: FakeClock, history: list[tuple[str, float]]) -> None:
    """Apply a random history; steps that make no sense in the current state are skipped, like a real caller would."""
    for action, wait in history:
        clock.advance(wait)
        state = engine.state.pipeline_state
        try:
            if action in ("fail", "fatal"):
                pending = engine.state.pending_restart
                if pending is not None and clock.now() < pending.restart_at:
                    continue  # the job is not running during the backoff
                engine.on_failure(FatalError("bad") if action == "fatal" else "connection refused")
            elif action == "restart":
                pending = engine.state.pending_restart
                if pending is not None:
                    clock.set(max(clock.now(), pending.restart_at))
                    engine.on_restarted()
            elif action == "progress":
                engine.on_progress(3)
            elif action == "check":
                engine.check_healthy()
            elif action == "start" and state in (PipelineState.DEGRADED, PipelineState.STOPPED):
                engine.start()
            elif action == "success" and engine.state.pending_restart is None:
                engine.on_success()
        except InvalidTransition:
            pass  # e.g. a failure reported for a degraded pipeline


def restarts(engine: RecoveryEngine) -> list[tuple]:
    """(decided_at, restarted_at) of every restart that happened or is scheduled."""
    out, decided = [], None
    for event in engine.state.audit:
        if event.event == "restart-scheduled":
            decided = event
        elif event.event == "restarted":
            out.append((decided.at, event.at))
            decided = None
    if decided is not None:
        out.append((decided.at, decided.at + timedelta(seconds=decided.details["delay_seconds"])))
    return out


@settings(max_examples=300, deadline=None)
@given(options=recovery_options(limited=True, policies=("exponential", "fixed")), history=steps)
def test_no_window_ever_holds_more_than_max_retries_restarts(options, history):
    """Conduit's guarantee, for the policies that count restarts in max-retries-window."""
    clock = FakeClock(at("15:00"))
    engine = RecoveryEngine(options, clock=clock)
    engine.start()
    drive(engine, clock, history)
    window = timedelta(seconds=options.max_retries_window)
    happened = restarts(engine)
    for times in ([r for _, r in happened], [d for d, _ in happened]):  # restart times, decision times
        times.sort()
        for i, first in enumerate(times):
            in_window = [t for t in times[i:] if t < first + window]
            assert len(in_window) <= options.max_retries, (options, times)


@settings(max_examples=300, deadline=None)
@given(options=recovery_options(limited=True, policies=("strimzi",)), history=steps)
def test_strimzi_never_restarts_more_than_max_retries_times_between_resets(options, history):
    """Strimzi's reading: at most max-retries restarts since the last reset (or start), however far apart."""
    clock = FakeClock(at("15:00"))
    engine = RecoveryEngine(options, clock=clock)
    engine.start()
    drive(engine, clock, history)
    since_reset = 0
    for event in sorted(engine.state.audit, key=lambda e: e.at):  # stable: same-time events keep their order
        if event.event in ("started", "backoff-reset"):
            since_reset = 0
        elif event.event == "restart-scheduled":
            since_reset += 1
            assert since_reset <= options.max_retries, (options, history)
            assert event.details["restarts_counted"] == since_reset


@settings(max_examples=200, deadline=None)
@given(options=recovery_options(), attempts=st.lists(st.integers(1, 10_000), min_size=1, max_size=20), draw=st.integers(0, 10**6))
def test_every_exponential_delay_lies_within_min_and_max_delay(options, attempts, draw):
    options = options.with_changes(policy="exponential")
    policy = policy_for(options)
    for attempt in attempts:
        assert options.min_delay <= policy.delay(attempt) <= options.max_delay
        jittered = jittered_delay(policy, attempt, jitter=options.jitter, seed=options.jitter_seed, draw=draw)
        assert options.min_delay <= jittered <= options.max_delay


@settings(max_examples=100, deadline=None)
@given(options=recovery_options(), history=steps)
def test_engine_decisions_stay_within_delay_bounds(options, history):
    clock = FakeClock(at("15:00"))
    engine = RecoveryEngine(options.with_changes(policy="exponential"), clock=clock)
    engine.start()
    drive(engine, clock, history)
    for event in engine.state.audit:
        if event.event == "restart-scheduled":
            assert options.min_delay <= event.details["delay_seconds"] <= options.max_delay


@settings(max_examples=200, deadline=None)
@given(options=recovery_options(), history=steps, split=st.integers(0, 40))
def test_state_json_round_trip_is_exact_and_resumes_identically(options, history, split):
    clock = FakeClock(at("15:00"))
    engine = RecoveryEngine(options, clock=clock)
    engine.start()
    drive(engine, clock, history[:split])
    text = engine.state.to_json()
    restored = RecoveryState.from_json(text)
    assert restored == engine.state
    assert restored.to_json() == text
    assert RecoveryState.from_dict(json.loads(json.dumps(engine.state.to_dict()))) == engine.state

    # A resumed engine (only the JSON survived) continues exactly like the original.
    twin_clock = FakeClock(clock.now())
    twin = RecoveryEngine(options, clock=twin_clock, state=restored)
    drive(engine, clock, history[split:])
    drive(twin, twin_clock, history[split:])
    assert twin.state.to_json() == engine.state.to_json()


@settings(max_examples=300, deadline=None)
@given(seconds=durations)
def test_duration_text_round_trip_is_exact(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@settings(max_examples=100, deadline=None)
@given(options=recovery_options())
def test_options_round_trip_is_exact(options):
    assert RecoveryOptions.from_mapping(json.loads(json.dumps(options.to_dict()))) == options
