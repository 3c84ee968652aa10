"""The data behind each page, computed from a task instance's records and its state directory.

No Airflow import: ``task`` is a ``records.PipelineTask`` (or anything with the same attributes).
Budget numbers come from the recovery engine and its retry budget (``RecoveryEngine.budget``), so the
page and the engine can never disagree about what counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import TaskInstanceState

from airflow_conduit.plugins.state_view import (
    Redactor,
    RunView,
    batch_rows,
    dlq_count_since,
    dlq_folder,
    dlq_groups,
    dlq_rows,
    dlq_rows_from_kafka,
    dlq_rows_from_logs,
    kafka_dlq_address,
    last_successful_batch,
    runs_of,
)
from airflow_conduit.recovery.clock import FakeClock, parse_iso
from airflow_conduit.recovery.state import AuditEventType, PipelineState
from airflow_conduit.runs.status import RunStatus

LIVE_TI_STATES = frozenset({TaskInstanceState.RUNNING, TaskInstanceState.DEFERRED})
DLQ_WINDOW_HOURS = 24
OVERVIEW_NEWEST_RUNS = 20  # besides the last 24 h, the overview reads this many newest runs (for the last batch)


@dataclass
class Budget:
    used: int  # restarts counted against max-retries now, as the retry budget counts them
    max_retries: int  # -1 = unlimited
    window_seconds: float
    oldest_frees_at: datetime | None  # window counting only
    next_restart_at: datetime | None
    attempt: int
    counted: str  # "within max-retries-window 5m" or "since the last reset" (the retry budget's words)
    windowed: bool


def budget_of(recovery: dict[str, Any] | None, now: datetime) -> Budget | None:
    """Restarts counted against max-retries now, when the oldest window slot frees, the pending restart."""
    if not recovery:
        return None
    from airflow_conduit.recovery import RecoveryEngine, RecoveryState

    try:
        state = RecoveryState.from_dict(recovery)
    except (ValueError, KeyError, TypeError):
        return None
    engine = RecoveryEngine(state.options, clock=FakeClock(now), state=state)
    budget = engine.budget
    pending = state.pending_restart
    return Budget(
        used=engine.restarts_counted(now),
        max_retries=state.options.max_retries,
        window_seconds=state.options.max_retries_window,
        oldest_frees_at=budget.slot_frees_at(state, now),
        next_restart_at=pending.restart_at if pending is not None and state.pipeline_state is PipelineState.RECOVERING else None,
        attempt=state.attempt,
        counted=budget.counted_text(),
        windowed=budget.windowed,
    )


@dataclass
class LastError:
    at: str
    kind: str  # transient | fatal
    code: Any
    reason: str
    message: str


def last_error_of(audit: list[dict[str, Any]], redactor: Redactor) -> LastError | None:
    for event in reversed(audit):
        if event.get("event") == AuditEventType.FAILED:
            c = (event.get("details") or {}).get("classification") or {}
            return LastError(
                at=str(event.get("at") or ""),
                kind="fatal" if c.get("fatal") else "transient",
                code=c.get("code"),
                reason=redactor.text(c.get("reason") or ""),
                message=redactor.text(c.get("message") or event.get("message") or ""),
            )
    return None


@dataclass
class PipelinePage:
    """Everything the task instance view shows."""

    task: Any
    now: datetime
    state: str
    live: bool
    runs: list[RunView]
    current_run: RunView | None
    budget: Budget | None
    audit: list[dict[str, Any]]
    last_error: LastError | None
    destinations: list[str]
    batches: list[dict[str, Any]]
    dlq_location: str
    dlq_groups: list = field(default_factory=list)
    dlq_total: int = 0
    dlq_scan_truncated: bool = False
    dlq_readable: bool = False


def _now() -> datetime:
    return datetime.now(timezone.utc)


def is_live(task: Any) -> bool:
    """The task is running or deferred and its current run's report says starting or running."""
    if task.ti_state not in LIVE_TI_STATES:
        return False
    runs = runs_of(task.state_dir, task.run_prefixes)
    current = next((r for r in runs if r.run_id == task.job.get("run_id")), runs[-1] if runs else None)
    return current is not None and current.status in (RunStatus.STARTING, RunStatus.RUNNING)


def pipeline_page(task: Any, redactor: Redactor, *, now: datetime | None = None, dlq_samples: int = 3) -> PipelinePage:
    now = now or _now()
    runs = runs_of(task.state_dir, task.run_prefixes)
    job_run = task.job.get("run_id")
    current = next((r for r in runs if r.run_id == job_run), runs[-1] if runs else None)
    live = (task.ti_state in LIVE_TI_STATES) and current is not None and current.status in (RunStatus.STARTING, RunStatus.RUNNING)
    destinations, batches = batch_rows(runs)
    location = str(task.xcom.get("conduit_dlq") or "")
    folder = dlq_folder(location)
    from_log = location.startswith("log:")
    kafka = kafka_dlq_address(location) is not None
    if from_log:
        rows, truncated = dlq_rows_from_logs(runs)
    elif kafka:
        rows, truncated = dlq_rows_from_kafka(location, {r.run_id for r in runs})
    else:
        rows, truncated = dlq_rows(folder, {r.run_id for r in runs})
    return PipelinePage(
        task=task,
        now=now,
        state=task.pipeline_state or "unknown",
        live=live,
        runs=runs,
        current_run=current,
        budget=budget_of(task.recovery, now),
        audit=task.audit,
        last_error=last_error_of(task.audit, redactor),
        destinations=destinations,
        batches=batches,
        dlq_location=redactor.text(location),
        dlq_groups=dlq_groups(rows, redactor, samples=dlq_samples),
        dlq_total=len(rows),
        dlq_scan_truncated=truncated,
        dlq_readable=folder is not None or from_log or (kafka and bool(rows)),
    )


@dataclass
class OverviewRow:
    task: Any
    state: str
    last_error: LastError | None
    dlq_24h: int
    last_batch: dict[str, Any] | None
    updated: str


def overview_row(task: Any, redactor: Redactor, *, now: datetime | None = None) -> OverviewRow:
    """One line of the Pipelines page. DLQ counts cover the whole state dir (every run of the pipeline)."""
    now = now or _now()
    since = now - timedelta(hours=DLQ_WINDOW_HOURS)
    every_run = runs_of(task.state_dir, _all_prefixes(task), changed_since=since.timestamp(), newest=OVERVIEW_NEWEST_RUNS)
    audit = task.audit
    return OverviewRow(
        task=task,
        state=task.pipeline_state or "unknown",
        last_error=last_error_of(audit, redactor),
        dlq_24h=dlq_count_since(every_run, since),
        last_batch=last_successful_batch(every_run),
        updated=str(audit[-1].get("at")) if audit else "",
    )


def _all_prefixes(task: Any) -> list[str]:
    """Every run in the state dir ("" matches all ``*-sNN`` folders): a state dir belongs to one pipeline."""
    return [""] if task.state_dir is not None else []


def age_text(moment: Any, now: datetime) -> str:
    """'3 min ago' / 'in 12 s' for an ISO time or datetime; '' when unknown."""
    at = moment if isinstance(moment, datetime) else parse_iso(moment)
    if at is None:
        return ""
    seconds = (now - at).total_seconds()
    ahead = seconds < 0
    seconds = abs(seconds)
    if seconds < 90:
        text = f"{seconds:.0f} s"
    elif seconds < 90 * 60:
        text = f"{seconds / 60:.0f} min"
    elif seconds < 36 * 3600:
        text = f"{seconds / 3600:.1f} h"
    else:
        text = f"{seconds / 86400:.1f} d"
    return f"in {text}" if ahead else f"{text} ago"
