"""Source connectors: one streaming DataFrame per source, parsed once by Spark's own reader.

Every source yields its origin columns (source id and index, file, split)
and its fields under a per-source prefix (``__ac_s<index>_<field>``), so the
streams can be unioned (fan-in) whatever their record schemas; ``records``
takes one source's rows of a micro-batch back under their own names, with
its per-record errors set.

- file, json / csv: Spark's JSON / CSV reader with the declared schema in
  PERMISSIVE mode: a line that does not parse keeps its text in the
  corrupt-record column (the only records that carry their text; a JSON
  line that is not valid UTF-8 is kept base64-encoded, see ``parsing``); blank
  lines are not records; a CSV header line is not a record. Position = the
  record's number in its file: each file is read as its own partition
  (``ONE_FILE_PER_PARTITION``), so the number is the record's index in the
  partition (1-based; a CSV with a header counts the header line). A file
  larger than ``spark.sql.files.maxPartitionBytes`` is read in splits;
  numbers then restart at each split, whose byte offset is ``split``.
- file, parquet: Spark's parquet reader; position = row number in the file.
- generator: Spark's ``rate-micro-batch`` source (deterministic: batch n holds
  offsets n*rows .. (n+1)*rows-1); fields derive from the offset and seed;
  ``bad-record-ratio`` of them (evenly spread) are emitted as broken JSON,
  parsed per batch with ``from_json``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.pipeline.model import SourceSpec
from airflow_conduit.spark import columns as C
from airflow_conduit.spark import kafka_source, oversized_lines, parsing
from airflow_conduit.spark.analysed_plan import AnalysedPlan
from airflow_conduit.spark.jvm.columns import with_jvm_column

ONE_FILE_PER_PARTITION = str(1 << 40)  # spark.sql.files.openCostInBytes: no two files share a partition
FILE = "__ac_file"  # origin columns, only with origin_in_columns
SPLIT = "__ac_split"
PARTITION_SHIFT = 33
POSITION_MASK = (1 << PARTITION_SHIFT) - 1  # monotonically_increasing_id: partition << 33 | record index in the partition

GENERATOR_MAX_ROWS_PER_BATCH = 10_000
log = logging.getLogger(__name__)


@dataclass
class SourcePlan:
    """What the batch step needs to know about a source: its parser and schema."""

    spec: SourceSpec
    index: int
    schema: T.StructType
    parser: str  # json | csv | parquet | generator | kafka
    rows_per_batch: int | None = None  # generator only
    records: int | None = None  # generator only
    # file and split as columns of every record: needed when a stage caches the batch (a custom
    # processor), after which the reading task (input_file_name) is gone
    origin_in_columns: bool = False

    @property
    def id(self) -> str:
        return self.spec.id

    def field_column(self, name: str) -> str:
        """The field's column name in the unioned stream (prefixed per source: schemas may differ)."""
        return f"__ac_s{self.index}_{name}"

    def original_column(self, name: str) -> str:
        """The field as read, kept aside for the DLQ while processors change the record."""
        return f"{C.ORIGINAL}{self.index}_{name}"


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
        return SourcePlan(spec, index, schema, "generator", rows_per_batch=rows, records=records)
    if spec.plugin == kafka_source.PLUGIN:
        return SourcePlan(spec, index, kafka_source.value_schema(spec.settings), "kafka")
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
    """The source as a stream of origin columns plus its (prefixed) fields; see the module docstring."""
    spec = plan.spec
    if plan.parser == "kafka":
        return kafka_source.read_stream(spark, plan)
    if plan.parser == "generator":
        stream = _generator_stream(spark, plan)
    elif plan.parser == "parquet":
        stream = _parquet_stream(spark, plan)
    else:
        stream = _parsed_text_stream(spark, plan)
    fields = [] if plan.parser == "generator" else [f"{C.quote(f.name)} AS {C.quote(plan.field_column(f.name))}" for f in plan.schema.fields]
    return C.select_expr(stream, C.jvm_strings([  # SQL text: one JVM call for the list at any width
        f"{C.sql_string(spec.id)} AS {C.quote(C.SOURCE_ID)}",
        f"{int(plan.index)} AS {C.quote(C.SOURCE_INDEX)}",
        f"CAST(pos AS BIGINT) AS {C.quote(C.POSITION)}",
        f"CAST(raw AS STRING) AS {C.quote(C.RAW)}",
        *fields,
    ]))


# Spark skips files older (by modification time) than the newest seen minus maxFileAge (default 7 days):
# a file copied in with an old timestamp (cp -p, rsync -t) would silently never be read. Nothing may be lost.
MAX_FILE_AGE = "36500d"


def _reader(spark: SparkSession, spec: SourceSpec):
    # a file gone between its listing and its read is skipped, not a failed batch: the runner names it
    # (input_files, INPUT_FILE_GONE) before the batch reads
    reader = spark.readStream.option("maxFileAge", MAX_FILE_AGE).option("ignoreMissingFiles", "true")
    max_files = _setting(spec, "max-files-per-trigger")
    if max_files:
        reader = reader.option("maxFilesPerTrigger", int(max_files))
    return reader


def csv_header(spec: SourceSpec) -> bool:
    return bool(_setting(spec, "header", True))


def csv_separator(spec: SourceSpec) -> str:
    return str(_setting(spec, "separator", ","))


def json_max_string_length(spec: SourceSpec) -> int:
    """The JSON parser's limit on one string value (Spark's ``maxStringLen``); a longer one is a DLQ record."""
    return int(_setting(spec, "max-string-length", parsing.JSON_MAX_STRING_LENGTH))


def line_bound(spec: SourceSpec) -> int:
    """The longest line (bytes, its line end included, minus one) a JSON or CSV file source reads."""
    return oversized_lines.line_bound(json_max_string_length(spec))


def _parsed_text_stream(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    spec = plan.spec
    reader = (
        _reader(spark, spec)
        .schema(parsing.reader_schema(plan.schema))
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", parsing.CORRUPT)
        # lines are read with a bounded length: a longer one is never held whole (oversized_lines reports it)
        .option(oversized_lines.HADOOP_MAX_LINE, str(line_bound(spec)))
    )
    if plan.parser == "csv":
        rows = reader.option("header", str(csv_header(spec)).lower()).option("sep", csv_separator(spec)).csv(_setting(spec, "path"))
    else:
        rows = reader.option("maxStringLen", json_max_string_length(spec)).json(_setting(spec, "path"))
    return C.select_expr(rows, C.jvm_strings([
        *[C.quote(f.name) for f in plan.schema.fields],
        "CAST(NULL AS BIGINT) AS pos",  # numbered per batch (monotonically_increasing_id is batch-only)
        f"{C.quote(parsing.CORRUPT)} AS raw",
    ]))


def _parquet_stream(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    spec = plan.spec
    rows = _reader(spark, spec).schema(parsing.nullable(plan.schema)).parquet(_setting(spec, "path"))
    return C.select_expr(rows, C.jvm_strings([
        *[C.quote(f.name) for f in plan.schema.fields],
        "(_metadata.row_index + 1) AS pos",
        "CAST(NULL AS STRING) AS raw",
    ]))


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
    return rows.select(offset.alias("pos"), raw.alias("raw"))


def _read_split(plan: SourcePlan) -> Column:
    return F.input_file_block_start() if plan.parser in ("json", "csv") else F.lit(0).cast("long")


def _read_file(plan: SourcePlan) -> Column:
    if plan.parser == "generator":
        return F.lit(None).cast("string")
    # written as Spark's _metadata.file_path writes it (file:/x, not file:///x)
    return F.regexp_replace(F.input_file_name(), r"^file:///", "file:/")


def _split(plan: SourcePlan) -> Column:
    if plan.parser == "kafka":
        return kafka_source.origin_split()
    return F.col(SPLIT) if plan.origin_in_columns else _read_split(plan)


def _file(plan: SourcePlan) -> Column:
    if plan.parser == "kafka":
        return kafka_source.origin_file()
    return F.col(FILE) if plan.origin_in_columns else _read_file(plan)


def _position(plan: SourcePlan) -> Column:
    if plan.parser not in ("json", "csv"):
        return F.col(C.POSITION)
    header = 1 if plan.parser == "csv" and csv_header(plan.spec) else 0
    first_line = F.when(_split(plan) == F.lit(0), F.lit(1 + header)).otherwise(F.lit(1))
    return F.col(C.SEQ).bitwiseAND(F.lit(POSITION_MASK)) + first_line


def per_source(plans: list[SourcePlan], of) -> Column:
    """``of(plan)`` for the source each record came from."""
    if len(plans) == 1:
        return of(plans[0])
    return C.case([(F.col(C.SOURCE_INDEX) == F.lit(plan.index), of(plan)) for plan in plans])


# Where a record came from. Evaluated only where used (the DLQ's rows, under a condition), in the pass
# that reads the record: the file name comes from the reading task (input_file_name), not from a
# column every good record would carry.
def origin_file(plans: list[SourcePlan]) -> Column:
    return per_source(plans, _file)


def origin_split(plans: list[SourcePlan]) -> Column:
    """Byte offset of the file split the record was read from (0 unless a big file was split)."""
    return per_source(plans, _split)


def origin_position(plans: list[SourcePlan]) -> Column:
    """The record's position (see the module docstring); json / csv: from the read order (``SEQ``)."""
    return per_source(plans, _position)


class SourceRecords:
    """``records`` for one source, its columns built once per run: they are hundreds of Column calls, each a
    JVM round trip, that every batch would pay again. The records' select is analysed once per run too, where
    it can be (``analysed_plan``): it holds the batch plan's largest expressions, the same at every batch."""

    def __init__(self, plan: SourcePlan, *, single_source: bool, keep_originals: bool):
        self.plan = plan
        self._mine = None if single_source else F.col(C.SOURCE_ID) == F.lit(plan.id)
        # the read order numbered in the records' own projection (one plan analysis), unless the origin columns
        # come first (a custom processor caches the batch)
        self._in_one = not (plan.origin_in_columns and plan.parser != "kafka")
        self._columns: C.JvmColumns | None = None
        self._text = None  # the select list as SQL text: one JVM round trip at any width
        if plan.parser == "kafka":
            seq = _read_order() if self._in_one else F.col(C.SEQ)
            self._columns = C.JvmColumns(kafka_source.record_columns(plan, keep_originals=keep_originals, seq=seq))
        else:
            seq_sql = f"monotonically_increasing_id() AS {C.quote(C.SEQ)}" if self._in_one else C.quote(C.SEQ)
            text = _record_columns(plan, keep_originals=keep_originals, seq=seq_sql)
            if plan.spec.plugin == kafka_source.PLUGIN:  # a Kafka source's records replayed from the DLQ
                # its metadata are not kept there (NULL, so processors still resolve)
                self._columns = C.JvmColumns([*kafka_source.replayed_metadata(), *(F.expr(column) for column in text)])
            else:
                self._text = C.jvm_strings(text)
        self._analysed: AnalysedPlan | None = None  # the records' select of an earlier batch, analysed

    def of(self, batch: DataFrame) -> DataFrame:
        """This source's rows of ``batch``, see ``records``."""
        if self._analysed is not None:
            try:
                reused = self._analysed.over(batch)
            except Exception:  # noqa: BLE001 - reuse is an optimisation: the select is then built as usual
                log.debug("the records' analysed select not reused", exc_info=True)
                reused = self._analysed = None
            if reused is not None:
                return reused
        plan = self.plan
        rows = batch if self._mine is None else batch.where(self._mine)
        if self._in_one:
            records = self._select(rows)
            try:
                self._analysed = AnalysedPlan(records, batch, check_ahead=False)  # reused when the batch's whole plan is not
            except Exception:  # noqa: BLE001 - as above
                log.debug("the records' analysed select not kept", exc_info=True)
            return records
        # a custom processor caches the batch: the origin columns are read first, then the records' select
        seq = C.jvm_function("monotonically_increasing_id")()
        rows = with_jvm_column(rows, C.SEQ, seq)
        rows = rows.select("*", _read_file(plan).alias(FILE), _read_split(plan).alias(SPLIT))
        return self._select(rows)

    def _select(self, rows: DataFrame) -> DataFrame:
        return C.select_expr(rows, self._text) if self._text is not None else C.select(rows, self._columns)


def _read_order() -> Column:
    """``SEQ``: the record's read order in the batch (partition, then record; ``PARTITION_SHIFT``). The function is
    resolved anew by each analysis; partitions of a union are never mixed."""
    return F.monotonically_increasing_id().alias(C.SEQ)


def records(batch: DataFrame, plan: SourcePlan, *, single_source: bool, keep_originals: bool) -> DataFrame:
    """This source's rows of the batch under their own field names, with per-record source errors set.

    ``keep_originals``: also keep each field as read (``original_column``), for the DLQ record of a
    record that a later stage fails. (``SourceRecords`` keeps the columns for the next batches.)
    """
    return SourceRecords(plan, single_source=single_source, keep_originals=keep_originals).of(batch)


def is_csv_file(spec: SourceSpec) -> bool:
    return spec.plugin == "file" and _setting(spec, "format", "json") == "csv"


def _record_columns(plan: SourcePlan, *, keep_originals: bool, seq: str) -> list[str]:
    """The select list of ``records`` as SQL text (not a Kafka source's: ``kafka_source.record_columns``); ``seq`` is
    its ``SEQ`` column (numbered there, or by a projection below)."""
    where = dict(stage="source", component_id=plan.id, component_type=plan.spec.plugin)
    raw = C.quote(C.RAW)
    if plan.parser == "generator" and is_csv_file(plan.spec):  # a DLQ replay's payloads of a CSV source
        line = f"regexp_replace({raw}, {C.sql_string(chr(92) + 'r$')}, '')"  # without a CRLF ending's \r (the reader did not see it)
        separator = csv_separator(plan.spec)
        parsed = parsing.from_csv_text(line, plan.schema, separator=separator)
        value_of = lambda name: parsing.field_of(parsed, name)  # noqa: E731
        error = parsing.csv_error(line, value_of, parsing.parse_failed(raw, parsed), plan.schema, separator=separator, **where)
    elif plan.parser == "generator":  # also a DLQ replay's payloads, parsed with their source's limit
        limit = json_max_string_length(plan.spec)
        parsed = parsing.from_json_text(raw, plan.schema, max_string_length=limit)
        value_of = lambda name: parsing.field_of(parsed, name)  # noqa: E731
        error = parsing.json_error(raw, value_of, parsing.parse_failed(raw, parsed), plan.schema, what="record",
                                   max_string_length=limit, **where)
    else:
        value_of = lambda name: C.quote(plan.field_column(name))  # noqa: E731
        failed = f"({raw} IS NOT NULL)"
        if plan.parser == "csv":
            error = parsing.csv_error(raw, value_of, failed, plan.schema, separator=csv_separator(plan.spec), **where)
        elif plan.parser == "json":
            error = parsing.json_error(raw, value_of, failed, plan.schema, what="record",
                                       max_string_length=json_max_string_length(plan.spec), defer_reason=True, **where)
        else:  # parquet: typed already; only NOT NULL fields can fail
            error = parsing.json_error("CAST(NULL AS STRING)", value_of, "false", plan.schema, what="record", **where)
    names = [f.name for f in plan.schema.fields]
    fields = [f"{value_of(name)} AS {C.quote(name)}" for name in names]
    if plan.origin_in_columns:
        fields += [C.quote(FILE), C.quote(SPLIT)]
    originals = [f"{value_of(name)} AS {C.quote(plan.original_column(name))}" for name in names] if keep_originals else []
    # a line that parsed but breaks the schema (a NOT NULL field missing; CSV: a U+FFFD) keeps its fields as
    # read, for the DLQ. JSON / parquet: a missing field is the only error of a record without a rejected
    # text, a cheaper test than evaluating the error again.
    if plan.parser == "csv":
        broken = f"({error} IS NOT NULL)"
    else:
        broken = parsing.sql_or([f"({value_of(f.name)} IS NULL)" for f in plan.schema.fields if not f.nullable])
    as_read = f"CASE WHEN {broken} THEN to_json(struct({', '.join(f'{value_of(n)} AS {C.quote(n)}' for n in names)})) END"
    return [
        C.quote(C.SOURCE_ID),
        C.quote(C.SOURCE_INDEX),
        C.quote(C.POSITION),
        seq,
        f"coalesce({parsing.kept_text(raw) if plan.parser == 'json' else raw}, {as_read}) AS {C.quote(C.RAW)}",
        f"{error} AS {C.quote(C.ERROR)}",
        f"false AS {C.quote(C.FILTERED)}",
        *originals,
        *fields,
    ]
