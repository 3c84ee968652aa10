"""Retry budgets as strategies: what ``max-retries`` counts, one small class per way of counting.

The backoff policy (``policies.py``) says how long to wait; the budget says whether one more restart
is allowed. A budget answers the engine's questions from the restart records and the attempt counter
of ``RecoveryState``, so it adds nothing to the persisted state:

- ``record_restart(state, record)``: a restart was decided;
- ``counted(state, at)`` and ``spent(state, at)``: how many restarts count against ``max-retries``,
  and whether another one is refused;
- ``reset_note``: what a backoff reset (a healthy run, or the first record) does to the count;
- ``counted_text()`` and ``spent_reason(...)``: its own words for the audit log, the task log and the view;
- ``windowed`` and ``slot_frees_at(state, at)``: for readers that show a window's slots.

Budgets:

- ``WindowBudget`` (Conduit): restarts holding a slot of the sliding ``max-retries-window``. A restart
  holds its slot from the moment it is decided until ``max-retries-window`` after it happened; a
  backoff reset keeps the window.
- ``SinceResetBudget`` (Strimzi proposal 055): restarts since the attempt counter was last reset
  ("After 7th restart, the connector will not be automatically restarted anymore"), with no window.

A budget is a frozen dataclass of plain values; ``recovery.options.budget_for`` builds the one the
chosen policy names (``RestartPolicy.budget``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, ClassVar, Iterable, Mapping, Protocol

from airflow_conduit.recovery.clock import clock_text
from airflow_conduit.recovery.durations import format_duration

INFINITE_RETRIES = -1  # max-retries -1: the budget is never spent


class RestartTimes(Protocol):
    """What a budget reads of a ``state.RestartRecord`` (the state module sits above this one)."""

    decided_at: datetime
    restart_at: datetime


class BudgetState(Protocol):
    """What a budget reads and changes of a ``state.RecoveryState``."""

    window: list[Any]  # the restart records, oldest first
    attempt: int  # restarts since the last backoff reset


def restarts_within(records: Iterable[RestartTimes], at: datetime, window_seconds: float) -> list[RestartTimes]:
    """The restarts holding a slot of a ``window_seconds`` window at ``at``: decided, and not yet past the window."""
    window = timedelta(seconds=window_seconds)
    return [r for r in records if r.decided_at <= at < r.restart_at + window]


@dataclass(frozen=True)
class RetryBudget(ABC):
    """What the engine asks a budget; subclasses say what counts and how to tell it."""

    name: ClassVar[str]
    windowed: ClassVar[bool]  # a sliding window bounds the count (the view shows its slots)

    max_retries: int  # -1 unlimited; 0 (recovery disabled) is the engine's concern, before any budget question

    def record_restart(self, state: BudgetState, record: RestartTimes) -> None:
        """A restart was decided: it is kept among the restart records (the pending one until confirmed)."""
        state.window.append(record)

    @abstractmethod
    def counted(self, state: BudgetState, at: datetime) -> int:
        """Restarts counted against ``max-retries`` at ``at``."""

    def spent(self, state: BudgetState, at: datetime) -> bool:
        """True when one more restart at ``at`` would exceed ``max-retries``."""
        return self.max_retries != INFINITE_RETRIES and self.counted(state, at) >= self.max_retries

    @property
    @abstractmethod
    def reset_note(self) -> str:
        """What a backoff reset does to the count, for the audit line of the reset."""

    @abstractmethod
    def counted_text(self) -> str:
        """How restarts are counted, for reasons and timeline lines ("within max-retries-window 5m")."""

    @abstractmethod
    def spent_reason(self, state: BudgetState, counted: int, *, policy_name: str, reset_period: float) -> str:
        """Why a restart is refused: the budget is spent."""

    def slot_frees_at(self, state: BudgetState, at: datetime) -> datetime | None:
        """When the oldest counted restart stops counting on its own (None: only a reset frees the count)."""
        return None


@dataclass(frozen=True)
class WindowBudget(RetryBudget):
    """Conduit: at most ``max-retries`` restarts inside any ``max-retries-window``; a backoff reset keeps the window."""

    name: ClassVar[str] = "window"
    windowed: ClassVar[bool] = True

    max_retries_window: float = 300.0

    def counted(self, state: BudgetState, at: datetime) -> int:
        return len(restarts_within(state.window, at, self.max_retries_window))

    @property
    def reset_note(self) -> str:
        return "the retry window is kept"

    def counted_text(self) -> str:
        return f"within max-retries-window {format_duration(self.max_retries_window)}"

    def spent_reason(self, state: BudgetState, counted: int, *, policy_name: str, reset_period: float) -> str:
        held = ", ".join(clock_text(r.restart_at) for r in state.window)
        return f"max-retries reached: {counted} restarts {self.counted_text()} (at {held})"

    def slot_frees_at(self, state: BudgetState, at: datetime) -> datetime | None:
        window = timedelta(seconds=self.max_retries_window)
        return min((r.restart_at + window for r in restarts_within(state.window, at, self.max_retries_window)), default=None)


@dataclass(frozen=True)
class SinceResetBudget(RetryBudget):
    """Strimzi: at most ``max-retries`` restarts since the attempt counter was last reset, however far apart."""

    name: ClassVar[str] = "since-reset"
    windowed: ClassVar[bool] = False

    def counted(self, state: BudgetState, at: datetime) -> int:
        return state.attempt  # restarts since the last reset: the counter a reset sets back to 0

    @property
    def reset_note(self) -> str:
        return "max-retries counts from 0 again"

    def counted_text(self) -> str:
        return "since the last reset"

    def spent_reason(self, state: BudgetState, counted: int, *, policy_name: str, reset_period: float) -> str:
        return (
            f"max-retries reached: {counted} restarts {self.counted_text()} "
            f"({policy_name}: the count resets only after running {format_duration(reset_period)} without failure)"
        )


def build_budget(cls: type[RetryBudget], values: Mapping[str, Any]) -> RetryBudget:
    """A ``cls`` budget, its fields taken from ``values`` (plain option values by field name)."""
    return cls(**{f.name: values[f.name] for f in fields(cls)})
