"""Preview a recovery policy: feed failure times to the engine on a fake clock and get the timeline back.

Used by ``airflow-conduit recovery simulate`` and by docs/simulator.md's worked examples.
Restarts happen exactly when the engine scheduled them; a failure given for a moment
the pipeline is not running (waiting for a restart, degraded, stopped) is reported as ignored.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_conduit.compat import StrEnum
from airflow_conduit.recovery.clock import FakeClock, as_utc, clock_text, parse_iso
from airflow_conduit.recovery.durations import format_duration, parse_duration
from airflow_conduit.recovery.engine import Decision, RecoveryEngine
from airflow_conduit.recovery.errors import FatalError
from airflow_conduit.recovery.options import RecoveryOptions, budget_for
from airflow_conduit.recovery.state import AuditEventType, PipelineState

SIMULATION_DATE = datetime(2024, 1, 1, tzinfo=timezone.utc)
DEFAULT_ERROR = "source system unavailable"
DEFAULT_FATAL_ERROR = "simulated fatal error"


class SimEventKind(StrEnum):
    """What a simulated event does to the engine."""

    FAILURE = "failure"  # the job fails (on_failure)
    RECORD = "record"  # a record is processed end to end (on_progress)
    CHECK = "check"  # the healthy-period rule is applied (check_healthy)
    STOP = "stop"  # a user stops the pipeline


FAILURE = SimEventKind.FAILURE
RECORD = SimEventKind.RECORD
CHECK = SimEventKind.CHECK
STOP = SimEventKind.STOP

# The seed documents' examples, as simulator presets.
SCENARIOS: dict[str, dict[str, Any]] = {
    "conduit-1": {
        "title": "Conduit recovery doc, Example 2, Scenario 1: maximum number of retries reached",
        "options": {"max-retries": 2, "max-retries-window": "10m"},
        "start": "15:00",
        "failures": ["15:10", "15:11", "15:15"],
    },
    "conduit-2": {
        "title": "Conduit recovery doc, Example 2, Scenario 2: number of retries reset after some time",
        "options": {"max-retries": 2, "max-retries-window": "10m"},
        "start": "15:00",
        "failures": ["15:10", "15:11", "15:35"],
    },
    "conduit-example-1": {
        "title": "Conduit recovery doc, Example 1: max-delay 10s, the job fails right after every restart",
        "options": {"max-delay": "10s"},
        "start": "15:00",
        "consecutive": 7,
        "run_for": "0s",
    },
    "strimzi": {
        "title": "Strimzi proposal 055: the connector fails 30s after every restart",
        "options": {"policy": "strimzi"},
        "start": "15:00",
        "consecutive": 10,
        "run_for": "30s",
    },
    "strimzi-max-restarts": {
        "title": "Strimzi proposal 055 with maxRestarts 7: after the 7th restart the connector is not restarted anymore",
        "options": {"policy": "strimzi", "max-retries": 7},
        "start": "15:00",
        "consecutive": 8,
        "run_for": "30s",
    },
}


@dataclass(frozen=True)
class SimEvent:
    at: datetime
    kind: SimEventKind
    fatal: bool = False
    error: str | None = None


@dataclass(frozen=True)
class TimelineRow:
    at: datetime
    event: str
    state: str
    attempt: int | None
    delay_seconds: float | None
    restarts_counted: int | None  # restarts counted against max-retries (the policy says how)
    detail: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["at"] = self.at.isoformat()
        return data


@dataclass
class SimulationResult:
    options: RecoveryOptions
    start: datetime
    rows: list[TimelineRow] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    final_state: PipelineState = PipelineState.STOPPED
    engine: RecoveryEngine | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "options": self.options.to_dict(),
            "start": self.start.isoformat(),
            "timeline": [row.to_dict() for row in self.rows],
            "decisions": [d.to_dict() for d in self.decisions],
            "final_state": self.final_state.value,
            "delays_seconds": [d.delay_seconds for d in self.decisions if d.restart],
        }

    def table(self) -> str:
        return format_table(self)


def parse_time(token: str, start: datetime) -> datetime:
    """``15:10`` / ``15:10:30`` (on the simulation day), ``+10m`` (after ``start``), or an ISO datetime."""
    text = token.strip()
    if text.startswith("+"):
        return start + timedelta(seconds=parse_duration(text[1:], option=f"time {token!r}"))
    match = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d+)?))?", text)
    if match:
        hours, minutes = int(match.group(1)), int(match.group(2))
        seconds = float(match.group(3) or 0)
        if hours > 23 or minutes > 59 or seconds >= 60:
            raise ValueError(f"time {token!r}: not a clock time")
        return start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(
            hours=hours, minutes=minutes, seconds=seconds
        )
    try:
        return parse_iso(text)
    except ValueError:
        raise ValueError(f"time {token!r}: use HH:MM[:SS], +DURATION (e.g. +10m) or an ISO datetime") from None


def simulate(
    options: RecoveryOptions,
    *,
    start: datetime,
    events: list[SimEvent] = (),
    consecutive: int = 0,
    run_for: float = 0.0,
    until: datetime | None = None,
    error: str = DEFAULT_ERROR,
) -> SimulationResult:
    """Run the engine over ``events`` (or ``consecutive`` failures, each ``run_for`` after a restart)."""
    start = as_utc(start)
    clock = FakeClock(start)
    engine = RecoveryEngine(options, clock=clock)
    result = SimulationResult(options=options, start=start, engine=engine)
    ignored: list[tuple[datetime, str]] = []
    engine.start()

    def restart_if_due(moment: datetime | None) -> None:
        pending = engine.state.pending_restart
        if pending is not None and (moment is None or pending.restart_at <= moment):
            clock.set(max(pending.restart_at, clock.now()))
            engine.on_restarted()

    def fail(event: SimEvent) -> None:
        exc_or_text: Any = FatalError(event.error or DEFAULT_FATAL_ERROR) if event.fatal else (event.error or error)
        result.decisions.append(engine.on_failure(exc_or_text))

    if consecutive:
        if events:
            raise ValueError("consecutive failures cannot be combined with timed events (failures, records, checks)")
        next_failure = start + timedelta(seconds=run_for)
        for _ in range(consecutive):
            clock.set(next_failure)
            fail(SimEvent(next_failure, FAILURE))
            pending = engine.state.pending_restart
            if pending is None:
                break
            restart_if_due(None)
            next_failure = pending.restart_at + timedelta(seconds=run_for)
    for event in sorted(events, key=lambda e: e.at):
        if event.at < start:
            raise ValueError(f"event at {event.at.isoformat()} is before the start ({start.isoformat()})")
        restart_if_due(event.at)
        clock.set(max(event.at, clock.now()))
        state = engine.state.pipeline_state
        if state in (PipelineState.DEGRADED, PipelineState.STOPPED):
            ignored.append((event.at, f"{event.kind} ignored: the pipeline is {state.value}"))
            continue
        pending = engine.state.pending_restart
        if pending is not None and event.kind in (FAILURE, RECORD):
            ignored.append(
                (event.at, f"{event.kind} ignored: the job is not running (restart scheduled at {clock_text(pending.restart_at)})")
            )
            continue
        if event.kind == FAILURE:
            fail(event)
        elif event.kind == RECORD:
            engine.on_progress(1)
        elif event.kind == CHECK:
            engine.check_healthy()
        elif event.kind == STOP:
            engine.stop("stopped by user")
        else:
            raise ValueError(f"unknown simulation event {event.kind!r}")
    restart_if_due(until)
    if until is not None and until > clock.now():
        clock.set(until)
        engine.check_healthy()
    result.final_state = engine.state.pipeline_state
    result.rows = _timeline(engine, ignored, end=clock.now())
    return result


def _timeline(engine: RecoveryEngine, ignored: list[tuple[datetime, str]], end: datetime) -> list[TimelineRow]:
    options = engine.options
    window = timedelta(seconds=options.max_retries_window)
    restarts: list[tuple[datetime, datetime]] = []  # (decided_at, restarted_at)
    decided: datetime | None = None
    terminal_at: datetime | None = None
    for event in engine.state.audit:
        if event.event is AuditEventType.RESTART_SCHEDULED:
            decided = event.at
        elif event.event is AuditEventType.RESTARTED and decided is not None:
            restarts.append((decided, event.at))
        elif event.event in (AuditEventType.DEGRADED, AuditEventType.STOPPED) and terminal_at is None:
            terminal_at = event.at

    def held(moment: datetime) -> int:
        return sum(1 for d, r in restarts if d <= moment < r + window)

    rows: list[tuple[datetime, int, int, TimelineRow]] = []
    for seq, event in enumerate(engine.state.audit):
        details = event.details
        attempt = details.get("attempt")
        counted = details.get("restarts_counted")
        if event.event is AuditEventType.FAILED:
            classification = details.get("classification", {})
            detail = f"{classification.get('message') or '(no message)'} -> {classification.get('reason', '')}"
        else:
            detail = event.message
        rows.append(
            (event.at, 1, seq, TimelineRow(event.at, event.event, event.pipeline_state.value, attempt,
                                           details.get("delay_seconds"), counted, detail))
        )
    if not options.retries_unlimited and options.max_retries > 0 and engine.budget.windowed:
        for _, restarted in restarts:
            frees = restarted + window
            if frees <= end and (terminal_at is None or frees <= terminal_at):
                rows.append(
                    (frees, 0, -1, TimelineRow(frees, "window-slot-freed", _state_at(engine, frees), None, None, held(frees),
                                               f"the restart at {clock_text(restarted)} left the {format_duration(options.max_retries_window)} window"))
                )
    for at, text in ignored:
        rows.append((at, 2, 0, TimelineRow(at, "ignored", _state_at(engine, at), None, None, None, text)))
    rows.sort(key=lambda item: (item[0], item[1], item[2]))
    return [row for *_, row in rows]


def _state_at(engine: RecoveryEngine, moment: datetime) -> str:
    state = PipelineState.STOPPED.value
    for event in engine.state.audit:
        if event.at > moment:
            break
        state = event.pipeline_state.value
    return state


def format_table(result: SimulationResult) -> str:
    """A plain-text table of the timeline, for terminals and docs."""
    max_retries = result.options.max_retries
    limit = "inf" if max_retries < 0 else str(max_retries)
    same_day = all(row.at.date() == result.start.date() for row in result.rows)
    # "window": slots of max-retries-window held (Conduit); "count": restarts since the last reset (Strimzi).
    windowed = budget_for(result.options).windowed
    header = ("time", "event", "state", "attempt", "delay", "window" if windowed else "count", "detail")
    lines = []
    for row in result.rows:
        when = row.at.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
        if row.at.microsecond:
            when += f".{row.at.microsecond // 1000:03d}"
        lines.append(
            (
                when,
                row.event,
                row.state,
                "" if row.attempt is None else str(row.attempt),
                "" if row.delay_seconds is None else format_duration(row.delay_seconds),
                "" if row.restarts_counted is None else f"{row.restarts_counted}/{limit}",
                row.detail,
            )
        )
    widths = [max(len(header[i]), *(len(line[i]) for line in lines)) if lines else len(header[i]) for i in range(6)]
    def render(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells[:6])) + "  " + cells[6]
    out = [render(header), render(tuple("-" * w for w in widths) + ("-" * 6,))]
    out.extend(render(line) for line in lines)
    delays = [format_duration(d.delay_seconds) for d in result.decisions if d.restart]
    out.append("")
    out.append(f"final state: {result.final_state.value}; restart delays: {', '.join(delays) or 'none'}")
    return "\n".join(line.rstrip() for line in out)
