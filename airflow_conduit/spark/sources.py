"""Source connectors: one streaming DataFrame per source, all with the same origin columns.

Every source yields (source id, source index, file, position, raw text): the
streams can be unioned (fan-in) whatever their record schemas, and parsing
happens per batch (``parse_batch``) so that a bad line becomes a per-record
error with its file and line number instead of being dropped by a reader.

- file, json / csv: the files are read whole (``wholetext``) and split into
  lines, which gives each record its 1-based line number; blank lines are not
  records; a CSV header line is skipped.
- file, parquet: Spark's parquet reader; position = row number in the file.
- generator: Spark's ``rate-micro-batch`` source (deterministic: batch n holds
  offsets n*rows .. (n+1)*rows-1); fields derive from the offset and seed;
  ``bad-record-ratio`` of them (evenly spread) are emitted as broken JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.pipeline.model import SourceSpec
from airflow_conduit.spark import columns as C
from airflow_conduit.spark import parsing

GENERATOR_MAX_ROWS_PER_BATCH = 10_000


@dataclass
class SourcePlan:
    """What the batch step needs to know about a source: its parser and schema."""

    spec: SourceSpec
    index: int
    schema: T.StructType
    parser: str  # json | csv | parquet (parquet rows travel as JSON text too)
    rows_per_batch: int | None = None  # generator only
    records: int | None = None  # generator only

    @property
    def id(self) -> str:
        return self.spec.id


def _setting(spec: SourceSpec, key: str, default=None):
    return spec.settings.get(key, default)


def plan_source(spark: SparkSession, spec: SourceSpec, index: int, *, trigger_seconds: float, mode: str) -> SourcePlan:
    if spec.plugin == "generator":
        fields = _setting(spec, "fields") or {"id": "BIGINT"}
        schema = parsing.parse_schema(", ".join(f"`{k}` {v}" for k, v in fields.items()))
        records = int(_setting(spec, "records", 1000))
        rate = _setting(spec, "rate")
        if mode == "continuous" and rate:
            rows = max(1, int(math.ceil(float(rate) * trigger_seconds)))
        else:
            rows = min(records, GENERATOR_MAX_ROWS_PER_BATCH)
        return SourcePlan(spec, index, schema, "json", rows_per_batch=rows, records=records)
    fmt = _setting(spec, "format", "json")
    ddl = _setting(spec, "schema")
    if ddl:
        schema = parsing.parse_schema(ddl)
    elif fmt == "parquet":
        try:
            schema = spark.read.parquet(_setting(spec, "path")).schema
        except Exception as exc:  # noqa: BLE001 - re-raised with the setting to fix
            raise ValueError(
                f"source {spec.id!r}: cannot infer the parquet schema of {_setting(spec, 'path')!r} "
                f"(no files yet?): set settings.schema ({exc.__class__.__name__})"
            ) from exc
    else:
        raise ValueError(f"source {spec.id!r}: settings.schema is required for format {fmt}")
    return SourcePlan(spec, index, schema, fmt)


def read_stream(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    """The source as a stream of origin columns (see module docstring)."""
    spec = plan.spec
    if spec.plugin == "generator":
        stream = _generator_stream(spark, plan)
    elif plan.parser == "parquet":
        stream = _parquet_stream(spark, plan)
    else:
        stream = _text_stream(spark, plan)
    return stream.select(
        F.lit(spec.id).alias(C.SOURCE_ID),
        F.lit(plan.index).alias(C.SOURCE_INDEX),
        F.col("file").cast("string").alias(C.FILE),
        F.col("pos").cast("long").alias(C.POSITION),
        F.col("raw").cast("string").alias(C.RAW),
    )


# Spark skips files older (by modification time) than the newest seen minus maxFileAge (default 7 days):
# a file copied in with an old timestamp (cp -p, rsync -t) would silently never be read. Nothing may be lost.
MAX_FILE_AGE = "36500d"


def _reader(spark: SparkSession, spec: SourceSpec):
    reader = spark.readStream.option("maxFileAge", MAX_FILE_AGE)
    max_files = _setting(spec, "max-files-per-trigger")
    if max_files:
        reader = reader.option("maxFilesPerTrigger", int(max_files))
    return reader


def _text_stream(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    spec = plan.spec
    files = _reader(spark, spec).text(_setting(spec, "path"), wholetext=True)
    lines = files.select(
        F.col("_metadata.file_path").alias("file"),
        F.inline(
            F.transform(
                F.split(F.col("value"), r"\r?\n"),
                lambda line, i: F.struct((i + 1).cast("long").alias("pos"), line.alias("raw")),
            )
        ),
    )
    lines = lines.where(F.trim(F.col("raw")) != F.lit(""))
    if plan.parser == "csv" and _setting(spec, "header", True):
        lines = lines.where(F.col("pos") != F.lit(1))
    return lines


def _parquet_stream(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    spec = plan.spec
    rows = _reader(spark, spec).schema(parsing.nullable(plan.schema)).parquet(_setting(spec, "path"))
    return rows.select(
        F.col("_metadata.file_path").alias("file"),
        (F.col("_metadata.row_index") + 1).alias("pos"),
        F.to_json(F.struct(*[F.col(C.quote(f.name)) for f in plan.schema.fields])).alias("raw"),
    )


def _generated_value(name: str, dtype: T.DataType, offset, seed: int):
    """A deterministic value of ``dtype`` from the offset and seed (``id``-like integral fields = offset)."""
    h = F.pmod(F.xxhash64(offset, F.lit(seed), F.lit(name)), F.lit(1_000_000))
    if isinstance(dtype, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        value = offset if name.lower() in ("id", "seq", "offset") else h
        if isinstance(dtype, (T.ShortType, T.ByteType)):
            value = F.pmod(value, F.lit(100))
    elif isinstance(dtype, (T.DoubleType, T.FloatType, T.DecimalType)):
        value = h / F.lit(100.0)
    elif isinstance(dtype, T.BooleanType):
        value = F.pmod(h, F.lit(2)) == F.lit(0)
    elif isinstance(dtype, T.TimestampType) or isinstance(dtype, T.TimestampNTZType):
        value = F.timestamp_seconds(F.lit(1_700_000_000) + offset)
    elif isinstance(dtype, T.DateType):
        value = F.date_add(F.lit("2024-01-01").cast("date"), F.pmod(offset, F.lit(365)).cast("int"))
    else:
        value = F.concat(F.lit(f"{name}-"), offset.cast("string"))
    return value.cast(dtype).alias(name)


def _generator_stream(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    spec = plan.spec
    seed = int(_setting(spec, "seed", 0))
    ratio = float(_setting(spec, "bad-record-ratio", 0.0))
    rows = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", plan.rows_per_batch)
        .option("startTimestamp", 0)
        .option("advanceMillisPerBatch", 1000)
        .load()
    )
    offset = F.col("value")
    record = F.to_json(F.struct(*[_generated_value(f.name, f.dataType, offset, seed) for f in plan.schema.fields]))
    # exactly `ratio` of the records, evenly spread (the seed shifts which ones): predictable for demos
    shifted = (offset + F.lit(seed)).cast("double")
    bad = F.floor((shifted + F.lit(1.0)) * F.lit(ratio)) > F.floor(shifted * F.lit(ratio))
    raw = F.when(bad, F.concat(F.lit("{broken "), F.substring(record, 2, 1_000_000))).otherwise(record)
    rows = rows.where(offset < F.lit(plan.records))  # later batches are empty: the generator is done
    return rows.select(F.lit(None).cast("string").alias("file"), offset.alias("pos"), raw.alias("raw"))


def parse_batch(batch: DataFrame, plan: SourcePlan) -> DataFrame:
    """This source's rows of the batch, parsed into its schema, with per-record source errors set."""
    rows = batch.where(F.col(C.SOURCE_ID) == F.lit(plan.id))  # a generator's stream already stops at `records`
    rows = rows.withColumn(C.ERROR, F.lit(None).cast(C.ERROR_TYPE)).withColumn(C.FILTERED, F.lit(False))
    common = dict(stage="source", component_id=plan.id, component_type=plan.spec.plugin)
    if plan.parser == "csv":
        rows, value = parsing.decode_csv(rows, F.col(C.RAW), plan.schema, **common)
    else:
        rows, value = parsing.decode_json(rows, F.col(C.RAW), plan.schema, **common)
    rows = rows.withColumn("__ac_value", value)
    rows = rows.select(
        *[F.col(c) for c in C.ORIGIN_COLUMNS],
        F.col(C.ERROR),
        F.col(C.FILTERED),
        *[F.col("__ac_value")[f.name].alias(f.name) for f in plan.schema.fields],
    )
    return rows
