"""Pipeline recovery, pure Python (no airflow, no pyspark): options, backoff, retry budgets,
error classification, pipeline states and audit log. See docs/recovery.md and docs/error-codes.md."""

from airflow_conduit.recovery.classify import Classification, classify, structured_error_from_exception
from airflow_conduit.recovery.clock import Clock, FakeClock, SystemClock
from airflow_conduit.recovery.durations import format_duration, parse_duration
from airflow_conduit.recovery.actions import Action
from airflow_conduit.recovery.budgets import RetryBudget, SinceResetBudget, WindowBudget
from airflow_conduit.recovery.engine import Decision, RecoveryEngine
from airflow_conduit.recovery.errors import (
    ErrorKind,
    FatalError,
    InvalidTransition,
    NackThresholdExceeded,
    PipelineError,
    ProcessorError,
    RecoveryConfigError,
    StructuredError,
    TransientError,
)
from airflow_conduit.recovery.options import INFINITE_RETRIES, POLICIES, RecoveryOptions
from airflow_conduit.recovery.rules import ClassificationRule
from airflow_conduit.recovery.state import AuditEvent, AuditEventType, PipelineState, RecoveryState, RestartRecord

__all__ = [
    "Action",
    "AuditEvent",
    "AuditEventType",
    "Classification",
    "ClassificationRule",
    "Clock",
    "Decision",
    "ErrorKind",
    "FakeClock",
    "FatalError",
    "INFINITE_RETRIES",
    "InvalidTransition",
    "NackThresholdExceeded",
    "POLICIES",
    "PipelineError",
    "PipelineState",
    "ProcessorError",
    "RecoveryConfigError",
    "RecoveryEngine",
    "RecoveryOptions",
    "RecoveryState",
    "RestartRecord",
    "RetryBudget",
    "SinceResetBudget",
    "StructuredError",
    "SystemClock",
    "TransientError",
    "WindowBudget",
    "classify",
    "format_duration",
    "parse_duration",
    "structured_error_from_exception",
]
