"""Internal columns that travel with every record, and the null-safe per-record error helpers.

Every record carries its origin (source id, file, position; the original
text only when it failed to parse) and its fate so far: an error struct (NULL
while the record is fine) and a non-null ``filtered`` flag. Each stage only
sets an error on records that are still *active* (no error yet, not
filtered), with ``coalesce`` so a NULL predicate never makes a record vanish:
every record ends up in exactly one of written, filtered or DLQ.

Every internal column starts with ``__ac_``: processors keep them whatever
they select or exclude, destinations never write them.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


PREFIX = "__ac_"
SOURCE_ID = "__ac_source"  # source connector id
SOURCE_INDEX = "__ac_source_idx"  # position of the source in the spec
FILE = "__ac_file"  # file the record came from (null for the generator)
SPLIT = "__ac_split"  # byte offset of the file split the record was read from (0 unless a big file was split)
POSITION = "__ac_pos"  # 1-based record number in its file split (json: non-blank line), row (parquet), offset (generator)
SEQ = "__ac_seq"  # read order within the batch (partition, then record): the nack window's order
RAW = "__ac_raw"  # the original text, kept only for records that failed to parse (NULL otherwise)
ERROR = "__ac_err"  # NULL or the error struct below
FILTERED = "__ac_filtered"  # never NULL
ORIGINAL = "__ac_o"  # prefix of the source fields as read, kept for the DLQ when later stages can fail a record

# The error struct's fields, in order: (name, type, whether its value is cast to the type). The one description
# of the error struct: ``error_struct`` (Column) and ``error_struct_sql`` (SQL text) are both built from it.
ERROR_FIELDS = (
    ("stage", "string", False), ("component_id", "string", False), ("component_type", "string", False),
    ("exception_class", "string", True), ("message", "string", True), ("stacktrace", "string", True),
    ("attempt", "int", True),
)
ERROR_TYPE = "struct<" + ",".join(f"{name}:{kind}" for name, kind, _ in ERROR_FIELDS) + ">"

# Exception class names of the errors the runner detects itself with Spark expressions.
MALFORMED_RECORD = "airflow_conduit.spark.MalformedRecordError"
WRONG_TYPE = "airflow_conduit.spark.WrongTypeError"
MISSING_FIELD = "airflow_conduit.spark.MissingFieldError"


# Record metadata a source offers processors (the Kafka source's key, topic, ...; spark/kafka_source.py):
# kept through processors like the internal columns, never expanded by ``*``, never written by destinations.
METADATA_COLUMNS = frozenset(
    {"_kafka_key", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_headers"}
)


def is_internal(name: str) -> bool:
    return name.startswith(PREFIX) or name in METADATA_COLUMNS


def user_columns(df: DataFrame) -> list[str]:
    """The record's own fields (everything but the internal columns)."""
    return [c for c in df.columns if not is_internal(c)]


def internal_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if is_internal(c)]




def quote(name: str) -> str:
    """Backtick-quote a column name for selectExpr / col()."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """A Spark SQL string literal (the default parser: backslash escapes)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def col(name: str) -> Column:
    return F.col(quote(name))


def active() -> Column:
    """Records a stage may still act on: no error yet and not filtered out."""
    return F.col(ERROR).isNull() & ~F.col(FILTERED)


def case(branches: list[tuple[Column, Column]]) -> Column:
    """``CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... END`` (NULL when no condition holds); ``branches`` not empty."""
    (first_condition, first_value), *rest = branches
    out = F.when(first_condition, first_value)
    for condition, value in rest:
        out = out.when(condition, value)
    return out


def error_struct(
    *,
    stage: str,
    component_id: str,
    component_type: str,
    exception_class: str | Column,
    message: str | Column,
    stacktrace: Column | None = None,
    attempt: Column | int = 1,
) -> Column:
    """A record's error (``ERROR_FIELDS``); a str or int is a literal."""
    values = dict(stage=stage, component_id=component_id, component_type=component_type, exception_class=exception_class,
                  message=message, stacktrace=stacktrace, attempt=attempt)
    lit_or = lambda v: v if isinstance(v, Column) else F.lit(v)  # noqa: E731
    return F.struct(*[(lit_or(values[name]).cast(kind) if cast else lit_or(values[name])).alias(name)
                      for name, kind, cast in ERROR_FIELDS]).cast(ERROR_TYPE)


def error_struct_sql(*, stage: str, component_id: str, component_type: str, exception_class: str, message: str,
                     stacktrace: str = "NULL", attempt: str = "1") -> str:
    """``error_struct`` as SQL text (the same expression): ``stage`` and the component are strings, the others SQL."""
    values = dict(stage=sql_string(stage), component_id=sql_string(component_id), component_type=sql_string(component_type),
                  exception_class=exception_class, message=message, stacktrace=stacktrace, attempt=attempt)
    fields = ", ".join((f"CAST({values[name]} AS {kind.upper()})" if cast else values[name]) + f" AS {name}"
                       for name, kind, cast in ERROR_FIELDS)
    return f"CAST(struct({fields}) AS {ERROR_TYPE})"


def with_error_column(df: DataFrame, error: Column) -> DataFrame:
    """Set ``error`` (an error struct or NULL) on active records; the first error wins."""
    return df.withColumn(ERROR, F.coalesce(F.col(ERROR), F.when(active(), error)))


def with_error(df: DataFrame, failed: Column, **error: str | Column | int | None) -> DataFrame:
    """Set the error of active records where ``failed`` is TRUE; NULL counts as not failed; the first error wins."""
    return with_error_column(df, F.when(F.coalesce(failed, F.lit(False)), error_struct(**error)))


def filter_columns(keep: Column) -> "JvmColumns":
    """Filter processor, for ``with_columns``: active records where ``keep`` is not TRUE (FALSE or NULL) become
    filtered (acked)."""
    drop = active() & ~F.coalesce(keep, F.lit(False))
    return JvmColumns([F.col(FILTERED) | drop], [FILTERED])


# -- select lists handed to the JVM once per run (spark/jvm/columns.py) -------------------------------------------

from airflow_conduit.spark.jvm.columns import (  # noqa: E402 - the JVM half of this module's columns
    JvmColumns,
    frame,
    function_member,
    jvm_function,
    jvm_seq,
    jvm_strings,
    select,
    select_expr,
    with_columns,
)

__all__ = ["JvmColumns", "frame", "function_member", "jvm_function", "jvm_seq", "jvm_strings", "select", "select_expr",
           "with_columns"]
