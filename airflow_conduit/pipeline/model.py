"""Typed, validated pipeline spec (Conduit's pipeline model).

Produced by the loader from YAML, consumed by the Spark runner and the Airflow
operator. Pure Python: no airflow, no pyspark. Names follow Conduit where
Conduit has one (``dead-letter-queue``, ``window-size``,
``window-nack-threshold``, processor plugins such as ``field.set``) and
KIP-298 for per-record error handling (``errors.retry.timeout``,
``errors.retry.delay.max``, ``include-messages``, ``include-configs``).

``settings`` dicts hold the plugin's settings with their YAML names and the
defaults filled in (settings_schema.py). Values of secret settings are
``secrets.Secret`` objects that print as ``***``: call ``get_secret_value()``
(or ``secrets.reveal(settings)``) only where a connector needs the real value,
and ``secrets.redact``/``redacted_dict`` for anything that is logged or written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union

SOURCE_PLUGINS = ("file", "generator", "kafka")
DESTINATION_PLUGINS = ("file", "jdbc", "delta", "kafka", "log")
PROCESSOR_PLUGINS = ("field.set", "field.rename", "field.exclude", "filter", "sql", "json.decode", "custom", "expect")
MODES = ("available-now", "continuous")
SPEC_VERSIONS = ("1",)
# Component id reserved for the dead letter queue (commit markers, report counters): no component may use it.
DEAD_LETTER_QUEUE_ID = "dead-letter-queue"


@dataclass(frozen=True)
class ProcessorSpec:
    id: str
    plugin: str  # one of PROCESSOR_PLUGINS
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceSpec:
    id: str
    plugin: str  # one of SOURCE_PLUGINS ("builtin:" prefix accepted and stripped by the loader)
    settings: dict[str, Any] = field(default_factory=dict)
    processors: tuple[ProcessorSpec, ...] = ()


@dataclass(frozen=True)
class DestinationSpec:
    id: str
    plugin: str  # one of DESTINATION_PLUGINS
    settings: dict[str, Any] = field(default_factory=dict)
    processors: tuple[ProcessorSpec, ...] = ()


@dataclass(frozen=True)
class DeadLetterQueueSpec:
    """Conduit's DLQ: defaults are Conduit's (builtin:log, window 1, threshold 0: the first nack stops)."""

    plugin: str = "log"
    settings: dict[str, Any] = field(default_factory=dict)
    window_size: int = 1  # `window-size`; 0 = no limit
    window_nack_threshold: int = 0  # `window-nack-threshold`
    include_messages: bool = True  # KIP-298 errors.dlq.include.messages
    include_configs: bool = False  # KIP-298 errors.dlq.include.configs (secrets redacted)


@dataclass(frozen=True)
class RetrySpec:
    """KIP-298 per-record retries for processors that do I/O (tenacity)."""

    timeout_seconds: float = 0.0  # `errors.retry.timeout`; 0 = no retry
    delay_max_seconds: float = 60.0  # `errors.retry.delay.max`


@dataclass(frozen=True)
class ErrorsSpec:
    retry: RetrySpec = field(default_factory=RetrySpec)


@dataclass(frozen=True)
class PipelineSpec:
    id: str
    sources: tuple[SourceSpec, ...]
    destinations: tuple[DestinationSpec, ...]
    processors: tuple[ProcessorSpec, ...] = ()
    dead_letter_queue: DeadLetterQueueSpec = field(default_factory=DeadLetterQueueSpec)
    errors: ErrorsSpec = field(default_factory=ErrorsSpec)
    mode: str = "available-now"  # one of MODES
    trigger_interval_seconds: float = 5.0  # micro-batch interval in continuous mode
    batch_deadline_seconds: float = 3600.0  # the longest a micro-batch, and a wait on Spark inside it, may take
    description: str = ""
    source_file: str | None = None  # path the spec was loaded from, for error messages
    secret_keys: frozenset[str] = frozenset()  # settings keys whose values must never be logged (bare names, e.g. "password")
    # Added by the loader (after the first model): where the secrets are, as key paths
    # ("pipeline.destinations[1].settings.password"), and the spec format version.
    secret_paths: tuple[str, ...] = ()
    version: str = "1"

    def components(self) -> Iterator["Component"]:
        """Every source, processor and destination in pipeline order (the DLQ is not a component)."""
        for source in self.sources:
            yield source
            yield from source.processors
        yield from self.processors
        for destination in self.destinations:
            yield from destination.processors
            yield destination

    def component(self, component_id: str) -> "Component":
        """The source, processor or destination with this id (KeyError when there is none)."""
        for item in self.components():
            if item.id == component_id:
                return item
        raise KeyError(component_id)


Component = Union[SourceSpec, ProcessorSpec, DestinationSpec]
