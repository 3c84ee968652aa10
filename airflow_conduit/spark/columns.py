"""Internal columns that travel with every record, and the null-safe per-record error helpers.

Every record carries its origin (source id, file, position, the original
text) and its fate so far: an error struct (NULL while the record is fine)
and a non-null ``filtered`` flag. Each stage only sets an error on records
that are still *active* (no error yet, not filtered), with ``coalesce`` so a
NULL predicate never makes a record vanish: every record ends up in exactly
one of written, filtered or DLQ.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

SOURCE_ID = "__ac_source"  # source connector id
SOURCE_INDEX = "__ac_source_idx"  # position of the source in the spec (ordering)
FILE = "__ac_file"  # file the record came from (null for the generator)
POSITION = "__ac_pos"  # line number (json, csv), row number (parquet), offset (generator); 1-based
RAW = "__ac_raw"  # the original record as read (a text line, or JSON for parquet)
ERROR = "__ac_err"  # NULL or the error struct below
FILTERED = "__ac_filtered"  # never NULL
ROW_ID = "__ac_rid"  # unique id within a batch (joins between fan-out branches)

ORIGIN_COLUMNS = (SOURCE_ID, SOURCE_INDEX, FILE, POSITION, RAW)
INTERNAL_COLUMNS = ORIGIN_COLUMNS + (ERROR, FILTERED, ROW_ID)
ORDER_COLUMNS = (SOURCE_INDEX, FILE, POSITION)

ERROR_TYPE = (
    "struct<stage:string,component_id:string,component_type:string,exception_class:string,"
    "message:string,stacktrace:string,attempt:int>"
)

# Exception class names of the errors the runner detects itself with Spark expressions.
MALFORMED_RECORD = "airflow_conduit.spark.MalformedRecordError"
WRONG_TYPE = "airflow_conduit.spark.WrongTypeError"
MISSING_FIELD = "airflow_conduit.spark.MissingFieldError"


def user_columns(df: DataFrame) -> list[str]:
    """The record's own fields (everything but the internal columns)."""
    return [c for c in df.columns if c not in INTERNAL_COLUMNS]


def record_columns(df: DataFrame) -> list[str]:
    """What a destination writes: the record's fields, no ``__ac_`` column (internal ones, the runner's fate flags)."""
    return [c for c in df.columns if not c.startswith("__ac_")]


def quote(name: str) -> str:
    """Backtick-quote a column name for selectExpr / col()."""
    return "`" + name.replace("`", "``") + "`"


def active() -> Column:
    """Records a stage may still act on: no error yet and not filtered out."""
    return F.col(ERROR).isNull() & ~F.col(FILTERED)


def with_error(
    df: DataFrame,
    failed: Column,
    *,
    stage: str,
    component_id: str,
    component_type: str,
    exception_class: str | Column,
    message: str | Column,
    stacktrace: Column | None = None,
    attempt: Column | int = 1,
) -> DataFrame:
    """Set the error of active records where ``failed`` is TRUE; NULL counts as not failed; the first error wins."""
    lit_or = lambda v: v if isinstance(v, Column) else F.lit(v)  # noqa: E731
    err = F.struct(
        F.lit(stage).alias("stage"),
        F.lit(component_id).alias("component_id"),
        F.lit(component_type).alias("component_type"),
        lit_or(exception_class).cast("string").alias("exception_class"),
        lit_or(message).cast("string").alias("message"),
        (stacktrace if stacktrace is not None else F.lit(None)).cast("string").alias("stacktrace"),
        lit_or(attempt).cast("int").alias("attempt"),
    ).cast(ERROR_TYPE)
    new_error = F.when(active() & F.coalesce(failed, F.lit(False)), err)
    return df.withColumn(ERROR, F.coalesce(F.col(ERROR), new_error))


def with_filter(df: DataFrame, keep: Column) -> DataFrame:
    """Filter processor: active records where ``keep`` is not TRUE (FALSE or NULL) become filtered (acked)."""
    drop = active() & ~F.coalesce(keep, F.lit(False))
    return df.withColumn(FILTERED, F.col(FILTERED) | drop)
