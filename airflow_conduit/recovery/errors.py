"""Error types for user code and the structured error that travels from the Spark job to the engine."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_conduit.compat import StrEnum
from airflow_conduit.recovery import codes


class ErrorKind(StrEnum):
    """The verdict on an error: restart it with backoff, or degrade the pipeline at once."""

    TRANSIENT = "transient"
    FATAL = "fatal"

    @classmethod
    def of(cls, fatal: bool) -> "ErrorKind":
        return cls.FATAL if fatal else cls.TRANSIENT


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


class ProcessorError(FatalError):
    """A processor failed on a record: fatal by default (processors are deterministic, Conduit recovery doc).

    A processor that talks to a flaky service raises ``TransientError`` (or wraps this one in it) instead.
    """

    code = codes.PROCESSOR


class NackThresholdExceeded(FatalError):
    """The dead letter queue's ``window-nack-threshold`` was exceeded: fatal, or the threshold would lose its purpose."""

    code = codes.DLQ_NACK_THRESHOLD


class BatchDeadlineExceeded(TransientError):
    """A micro-batch, or a wait on Spark inside it, outlasted ``pipeline.batch-deadline``: the run ends and is restarted,
    which runs the batch again (nothing of it is lost: what it committed is skipped, the rest written)."""

    code = codes.BATCH_DEADLINE


class SpecChangedMidBatch(FatalError):
    """A batch committed to some outputs but not all is re-run under a spec other than the one it started with: its
    records could get other fates, and those meant for an output already committed would land nowhere."""

    code = codes.SPEC_CHANGED_MID_BATCH


class RecoveryConfigError(ValueError):
    """A recovery option or error rule was refused; the message names the option and the value."""

    def __init__(self, option: str, value: Any, problem: str):
        self.option = option
        self.value = value
        super().__init__(f"recovery option {option}={value!r}: {problem}")


class InvalidTransition(RuntimeError):
    """The engine was told something that cannot happen in its current pipeline state."""


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
        """Read a dict written by ``to_dict``; tolerant of older jobs (code as text, ``fatal`` missing)."""
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["code"] = int(values.get("code", codes.TRANSIENT))
        if "fatal" not in values or values["fatal"] is None:
            values["fatal"] = bool(codes.is_fatal_code(values["code"]))
        values.setdefault("message", "")
        values["extra"] = dict(values.get("extra") or {})
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "StructuredError":
        return cls.from_dict(json.loads(text))

    def to_error_line(self) -> str:
        """The single stderr line the Spark job prints before a non-zero exit."""
        return codes.ERROR_LINE_PREFIX + json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_stderr(cls, text: str) -> "StructuredError | None":
        """The structured error of the last ``AIRFLOW_CONDUIT_ERROR {json}`` line in ``text``, or None.

        Lines whose JSON is broken are skipped (a truncated log must not hide an earlier good line).
        """
        marker = codes.ERROR_LINE_PREFIX.strip()
        found: StructuredError | None = None
        for line in text.splitlines():
            position = line.find(marker)
            if position < 0:
                continue
            payload = line[position + len(marker) :].strip()
            try:
                data = json.loads(payload)
            except ValueError:
                continue
            if isinstance(data, dict) and "code" in data:
                try:
                    found = cls.from_dict(data)
                except (TypeError, ValueError):
                    continue
        return found
