"""The headers the Kafka writers put on every record, and how a Kafka DLQ record's headers map to the DLQ's
columns (pure Python: the Spark writer, ``dlq replay`` and the UI read the same table).

Dedup headers (destination and DLQ): ``conduit.pipeline.id``, ``conduit.query.id``, ``conduit.batch.id``,
``conduit.record.id``. A DLQ record also carries Kafka Connect's ``__connect.errors.*`` headers (KIP-298)
and ``conduit.dlq.<column>`` for the DLQ columns Connect has no header for. docs/kafka.md (Kafka DLQ).
"""

from __future__ import annotations

HEADER_PIPELINE = "conduit.pipeline.id"
HEADER_QUERY = "conduit.query.id"
HEADER_BATCH = "conduit.batch.id"
HEADER_RECORD = "conduit.record.id"
CONNECT = "__connect.errors."
DLQ_HEADER = "conduit.dlq."

# Kafka Connect's DLQ header (KIP-298) -> the DLQ column it carries (None: none for a file's record).
CONNECT_HEADERS: tuple[tuple[str, str | None], ...] = (
    ("topic", "source_file"),
    ("partition", None),
    ("offset", "source_position"),
    ("connector.name", "component_id"),
    ("task.id", "run_id"),
    ("stage", "stage"),
    ("class.name", "component_type"),
    ("exception.class.name", "exception_class"),
    ("exception.message", "exception_message"),
    ("exception.stacktrace", "exception_stacktrace"),
)
# DLQ columns with no Connect header of their own: ``conduit.dlq.<column>``.
CONDUIT_DLQ_HEADERS = (
    "source_id", "source_file", "source_position", "source_split_start", "attempt", "time_of_error", "configs",
    "replay_count",
)
# DLQ column -> (header, Spark SQL type) when a Kafka DLQ record is read back.
DLQ_COLUMNS_FROM_HEADERS: tuple[tuple[str, str, str], ...] = (
    ("pipeline_id", HEADER_PIPELINE, "string"),
    ("run_id", CONNECT + "task.id", "string"),
    ("batch_id", HEADER_BATCH, "long"),
    ("source_id", DLQ_HEADER + "source_id", "string"),
    ("source_file", DLQ_HEADER + "source_file", "string"),
    ("source_position", DLQ_HEADER + "source_position", "long"),
    ("source_split_start", DLQ_HEADER + "source_split_start", "long"),
    ("stage", CONNECT + "stage", "string"),
    ("component_id", CONNECT + "connector.name", "string"),
    ("component_type", CONNECT + "class.name", "string"),
    ("exception_class", CONNECT + "exception.class.name", "string"),
    ("exception_message", CONNECT + "exception.message", "string"),
    ("exception_stacktrace", CONNECT + "exception.stacktrace", "string"),
    ("attempt", DLQ_HEADER + "attempt", "int"),
    ("time_of_error", DLQ_HEADER + "time_of_error", "string"),
    ("configs", DLQ_HEADER + "configs", "string"),
    ("replay_count", DLQ_HEADER + "replay_count", "int"),
)
