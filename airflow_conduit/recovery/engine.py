"""The recovery engine: what to do when a pipeline fails, and what its state is.

It only decides; the Airflow operator/trigger (or the CLI runner, or the simulator)
acts: waits ``Decision.delay_seconds``, re-submits the job, and reports back with
``on_restarted``, ``on_progress``, ``on_success``. Time comes from the injected clock.

Rules (docs/recovery.md):
- fatal errors degrade at once; ``max-retries: 0`` degrades on the first error;
- otherwise a restart is allowed while the retry budget the policy names is not spent
  (``budgets.py``):
  exponential/fixed (Conduit, ``WindowBudget``): restarts holding a slot of the retry window. A
  restart holds its slot from the moment it is decided until ``max-retries-window`` after the
  restart happened (Conduit: the attempt is given back ``delay + max-retries-window`` after it was
  taken), so no window ever holds more than ``max-retries`` restarts, whether counted at decision
  or at restart time;
  strimzi (``SinceResetBudget``): restarts since the attempt counter was last reset (Strimzi:
  "After 7th restart, the connector will not be automatically restarted anymore"), no window;
- the backoff attempt counter goes back to 0 after a healthy period (``backoff-reset-after``;
  strimzi: the current backoff interval) or on the first record processed end to end after a
  restart (design doc). This reset never clears the retry window.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable

from airflow_conduit.recovery.actions import Action
from airflow_conduit.recovery.budgets import RetryBudget, restarts_within
from airflow_conduit.recovery.classify import Classification, classify
from airflow_conduit.recovery.clock import Clock, SystemClock, parse_iso
from airflow_conduit.recovery.durations import format_duration
from airflow_conduit.recovery.errors import InvalidTransition
from airflow_conduit.recovery.options import RecoveryOptions, budget_for, policy_for
from airflow_conduit.recovery.policies import RestartPolicy, jittered_delay
from airflow_conduit.recovery.rules import ClassificationRule, parse_rules
from airflow_conduit.recovery.state import (
    AUDIT_LIMIT,
    AuditEvent,
    AuditEventType,
    PipelineState,
    RecoveryState,
    RestartRecord,
)

@dataclass(frozen=True)
class Decision:
    """What to do about a failure."""

    action: Action  # Action.RESTART | Action.DEGRADE
    delay_seconds: float  # wait this long before re-submitting (0 for degrade)
    attempt: int  # backoff attempt of this restart (1 = first since the last reset); for degrade: the refused one
    classification: Classification
    restarts_counted: int  # restarts counted against max-retries (window slots or since the reset), this one included
    max_retries: int
    reason: str
    decided_at: datetime | None = None
    restart_at: datetime | None = None  # decided_at + delay, for restarts
    counted: str = ""  # how restarts are counted, e.g. "within max-retries-window 5m" or "since the last reset"

    @property
    def restart(self) -> bool:
        return self.action == Action.RESTART

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["classification"] = self.classification.to_dict()
        data["decided_at"] = None if self.decided_at is None else self.decided_at.isoformat()
        data["restart_at"] = None if self.restart_at is None else self.restart_at.isoformat()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Decision":
        values = dict(data)
        if "restarts_in_window" in values:  # written before policies counted differently
            values["restarts_counted"] = values.pop("restarts_in_window")
        values["action"] = Action(values["action"])
        values["classification"] = Classification.from_dict(values["classification"])
        for key in ("decided_at", "restart_at"):
            values[key] = parse_iso(values.get(key))
        return cls(**values)


class RecoveryEngine:
    """Decides restart or degrade for each failure, and keeps the pipeline state and audit log."""

    def __init__(
        self,
        options: RecoveryOptions | dict | None = None,
        clock: Clock | None = None,
        state: RecoveryState | dict | None = None,
        rules: Iterable[ClassificationRule | dict] | None = None,
    ):
        if isinstance(options, dict):
            options = RecoveryOptions.from_mapping(options)
        if isinstance(state, dict):
            state = RecoveryState.from_dict(state)
        if options is None:
            options = state.options if state is not None else RecoveryOptions()
        self.options = options
        self.policy: RestartPolicy = policy_for(options)
        self.budget: RetryBudget = budget_for(options)
        self.clock = clock or SystemClock()
        self.state = state if state is not None else RecoveryState()
        self.state.options = options
        # Extra rules given here are tried before the ones in the options.
        self.rules = parse_rules(list(rules)) + options.error_rules if rules is not None else options.error_rules
        if options.jitter_seed is not None and self.state.jitter_seed is None:
            self.state.jitter_seed = options.jitter_seed

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        """The pipeline is submitted for the first time (or again by a user after stopped/degraded)."""
        state = self.state
        if state.pipeline_state in (PipelineState.RUNNING, PipelineState.RECOVERING):
            raise InvalidTransition(
                f"start(): the pipeline is already {state.pipeline_state.value}; "
                "use on_restarted() after a restart decision"
            )
        now = self._now()
        previous = state.pipeline_state
        state.pipeline_state = PipelineState.RUNNING
        state.started_at = now
        state.attempt = 0
        state.last_restart_at = now  # a start is where the health period is measured from
        state.records_since_restart = 0
        state.degraded_reason = None
        state.same_failures = 0  # a person restarted it: the crash-loop count starts again
        state.last_failure_signature = None
        self._audit(AuditEventType.STARTED, "pipeline started", at=now, previous_state=previous.value)

    def on_failure(self, error: Any = None, *, exit_code: int | None = None, records: int = 0) -> Decision:
        """The job failed with ``error`` (exception, StructuredError, dict, JSON or stderr text).

        ``records``: records the failed run processed end to end (its report), for the crash-loop guard.
        """
        state = self.state
        if state.pipeline_state not in (PipelineState.RUNNING, PipelineState.RECOVERING):
            raise InvalidTransition(
                f"on_failure(): a {state.pipeline_state.value} pipeline is not running; call start() first"
            )
        now = self._now()
        self._confirm_pending_restart(now, implicit=True)
        self._apply_health(now)
        classification = classify(error, self.rules, exit_code=exit_code)
        state.total_failures += 1
        state.last_failure_at = now
        state.last_classification = classification
        self._audit(
            AuditEventType.FAILED,
            f"{classification.kind} error: {classification.message or '(no message)'}",
            at=now,
            classification=classification.to_dict(),
        )
        self._count_same_failure(classification, progressed=records > 0 or state.records_since_restart > 0)
        self._forget_old_restarts(now)
        counted = self.budget.counted(state, now)
        attempt = state.attempt + 1
        max_retries = self.options.max_retries

        if classification.fatal:
            return self._degrade(now, classification, attempt, counted, f"fatal error, no restart: {classification.reason}")
        if not self.options.recovery_enabled:
            return self._degrade(now, classification, attempt, counted, "recovery is disabled (max-retries 0)")
        limit = self.options.crash_loop_limit
        if limit > 0 and state.same_failures >= limit:
            return self._degrade(
                now, classification, attempt, counted,
                f"crash loop: the same error ended {state.same_failures} runs in a row with no record processed "
                f"(crash-loop-limit {limit})",
            )
        if self.budget.spent(state, now):
            reason = self.budget.spent_reason(
                state, counted, policy_name=self.policy.name, reset_period=self.policy.reset_period(state.attempt)
            )
            return self._degrade(now, classification, attempt, counted, reason)

        if self.options.jitter and state.jitter_seed is None:
            state.jitter_seed = random.SystemRandom().randrange(2**31)  # kept in the state: a resumed engine draws the same
        delay = jittered_delay(
            self.policy, attempt, jitter=self.options.jitter, seed=state.jitter_seed or 0, draw=state.jitter_draws
        )
        state.jitter_draws += 1
        restart_at = now + timedelta(seconds=delay)
        state.attempt = attempt
        self.budget.record_restart(
            state, RestartRecord(decided_at=now, restart_at=restart_at, attempt=attempt, delay_seconds=delay)
        )
        state.pipeline_state = PipelineState.RECOVERING
        how = self.budget.counted_text()
        budget = (
            f"{counted + 1} restart{'s' if counted else ''} {how}, max-retries unlimited"
            if self.options.retries_unlimited
            else f"{counted + 1} of {max_retries} restarts {how}"
        )
        reason = f"transient error: restart #{attempt} in {format_duration(delay)} ({budget})"
        decision = Decision(
            Action.RESTART, delay, attempt, classification, counted + 1, max_retries, reason, now, restart_at, how
        )
        self._audit(
            AuditEventType.RESTART_SCHEDULED,
            reason,
            at=now,
            attempt=attempt,
            delay_seconds=delay,
            restart_at=restart_at.isoformat(),
            restarts_counted=counted + 1,
            max_retries=max_retries,
        )
        return decision

    def on_restarted(self) -> None:
        """The job was re-submitted after a restart decision."""
        if self.state.pending_restart is None:
            raise InvalidTransition(
                f"on_restarted(): no restart is pending (pipeline is {self.state.pipeline_state.value})"
            )
        self._confirm_pending_restart(self._now(), implicit=False)

    def on_progress(self, records_written_end_to_end: int) -> None:
        """The job reports records processed end to end (written by every destination, or to the DLQ)
        since its last (re)start, as a running total. Only whether it is > 0 matters to the rules."""
        if records_written_end_to_end <= 0:
            return
        state = self.state
        if state.pipeline_state not in (PipelineState.RUNNING, PipelineState.RECOVERING):
            return
        now = self._now()
        self._confirm_pending_restart(now, implicit=True)
        self._apply_health(now)
        first = state.records_since_restart == 0
        state.records_since_restart = max(state.records_since_restart, records_written_end_to_end)
        if not first:
            return
        if state.pipeline_state is PipelineState.RECOVERING:
            self._recover(now, "first record processed end to end after the restart")
        if state.attempt and self.policy.resets_on_first_record:
            self._reset_backoff(now, "first record processed end to end after the restart")

    def check_healthy(self) -> bool:
        """Apply the healthy-period rule now; True when it changed the state (recovered or counter reset)."""
        if self.state.pipeline_state not in (PipelineState.RUNNING, PipelineState.RECOVERING):
            return False
        now = self._now()
        self._confirm_pending_restart(now, implicit=True, only_if_due=True)
        return self._apply_health(now)

    def on_success(self) -> None:
        """The job finished on its own (available-now mode): the pipeline is stopped."""
        if self.state.pipeline_state not in (PipelineState.RUNNING, PipelineState.RECOVERING):
            raise InvalidTransition(f"on_success(): a {self.state.pipeline_state.value} pipeline cannot finish")
        now = self._now()
        self._confirm_pending_restart(now, implicit=True)
        self._apply_health(now)
        self._stop(now, "job finished")

    def stop(self, reason: str = "stopped by user") -> None:
        """Stop the pipeline (user request, task killed). Stopping a stopped pipeline does nothing."""
        if self.state.pipeline_state is PipelineState.STOPPED:
            return
        now = self._now()
        if self.state.pending_restart is not None:
            self.state.window.pop()  # the scheduled restart will not happen: it does not count
            self.state.attempt = max(0, self.state.attempt - 1)
        self._stop(now, reason)

    # --- queries ----------------------------------------------------------------------------------
    @property
    def pipeline_state(self) -> PipelineState:
        return self.state.pipeline_state

    def restarts_counted(self, at: datetime | None = None) -> int:
        """Restarts counted against ``max-retries`` at ``at`` (default: now), as the retry budget counts them."""
        return self.budget.counted(self.state, at or self._now())

    def restarts_in_window(self, at: datetime | None = None) -> int:
        """Restarts holding a slot of ``max-retries-window`` at ``at`` (default: now), whatever the budget counts."""
        return len(restarts_within(self.state.window, at or self._now(), self.options.max_retries_window))

    # --- internals --------------------------------------------------------------------------------
    def _now(self) -> datetime:
        return self.clock.now()

    def _confirm_pending_restart(self, now: datetime, *, implicit: bool, only_if_due: bool = False) -> None:
        pending = self.state.pending_restart
        if pending is None:
            return
        if only_if_due and now < pending.restart_at:
            return
        # An explicit confirmation records the actual time; an implied one (a later event shows the
        # job ran again) the scheduled time, unless that is still in the future.
        at = now if not implicit else min(pending.restart_at, now)
        pending.restart_at = at
        pending.confirmed = True
        self.state.total_restarts += 1
        self.state.last_restart_at = at
        self.state.records_since_restart = 0
        self._audit(
            AuditEventType.RESTARTED,
            f"job re-submitted (restart #{pending.attempt})",
            at=at,
            attempt=pending.attempt,
            implicit=implicit,
        )

    def _apply_health(self, now: datetime) -> bool:
        """Healthy since the last restart for the reset period: recovered and/or backoff reset, dated when it became true."""
        state = self.state
        if state.pending_restart is not None or state.last_restart_at is None:
            return False
        if state.pipeline_state is not PipelineState.RECOVERING and state.attempt == 0:
            return False
        period = self.policy.reset_period(state.attempt)
        healthy_at = state.last_restart_at + timedelta(seconds=period)
        if now < healthy_at:
            return False
        why = f"ran without failure for {format_duration(period)} after the restart"
        if state.pipeline_state is PipelineState.RECOVERING:
            self._recover(healthy_at, why)
        if state.attempt:
            self._reset_backoff(healthy_at, why)
        return True

    def _recover(self, at: datetime, why: str) -> None:
        self.state.pipeline_state = PipelineState.RUNNING
        self._audit(AuditEventType.RECOVERED, f"recovered: {why}", at=at)

    def _reset_backoff(self, at: datetime, why: str) -> None:
        previous = self.state.attempt
        self.state.attempt = 0
        self._audit(
            AuditEventType.BACKOFF_RESET,
            f"backoff attempt counter reset from {previous} to 0: {why} ({self.budget.reset_note})",
            at=at,
            previous_attempt=previous,
            restarts_counted=self.restarts_counted(at),
        )

    def _count_same_failure(self, classification: Classification, *, progressed: bool) -> None:
        """Crash-loop bookkeeping: runs in a row ended by the same error (code and message, digits ignored)."""
        state = self.state
        signature = f"{classification.code}|{re.sub(r'[0-9]+', '#', classification.message or '')[:300]}"
        if not progressed and signature == state.last_failure_signature:
            state.same_failures += 1
        else:
            state.same_failures = 1
        state.last_failure_signature = signature

    def _forget_old_restarts(self, now: datetime) -> None:
        """Restart records are kept until ``max-retries-window`` after they happened (the state stays small)."""
        window = timedelta(seconds=self.options.max_retries_window)
        self.state.window = [r for r in self.state.window if not r.confirmed or r.restart_at + window > now]

    def _degrade(self, now: datetime, classification: Classification, attempt: int, counted: int, reason: str) -> Decision:
        state = self.state
        state.pipeline_state = PipelineState.DEGRADED
        state.degraded_reason = reason
        self._audit(AuditEventType.DEGRADED, reason, at=now, code=classification.code, restarts_counted=counted)
        return Decision(
            Action.DEGRADE, 0.0, attempt, classification, counted, self.options.max_retries, reason, now, None,
            self.budget.counted_text(),
        )

    def _stop(self, now: datetime, reason: str) -> None:
        self.state.pipeline_state = PipelineState.STOPPED
        self._audit(AuditEventType.STOPPED, reason, at=now)

    def _audit(self, event: AuditEventType, message: str, *, at: datetime, **details: Any) -> None:
        state = self.state
        state.audit.append(AuditEvent(at=at, event=event, pipeline_state=state.pipeline_state, message=message, details=details))
        if len(state.audit) > AUDIT_LIMIT:
            dropped = len(state.audit) - AUDIT_LIMIT
            del state.audit[:dropped]
            state.audit_dropped += dropped
