"""Recovery state: pipeline state, backoff counter, retry window and audit log, as plain JSON.

The state travels through Airflow trigger kwargs and XCom and must survive a
worker or triggerer restart, so ``RecoveryState.from_dict(s.to_dict()) == s``
holds exactly (datetimes as ISO-8601 UTC, options as Conduit strings).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_conduit.compat import StrEnum
from airflow_conduit.recovery.classify import Classification
from airflow_conduit.recovery.clock import as_utc, parse_iso
from airflow_conduit.recovery.options import RecoveryOptions

STATE_VERSION = 1
AUDIT_LIMIT = 1000  # the oldest events are dropped beyond this (counted in audit_dropped)


class PipelineState(StrEnum):
    """Conduit's pipeline states (design doc): running, recovering, degraded, stopped.

    A ``StrEnum``: each state equals its plain string, the value recovery.json and XCom carry.
    """

    RUNNING = "running"
    RECOVERING = "recovering"
    DEGRADED = "degraded"
    STOPPED = "stopped"


class AuditEventType(StrEnum):
    """What happened to the pipeline, one audit log entry each (the ``event`` of recovery.json's audit)."""

    STARTED = "started"
    FAILED = "failed"
    RESTART_SCHEDULED = "restart-scheduled"
    RESTARTED = "restarted"
    RECOVERED = "recovered"
    BACKOFF_RESET = "backoff-reset"
    DEGRADED = "degraded"
    STOPPED = "stopped"


def _time_to_json(moment: datetime | None) -> str | None:
    return None if moment is None else as_utc(moment).isoformat()


@dataclass(frozen=True)
class AuditEvent:
    """One thing that happened to the pipeline, with the state it left the pipeline in."""

    at: datetime
    event: AuditEventType
    pipeline_state: PipelineState
    message: str
    details: dict[str, Any] = field(default_factory=dict)  # JSON-safe

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": _time_to_json(self.at),
            "event": self.event.value,
            "pipeline_state": self.pipeline_state.value,
            "message": self.message,
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AuditEvent":
        return cls(
            at=parse_iso(data["at"]),
            event=AuditEventType(data["event"]),
            pipeline_state=PipelineState(data["pipeline_state"]),
            message=data.get("message", ""),
            details=dict(data.get("details") or {}),
        )


@dataclass
class RestartRecord:
    """A restart in the retry window. It holds a slot of ``max-retries`` from ``decided_at``
    until ``max-retries-window`` after ``restart_at`` (the actual restart once confirmed)."""

    decided_at: datetime
    restart_at: datetime
    attempt: int
    delay_seconds: float
    confirmed: bool = False  # the job was re-submitted (on_restarted, or implied by a later event)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decided_at": _time_to_json(self.decided_at),
            "restart_at": _time_to_json(self.restart_at),
            "attempt": self.attempt,
            "delay_seconds": self.delay_seconds,
            "confirmed": self.confirmed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RestartRecord":
        return cls(
            decided_at=parse_iso(data["decided_at"]),
            restart_at=parse_iso(data["restart_at"]),
            attempt=int(data["attempt"]),
            delay_seconds=float(data["delay_seconds"]),
            confirmed=bool(data.get("confirmed", False)),
        )


@dataclass
class RecoveryState:
    """Everything the engine needs to resume, and everything a user wants to see."""

    options: RecoveryOptions = field(default_factory=RecoveryOptions)
    pipeline_state: PipelineState = PipelineState.STOPPED
    attempt: int = 0  # restarts since the last backoff reset: drives the delay
    window: list[RestartRecord] = field(default_factory=list)  # restarts still counted by max-retries-window
    started_at: datetime | None = None
    last_restart_at: datetime | None = None  # confirmed restart the health period is measured from
    last_failure_at: datetime | None = None
    records_since_restart: int = 0
    total_failures: int = 0
    total_restarts: int = 0
    jitter_seed: int | None = None
    jitter_draws: int = 0
    last_classification: Classification | None = None
    degraded_reason: str | None = None
    same_failures: int = 0  # runs in a row ended by the same error with no record processed (crash-loop-limit)
    last_failure_signature: str | None = None
    audit: list[AuditEvent] = field(default_factory=list)
    audit_dropped: int = 0

    @property
    def pending_restart(self) -> RestartRecord | None:
        """The scheduled restart the job has not confirmed yet, if any."""
        if self.window and not self.window[-1].confirmed:
            return self.window[-1]
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "options": self.options.to_dict(),
            "pipeline_state": self.pipeline_state.value,
            "attempt": self.attempt,
            "window": [record.to_dict() for record in self.window],
            "started_at": _time_to_json(self.started_at),
            "last_restart_at": _time_to_json(self.last_restart_at),
            "last_failure_at": _time_to_json(self.last_failure_at),
            "records_since_restart": self.records_since_restart,
            "total_failures": self.total_failures,
            "total_restarts": self.total_restarts,
            "jitter_seed": self.jitter_seed,
            "jitter_draws": self.jitter_draws,
            "last_classification": None if self.last_classification is None else self.last_classification.to_dict(),
            "degraded_reason": self.degraded_reason,
            "same_failures": self.same_failures,
            "last_failure_signature": self.last_failure_signature,
            "audit": [event.to_dict() for event in self.audit],
            "audit_dropped": self.audit_dropped,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RecoveryState":
        version = data.get("version", STATE_VERSION)
        if version != STATE_VERSION:
            raise ValueError(f"recovery state version {version} is not supported (expected {STATE_VERSION})")
        classification = data.get("last_classification")
        return cls(
            options=RecoveryOptions.from_mapping(data.get("options") or {}),
            pipeline_state=PipelineState(data.get("pipeline_state", PipelineState.STOPPED.value)),
            attempt=int(data.get("attempt", 0)),
            window=[RestartRecord.from_dict(r) for r in data.get("window", [])],
            started_at=parse_iso(data.get("started_at")),
            last_restart_at=parse_iso(data.get("last_restart_at")),
            last_failure_at=parse_iso(data.get("last_failure_at")),
            records_since_restart=int(data.get("records_since_restart", 0)),
            total_failures=int(data.get("total_failures", 0)),
            total_restarts=int(data.get("total_restarts", 0)),
            jitter_seed=data.get("jitter_seed"),
            jitter_draws=int(data.get("jitter_draws", 0)),
            last_classification=None if classification is None else Classification.from_dict(classification),
            degraded_reason=data.get("degraded_reason"),
            same_failures=int(data.get("same_failures", 0)),
            last_failure_signature=data.get("last_failure_signature"),
            audit=[AuditEvent.from_dict(e) for e in data.get("audit", [])],
            audit_dropped=int(data.get("audit_dropped", 0)),
        )

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "RecoveryState":
        return cls.from_dict(json.loads(text))
