"""A pipeline's run supervisor: submit, watch, decide, restart or degrade, with what must survive between runs.

The operator (across deferrals, Airflow retries, worker and triggerer restarts) and ``airflow-conduit run``
(in one process) drive the same supervisor: ``submit`` a run through the driver's backend, feed it each
``WatchEvent`` (``on_event``), and do the ``Step`` it returns (watch again, wait and restart, stop, fail).
Decisions come from the recovery engine (``airflow_conduit.recovery``); this module keeps the bookkeeping
(submissions, the job being watched) and writes the plain timeline lines the task log and the CLI print.

``carry()`` is the JSON that is persisted (``runs.store.RunStore``: the task state store and
``STATE_DIR/recovery.json``).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from airflow_conduit.recovery.actions import Action
from airflow_conduit.recovery.clock import Clock, SystemClock
from airflow_conduit.recovery.durations import format_duration
from airflow_conduit.recovery.engine import Decision, RecoveryEngine
from airflow_conduit.recovery.options import RecoveryOptions
from airflow_conduit.recovery.state import PipelineState, RecoveryState
from airflow_conduit.runs.events import Failure, WatchEvent
from airflow_conduit.runs.handles import JobHandle, optional_handle
from airflow_conduit.runs.status import WatchStatus
from airflow_conduit.runs.totals import totals_text

CARRY_VERSION = 1
FINISHED_STATES = (PipelineState.DEGRADED, PipelineState.STOPPED)  # a new try starts such a pipeline afresh


def safe_run_id(text: str) -> str:
    """A run id usable as a folder name (Airflow run ids hold ':' and '+')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120] or "run"


def unique_run_prefix(readable: str) -> str:
    """``<readable>-<8 hex>``: the run id prefix of one supervisor, unique whoever submits and whenever.

    Two supervisors on one state dir (two CLI runs in the same second, two DAGs with the same run id and
    task id) must never share a run folder: its exit file and its processes' marker are the run's.
    """
    return f"{safe_run_id(readable)[:110]}-{uuid.uuid4().hex[:8]}"


def records_written(report: dict | None) -> int:
    """Records written end to end: the smallest per-destination total (each record goes to every destination)."""
    written = ((report or {}).get("totals") or {}).get("written") or {}
    return min(written.values()) if written else 0


@dataclass
class Step:
    """What the driver does next (watch, wait and restart, stop, fail), with the timeline lines to print.

    ``decision`` and ``error`` are the engine's decision on a failed run and the failure it read (``RESTART``,
    ``DEGRADE``); ``event`` is the event the step answers (for a refused submission, the failure built for it);
    ``handle`` the job to watch (``WATCH``) or the last job submitted (the next submission's ``previous``).
    """

    action: Action
    lines: list[str]
    decision: Decision | None = None
    error: Failure | None = None
    event: WatchEvent | None = None
    handle: JobHandle | None = None
    refusal: BaseException | None = None  # why the submission this step answers was refused

    @property
    def delay_seconds(self) -> float:
        return float(self.decision.delay_seconds) if self.decision is not None else 0.0

    @property
    def refused_by_lease(self) -> bool:
        return self.event is not None and self.event.refused_by_lease


Refusals = tuple[type[BaseException], ...] | Callable[[], tuple[type[BaseException], ...]]


def _classes(refusals: Refusals) -> tuple[type[BaseException], ...]:
    return refusals() if callable(refusals) else refusals


class RunSupervisor:
    """The recovery engine of one pipeline plus its runs: which was submitted last, which is watched."""

    def __init__(
        self,
        options: RecoveryOptions,
        *,
        state: RecoveryState | None = None,
        submissions: int = 0,
        current: JobHandle | None = None,
        run_prefix: str = "run",
        pipeline_id: str | None = None,
        clock: Clock | None = None,
    ):
        self.options = options
        self.engine = RecoveryEngine(options, clock=clock or SystemClock(), state=state)
        self.submissions = submissions
        self.current = current  # handle of the job being watched (or whose outcome is not handled yet)
        self.run_prefix = run_prefix
        self.pipeline_id = pipeline_id
        if state is None:
            self.engine.start()

    # -- travel ----------------------------------------------------------------------------------

    def carry(self) -> dict[str, Any]:
        return {
            "version": CARRY_VERSION,
            "options": self.options.to_dict(),
            "recovery": json.loads(self.engine.state.to_json()),
            "submissions": self.submissions,
            "current": self.current.to_dict() if self.current else None,
            "run_prefix": self.run_prefix,
            "pipeline_id": self.pipeline_id,
        }

    @classmethod
    def from_carry(cls, carry: dict[str, Any], options: RecoveryOptions | None = None,
                   clock: Clock | None = None) -> "RunSupervisor":
        """Resume; ``options`` (freshly resolved) win over the carried ones, the window and audit log are kept."""
        state = RecoveryState.from_json(json.dumps(carry["recovery"]))
        return cls(
            options or RecoveryOptions.from_mapping(carry["options"]),
            state=state,
            submissions=int(carry.get("submissions", 0)),
            current=optional_handle(carry.get("current")),
            run_prefix=carry.get("run_prefix") or "run",
            pipeline_id=carry.get("pipeline_id"),
            clock=clock,
        )

    # -- reading the engine ----------------------------------------------------------------------

    @property
    def pipeline_state(self) -> PipelineState:
        return self.engine.state.pipeline_state

    @property
    def degraded(self) -> bool:
        return self.pipeline_state is PipelineState.DEGRADED

    @property
    def finished(self) -> bool:
        """Degraded or stopped: another try starts the pipeline again with a fresh retry budget."""
        return self.pipeline_state in FINISHED_STATES

    def audit(self, last: int | None = None) -> list[dict[str, Any]]:
        events = [event.to_dict() for event in self.engine.state.audit]
        return events[-last:] if last else events

    @property
    def awaiting_first_record(self) -> bool:
        """Recovering and the restarted job has not written a record end to end yet (the watcher reports it)."""
        return self.pipeline_state is PipelineState.RECOVERING and self.engine.state.records_since_restart == 0

    def recovery_record(self, owner: dict[str, Any], event: WatchEvent | dict | None = None,
                        carry: dict | None = None) -> dict:
        """The ``STATE_DIR/recovery.json`` record of this supervisor (``StateDir.write_recovery``)."""
        return {
            "pipeline_id": self.pipeline_id,
            "pipeline_state": str(self.pipeline_state),
            "owner": owner,
            "submissions": self.submissions,
            "current": self.current.to_dict() if self.current else None,
            "last_event": event.digest() if isinstance(event, WatchEvent) else event,
            "carry": carry if carry is not None else self.carry(),
        }

    def next_run_id(self) -> str:
        self.submissions += 1
        return self.run_id(self.submissions)

    def run_id(self, submission: int) -> str:
        return f"{self.run_prefix}-s{submission:02d}"

    def run_ids(self) -> list[str]:
        """The run ids of every submission of this supervisor, first to last."""
        return [self.run_id(n) for n in range(1, self.submissions + 1)]

    # -- driving ---------------------------------------------------------------------------------

    def submit(self, submit: Callable[[str], JobHandle], refusals: Refusals, lease_refusals: Refusals = (),
               previous: JobHandle | None = None) -> Step:
        """Submit the next run with ``submit(run_id)`` (it returns the job handle); say what to do next.

        A submission that cannot happen now (one of ``refusals``: the previous driver not confirmed gone,
        the state dir's lease held, the cluster unreachable) is a failure like any other: the engine
        restarts or degrades (``on_event`` with the failure it is turned into); one that says it is not
        ``transient`` is raised. ``previous`` is the last job submitted: it stays the one a later
        submission must see gone. ``refusals`` and ``lease_refusals`` may be given as functions returning
        the classes, asked only once a submission raised (classes whose module is costly to import).
        """
        run_id = self.next_run_id()
        try:
            handle = submit(run_id)
        except Exception as exc:
            if not isinstance(exc, _classes(refusals)):
                raise
            if getattr(exc, "transient", True) is False:  # e.g. a connection that became unusable: not retried
                raise
            event = WatchEvent.submission_refused(run_id, exc, by_lease=isinstance(exc, _classes(lease_refusals)))
            step = self.on_event(event)
            step.lines.insert(0, f"run {run_id} could not be submitted: {exc}")
            step.handle = previous
            step.refusal = exc
            return step
        self.current = handle
        return Step(Action.WATCH, [self.submitted_line(handle)], handle=handle)

    def restarted(self) -> None:
        """The backoff delay is over: the next submission is the restart the engine scheduled."""
        if self.engine.state.pending_restart is not None:
            self.engine.on_restarted()

    def stop(self, reason: str) -> None:
        """The pipeline was stopped (by a user, or because another driver holds its state dir)."""
        self.current = None
        self.engine.stop(reason)

    def on_event(self, event: WatchEvent) -> Step:
        """Feed one watch event to the recovery engine; say what to do next and what to print."""
        handle = event.handle or self.current
        run_id = event.run_id
        report = event.report
        written = records_written(report)

        if event.status is WatchStatus.RUNNING:  # first record end to end after a restart
            before = self.pipeline_state
            self.engine.on_progress(written)
            if before is PipelineState.RECOVERING and self.pipeline_state is PipelineState.RUNNING:
                line = f"recovered: run {run_id} wrote its first records ({self.counts_line(report)})"
            else:
                line = f"running: run {run_id}, {self.counts_line(report)}"
            self.current = handle  # still running: the job to resume watching
            return Step(Action.WATCH, [line], event=event, handle=handle)

        self.current = None  # this run's outcome is handled here
        if event.status is WatchStatus.STOPPED:  # asked to stop (its report has a stop_reason): not a success, not a failure
            reason = (report or {}).get("stop_reason") or "stopped on request"
            self.engine.stop(f"run {run_id} stopped: {reason}")
            return Step(Action.DONE, [f"stopped: run {run_id} ({reason}), {self.counts_line(report)}"], event=event, handle=handle)
        if event.status is WatchStatus.SUCCEEDED:
            lines = []
            was_recovering = self.pipeline_state is PipelineState.RECOVERING
            if written:
                self.engine.on_progress(written)
            if was_recovering:
                lines.append(f"recovered: run {run_id} succeeded")
            self.engine.on_success()
            lines.append(f"succeeded: run {run_id}, {self.counts_line(report)}")
            return Step(Action.DONE, lines, event=event, handle=handle)

        error = event.failure
        decision = self.engine.on_failure(error, exit_code=event.exit_code, records=written)
        lines = [f"run {run_id} {self.failed_line(decision)} (exit {event.exit_code}, {self.counts_line(report)})",
                 self.error_line(decision, error)]
        if decision.action == Action.DEGRADE:
            lines.append(self.degraded_line(decision))
            return Step(Action.DEGRADE, lines, decision, error, event=event, handle=handle)
        lines.append(self.restart_line(decision))
        return Step(Action.RESTART, lines, decision, error, event=event, handle=handle)

    def run_summary(self, step: Step, state_dir: str) -> dict[str, Any]:
        """What a finished pipeline task returns (its XCom): how it ended, its counts, its audit log."""
        report = step.event.report if step.event else None
        return {
            "pipeline_id": self.pipeline_id or (report or {}).get("pipeline_id"),
            "status": str(step.event.status),  # succeeded, or stopped (asked to stop; see stop_reason)
            "stop_reason": (report or {}).get("stop_reason"),
            "pipeline_state": str(self.pipeline_state),
            "run_id": step.event.run_id,
            "submissions": self.submissions,
            "report": report,
            "state_dir": state_dir,
            "audit_log": self.audit(),
        }

    def degraded_message(self, step: Step, last_events: int = 5) -> str:
        """The error text of a degraded pipeline: reason, error, classification, last audit events."""
        return degraded_message(self, step.decision, step.error, last_events)

    # -- timeline lines --------------------------------------------------------------------------

    @staticmethod
    def submitted_line(handle: JobHandle) -> str:
        return f"submitted: run {handle.run_id} ({handle.backend} backend, {handle.where})"

    @staticmethod
    def failed_line(decision: Decision) -> str:
        c = decision.classification
        prefix = f"{c.kind} {c.code}, "  # the reason starts with what this line already says
        why = c.reason[len(prefix):] if c.reason.startswith(prefix) else c.reason
        return f"failed: classified as {c.kind}, code {c.code} ({why})"

    @staticmethod
    def error_line(decision: Decision, error: Failure) -> str:
        """The failure's own words (what to check, with its advice), under the line with its code."""
        return f"  error: {error_message(decision, error)}"

    @staticmethod
    def restart_line(decision: Decision) -> str:
        budget = "unlimited" if decision.max_retries < 0 else str(decision.max_retries)
        counted = decision.counted or "within max-retries-window"
        return (
            f"restarting in {format_duration(decision.delay_seconds)} "
            f"(restart {decision.restarts_counted} of {budget} {counted})"
        )

    @staticmethod
    def degraded_line(decision: Decision) -> str:
        return f"degraded because {decision.reason}"

    @staticmethod
    def counts_line(report: dict | None) -> str:
        return totals_text(report.get("totals") or {}) if report else "no run report"


def degraded_message(supervisor: RunSupervisor, decision: Decision, error: Failure, last_events: int = 5) -> str:
    """The error text of a degraded pipeline: reason, error, classification, last audit events."""
    c = decision.classification
    lines = [
        f"pipeline degraded: {decision.reason}",
        f"error: {error_message(decision, error)}",
        f"classification: {c.kind}, code {c.code} ({c.reason})",
        "last audit events:",
    ]
    for event in supervisor.audit(last_events):
        lines.append(f"  {event['at']} {event['event']} -> {event['pipeline_state']}: {event['message']}")
    return "\n".join(lines)


def error_message(decision: Decision, error: Failure | None) -> str:
    """A failure's message: the structured error's (with its advice), else the classifier's summary of the log
    text (the Java root cause, not the last stack frame)."""
    c = decision.classification
    if isinstance(error, dict):
        return str(error.get("message") or c.message or "")
    tail = [line for line in str(error or "").strip().splitlines() if line.strip()]
    return c.message or (tail[-1] if tail else "")
