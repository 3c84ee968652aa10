"""A pipeline's recovery session: the recovery engine plus what must survive between job runs.

The operator (across deferrals, Airflow retries, worker and triggerer
restarts) and ``airflow-conduit run`` (in one process) drive the same
session: submit, watch, ask the engine, restart or degrade. Decisions come
from ``airflow_conduit.recovery``; this module keeps the bookkeeping and
writes the plain timeline lines the task log and the CLI print.

``carry()`` is the JSON that is persisted (the
``task_state_store`` and ``STATE_DIR/recovery.json``).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from airflow_conduit.recovery.totals import totals_text
from airflow_conduit.recovery.actions import Action
from airflow_conduit.recovery.clock import SystemClock
from airflow_conduit.recovery.engine import RecoveryEngine
from airflow_conduit.recovery.options import RecoveryOptions
from airflow_conduit.recovery.state import PipelineState, RecoveryState
from airflow_conduit.recovery.durations import format_duration

CARRY_VERSION = 1


def safe_run_id(text: str) -> str:
    """A run id usable as a folder name (Airflow run ids hold ':' and '+')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120] or "run"


def unique_run_prefix(readable: str) -> str:
    """``<readable>-<8 hex>``: the run id prefix of one session, unique whoever submits and whenever.

    Two sessions on one state dir (two CLI runs in the same second, two DAGs with the same run id and
    task id) must never share a run folder: its exit file and its processes' marker are the run's.
    """
    return f"{safe_run_id(readable)[:110]}-{uuid.uuid4().hex[:8]}"


class RecoverySession:
    def __init__(
        self,
        options: RecoveryOptions,
        *,
        state: RecoveryState | None = None,
        submissions: int = 0,
        current: dict | None = None,
        run_prefix: str = "run",
        pipeline_id: str | None = None,
        clock: Any = None,
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
            "current": self.current,
            "run_prefix": self.run_prefix,
            "pipeline_id": self.pipeline_id,
        }

    @classmethod
    def from_carry(cls, carry: dict[str, Any], options: RecoveryOptions | None = None, clock: Any = None) -> "RecoverySession":
        """Resume; ``options`` (freshly resolved) win over the carried ones, the window and audit log are kept."""
        state = RecoveryState.from_json(json.dumps(carry["recovery"]))
        return cls(
            options or RecoveryOptions.from_mapping(carry["options"]),
            state=state,
            submissions=int(carry.get("submissions", 0)),
            current=carry.get("current"),
            run_prefix=carry.get("run_prefix") or "run",
            pipeline_id=carry.get("pipeline_id"),
            clock=clock,
        )

    # -- reading the engine ----------------------------------------------------------------------

    @property
    def pipeline_state(self) -> str:
        return str(self.engine.state.pipeline_state)

    @property
    def degraded(self) -> bool:
        return self.engine.state.pipeline_state == PipelineState.DEGRADED

    def audit(self, last: int | None = None) -> list[dict[str, Any]]:
        events = [event.to_dict() for event in self.engine.state.audit]
        return events[-last:] if last else events

    @property
    def awaiting_first_record(self) -> bool:
        """Recovering and the restarted job has not written a record end to end yet (the watcher reports it)."""
        return self.engine.state.pipeline_state is PipelineState.RECOVERING and self.engine.state.records_since_restart == 0

    def recovery_record(self, owner: dict[str, Any], event: dict | None = None, carry: dict | None = None) -> dict:
        """The ``STATE_DIR/recovery.json`` record of this session (``StateDir.write_recovery``)."""
        return {
            "pipeline_id": self.pipeline_id,
            "pipeline_state": self.pipeline_state,
            "owner": owner,
            "submissions": self.submissions,
            "current": self.current,
            "last_event": event_digest(event),
            "carry": carry if carry is not None else self.carry(),
        }

    def next_run_id(self) -> str:
        self.submissions += 1
        return self.run_id(self.submissions)

    def run_id(self, submission: int) -> str:
        return f"{self.run_prefix}-s{submission:02d}"

    def run_ids(self) -> list[str]:
        """The run ids of every submission of this session, first to last."""
        return [self.run_id(n) for n in range(1, self.submissions + 1)]

    # -- timeline lines --------------------------------------------------------------------------

    @staticmethod
    def submitted_line(handle: dict) -> str:
        where = handle.get("driver_id") or f"pid {handle.get('pid')}"
        return f"submitted: run {handle['run_id']} ({handle['launcher']} launcher, {where})"

    @staticmethod
    def failed_line(decision: Any) -> str:
        c = decision.classification
        prefix = f"{c.kind} {c.code}, "  # the reason starts with what this line already says
        why = c.reason[len(prefix):] if c.reason.startswith(prefix) else c.reason
        return f"failed: classified as {c.kind}, code {c.code} ({why})"

    @staticmethod
    def restart_line(decision: Any) -> str:
        budget = "unlimited" if decision.max_retries < 0 else str(decision.max_retries)
        counted = decision.counted or "within max-retries-window"
        return (
            f"restarting in {format_duration(decision.delay_seconds)} "
            f"(restart {decision.restarts_counted} of {budget} {counted})"
        )

    @staticmethod
    def degraded_line(decision: Any) -> str:
        return f"degraded because {decision.reason}"

    @staticmethod
    def counts_line(report: dict | None) -> str:
        return totals_text(report.get("totals") or {}) if report else "no run report"


def event_digest(event: dict | None) -> dict | None:
    """A watcher event without its log tail, carry and handle (recovery.json stays small and readable)."""
    if not event:
        return None
    return {k: v for k, v in event.items() if k not in ("carry", "stderr_tail", "handle")}


def records_written(report: dict | None) -> int:
    """Records written end to end: the smallest per-destination total (each record goes to every destination)."""
    written = ((report or {}).get("totals") or {}).get("written") or {}
    return min(written.values()) if written else 0


class Step:
    """What to do after one watcher event (the operator defers, the CLI loops or sleeps), with the timeline lines."""

    def __init__(self, action: Action, lines: list[str], decision: Any = None, error: Any = None):
        self.action = action
        self.lines = lines
        self.decision = decision
        self.error = error


def apply_event(session: RecoverySession, event: dict[str, Any]) -> Step:
    """Feed one SparkPipelineTrigger event to the recovery engine; say what to do next.

    The operator's execute_complete and ``airflow-conduit run`` both go through here, so they make
    the same decisions (which come from the engine) and tell the same story.
    """
    handle = event.get("handle") or session.current or {}
    run_id = handle.get("run_id", "?")
    status = event.get("status")
    report = event.get("report")
    written = records_written(report)

    if status == "running":  # first record end to end after a restart
        before = session.engine.state.pipeline_state
        session.engine.on_progress(written)
        if before is PipelineState.RECOVERING and session.engine.state.pipeline_state is PipelineState.RUNNING:
            line = f"recovered: run {run_id} wrote its first records ({session.counts_line(report)})"
        else:
            line = f"running: run {run_id}, {session.counts_line(report)}"
        return Step(Action.WATCH, [line])

    session.current = None  # this run's outcome is handled here
    if status == "stopped":  # the job was asked to stop (its report has a stop_reason): not a success, not a failure
        reason = (report or {}).get("stop_reason") or "stopped on request"
        session.engine.stop(f"run {run_id} stopped: {reason}")
        return Step(Action.DONE, [f"stopped: run {run_id} ({reason}), {session.counts_line(report)}"])
    if status == "succeeded":
        lines = []
        was_recovering = session.engine.state.pipeline_state is PipelineState.RECOVERING
        if written:
            session.engine.on_progress(written)
        if was_recovering:
            lines.append(f"recovered: run {run_id} succeeded")
        session.engine.on_success()
        lines.append(f"succeeded: run {run_id}, {session.counts_line(report)}")
        return Step(Action.DONE, lines)

    error = event.get("error") or event.get("stderr_tail") or f"job ended with status {status!r} and no error"
    decision = session.engine.on_failure(error, exit_code=event.get("exit_code"), records=written)
    lines = [f"run {run_id} {session.failed_line(decision)} (exit {event.get('exit_code')}, {session.counts_line(report)})"]
    if decision.action == Action.DEGRADE:
        lines.append(session.degraded_line(decision))
        return Step(Action.DEGRADE, lines, decision, error)
    lines.append(session.restart_line(decision))
    return Step(Action.RESTART, lines, decision, error)


def degraded_message(session: RecoverySession, decision: Any, error: Any, last_events: int = 5) -> str:
    """The error text of a degraded pipeline: reason, error, classification, last audit events."""
    c = decision.classification
    if isinstance(error, dict):
        message = error.get("message") or ""
    else:  # log text: the classifier's summary (the Java root cause, not the last stack frame)
        tail = [line for line in str(error or "").strip().splitlines() if line.strip()]
        message = c.message or (tail[-1] if tail else "")
    lines = [
        f"pipeline degraded: {decision.reason}",
        f"error: {message}",
        f"classification: {c.kind}, code {c.code} ({c.reason})",
        "last audit events:",
    ]
    for event in session.audit(last_events):
        lines.append(f"  {event['at']} {event['event']} -> {event['pipeline_state']}: {event['message']}")
    return "\n".join(lines)
