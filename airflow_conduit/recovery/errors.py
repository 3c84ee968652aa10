"""Error types for user code and the structured error that travels from the Spark job to the engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_conduit.recovery import codes


class PipelineError(Exception):
    """Base for errors that carry an error code."""

    code: int = codes.TRANSIENT

    def __init__(self, message: str = "", *, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class TransientError(PipelineError):
    """Raise (or wrap with ``raise TransientError(...) from exc``) to ask for a restart with backoff."""

    code = codes.TRANSIENT


class FatalError(PipelineError):
    """Raise (or wrap) to stop the pipeline as degraded without restart."""

    code = codes.FATAL


@dataclass
class StructuredError:
    """The JSON error the Spark job writes in its run report and on stderr (design doc, phase 2)."""

    code: int
    fatal: bool
    message: str
    exception_class: str | None = None
    error_condition: str | None = None  # Spark error condition, e.g. UNRESOLVED_COLUMN.WITH_SUGGESTION
    sqlstate: str | None = None  # e.g. 42703
    stage: str | None = None  # source | processor | destination | dlq | runner
    component_id: str | None = None
    component_type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StructuredError":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})
