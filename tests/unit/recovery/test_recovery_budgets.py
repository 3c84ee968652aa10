"""Retry budgets on their own: what counts against max-retries, when it is spent, what a reset does, their words."""

from __future__ import annotations

from datetime import timedelta

import pytest
from recovery_helpers import at

from airflow_conduit.recovery import FakeClock, RecoveryEngine, RecoveryOptions, RecoveryState, RestartRecord
from airflow_conduit.recovery.budgets import SinceResetBudget, WindowBudget
from airflow_conduit.recovery.options import budget_for


def restart(budget, state: RecoveryState, clock: FakeClock, delay: float = 0.0) -> RestartRecord:
    """A restart decided now and happening ``delay`` later, as the engine records it (confirmed once it ran)."""
    record = RestartRecord(decided_at=clock.now(), restart_at=clock.now() + timedelta(seconds=delay), attempt=state.attempt + 1, delay_seconds=delay)
    state.attempt += 1
    budget.record_restart(state, record)
    record.confirmed = True
    return record


# -- WindowBudget (Conduit) ------------------------------------------------------------------------


def test_window_budget_counts_restarts_inside_the_window_and_frees_slots_as_they_leave_it():
    clock = FakeClock(at("15:00"))
    budget = WindowBudget(max_retries=2, max_retries_window=600)
    state = RecoveryState()
    first = restart(budget, state, clock, delay=1)
    clock.set(at("15:01"))
    restart(budget, state, clock, delay=2)
    assert state.window[0] is first  # the restart is kept among the state's records
    assert budget.counted(state, clock.now()) == 2
    assert budget.spent(state, clock.now())
    assert budget.slot_frees_at(state, clock.now()) == first.restart_at + timedelta(minutes=10)
    clock.set(first.restart_at + timedelta(minutes=10))  # the first restart leaves the window
    assert budget.counted(state, clock.now()) == 1
    assert not budget.spent(state, clock.now())


def test_window_budget_counts_a_restart_from_its_decision_on():
    clock = FakeClock(at("15:00"))
    budget = WindowBudget(max_retries=1, max_retries_window=60)
    state = RecoveryState()
    restart(budget, state, clock, delay=30)
    assert budget.counted(state, at("14:59")) == 0  # not decided yet
    assert budget.counted(state, at("15:00")) == 1
    assert budget.counted(state, at("15:01:29")) == 1  # held until the window after the restart itself
    assert budget.counted(state, at("15:01:30")) == 0


def test_window_budget_is_kept_by_a_backoff_reset():
    clock = FakeClock(at("15:00"))
    budget = WindowBudget(max_retries=2, max_retries_window=600)
    state = RecoveryState()
    restart(budget, state, clock)
    restart(budget, state, clock)
    state.attempt = 0  # the engine's backoff reset
    assert budget.counted(state, clock.now()) == 2 and budget.spent(state, clock.now())
    assert budget.reset_note == "the retry window is kept"


def test_window_budget_words():
    clock = FakeClock(at("15:00"))
    budget = WindowBudget(max_retries=2, max_retries_window=600)
    state = RecoveryState()
    restart(budget, state, clock)
    clock.set(at("15:01"))
    restart(budget, state, clock)
    assert budget.windowed
    assert budget.counted_text() == "within max-retries-window 10m"
    assert budget.spent_reason(state, 2, policy_name="exponential", reset_period=300) == (
        "max-retries reached: 2 restarts within max-retries-window 10m (at 15:00:00, 15:01:00)"
    )


def test_unlimited_budgets_are_never_spent():
    clock = FakeClock(at("15:00"))
    for budget in (WindowBudget(max_retries=-1, max_retries_window=3600), SinceResetBudget(max_retries=-1)):
        state = RecoveryState()
        for _ in range(50):
            restart(budget, state, clock)
        assert budget.counted(state, clock.now()) == 50
        assert not budget.spent(state, clock.now())


# -- SinceResetBudget (Strimzi) --------------------------------------------------------------------


def test_since_reset_budget_counts_restarts_however_far_apart_until_a_reset():
    clock = FakeClock(at("15:00"))
    budget = SinceResetBudget(max_retries=3)
    state = RecoveryState()
    for _ in range(3):
        restart(budget, state, clock)
        clock.advance(3600)  # far outside any window
    assert budget.counted(state, clock.now()) == 3
    assert budget.spent(state, clock.now())
    assert budget.slot_frees_at(state, clock.now()) is None  # time alone frees nothing
    state.attempt = 0  # the engine's backoff reset after a healthy run
    assert budget.counted(state, clock.now()) == 0 and not budget.spent(state, clock.now())
    assert budget.reset_note == "max-retries counts from 0 again"


def test_since_reset_budget_words():
    budget = SinceResetBudget(max_retries=7)
    state = RecoveryState(attempt=7)
    assert not budget.windowed
    assert budget.counted_text() == "since the last reset"
    assert budget.spent_reason(state, 7, policy_name="strimzi", reset_period=56 * 60) == (
        "max-retries reached: 7 restarts since the last reset "
        "(strimzi: the count resets only after running 56m without failure)"
    )


# -- built from the options; the engine asks the budget ------------------------------------------------


@pytest.mark.parametrize(
    "policy, budget_class", [("exponential", WindowBudget), ("fixed", WindowBudget), ("strimzi", SinceResetBudget)]
)
def test_each_policy_names_its_budget_and_the_engine_uses_it(policy, budget_class):
    options = RecoveryOptions(policy=policy, max_retries=2)
    assert type(budget_for(options)) is budget_class
    engine = RecoveryEngine(options, clock=FakeClock(at("15:00")))
    assert engine.budget == budget_for(options)


@pytest.mark.parametrize("policy", ["exponential", "strimzi"])
def test_the_engine_reset_line_carries_the_budget_note(policy):
    clock = FakeClock(at("15:00"))
    engine = RecoveryEngine(RecoveryOptions(policy=policy, max_retries=5, backoff_reset_after="1m"), clock=clock)
    engine.start()
    decision = engine.on_failure("source system unavailable")
    clock.advance(decision.delay_seconds)
    engine.on_restarted()
    clock.advance(3600)
    assert engine.check_healthy()
    reset = [e for e in engine.state.audit if e.event == "backoff-reset"]
    assert len(reset) == 1 and reset[0].message.endswith(f"({engine.budget.reset_note})")
    assert decision.counted == engine.budget.counted_text()
