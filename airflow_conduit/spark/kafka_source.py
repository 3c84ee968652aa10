"""Source ``kafka``: Spark's Kafka source, its values parsed like the file source's lines, its metadata for processors.

Each Kafka record is one record. Its value is parsed in the batch (``json``: ``from_json`` PERMISSIVE with
the corrupt-record field, as the file source's reader does; ``csv``: ``from_csv``; ``raw``: the value itself
as a ``value`` field), and a value that does not parse is a per-record error with the same reasons as a file
line (malformed, missing field, wrong type, invalid UTF-8; an empty or blank value is malformed, not a record of
NULL fields). A record without a value (a tombstone) is an
error for json and csv; a key or a header value that is not UTF-8 is an error of its own class
(``INVALID_UTF8_METADATA``): metadata are strings, and nothing is dropped or silently replaced.

Metadata (``METADATA``): ``_kafka_key``, ``_kafka_topic``, ``_kafka_partition``, ``_kafka_offset``,
``_kafka_timestamp``, ``_kafka_headers`` (a map; the last value of a repeated header name, as Kafka's
``Headers.lastHeader``). They travel like the runner's internal columns (``columns.is_internal``):
processors can read them (``field.set`` ``value: _kafka_key``), ``*`` does not expand to them and
destinations never write them, so a record's fields are its value's fields unless a processor copies
metadata into a field.

The DLQ keeps every record's value as it arrived (``record``): its text byte for byte, or base64 of its bytes
when they are not UTF-8 (a json / csv / raw string value that is not UTF-8 is always such a DLQ record,
class ``parsing.INVALID_UTF8``; with ``raw-type: binary`` every DLQ record of the source is base64).
Its position is ``source_file`` = ``topic/partition/offset``, ``source_split_start`` = the partition and
``source_position`` = the offset.

Offsets live in the query's checkpoint (Spark's Kafka source): ``starting-offsets`` only applies to a new
checkpoint, and available-now reads up to the end offsets it finds at start.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark import columns as C
from airflow_conduit.spark import parsing
from airflow_conduit.spark.kafka_options import client_options

SourcePlan = Any  # sources.SourcePlan (sources imports this module)
PLUGIN = "kafka"
KEY, TOPIC, PARTITION, OFFSET, TIMESTAMP, HEADERS = (
    "_kafka_key", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_headers",
)
METADATA: dict[str, T.DataType] = {
    KEY: T.StringType(),
    TOPIC: T.StringType(),
    PARTITION: T.IntegerType(),
    OFFSET: T.LongType(),
    TIMESTAMP: T.TimestampType(),
    HEADERS: T.MapType(T.StringType(), T.StringType()),
}
# As read (internal): the key's and the headers' bytes, until the record's columns are built.
_KEY_BYTES = "__ac_kkey"
_HEADER_BYTES = "__ac_kheaders"
TOPIC_COLUMN = "__ac_ktopic"  # a Kafka source's rows have it: the Kafka DLQ carries their records as read
_PARTITION = "__ac_kpartition"
_TIMESTAMP = "__ac_kts"
_VALUE_BYTES = "__ac_kvalue"  # the value as read (a string holding its bytes unchanged), kept for the Kafka DLQ
# The record as read, carried by the batch pass into the DLQ entries of nacked records (kafka_sink's Kafka DLQ):
ORIGINAL_KEY, ORIGINAL_VALUE, ORIGINAL_HEADERS = "__ac_o_key", "__ac_o_value", "__ac_o_headers"
HEADER_TYPE = "array<struct<key:string,value:binary>>"
INVALID_UTF8_METADATA = "airflow_conduit.spark.InvalidUtf8MetadataError"
NO_VALUE = "airflow_conduit.spark.NoValueError"


def value_format(plan: SourcePlan) -> str:
    return str(plan.spec.settings.get("format", "json"))


def raw_type(plan: SourcePlan) -> str:
    return str(plan.spec.settings.get("raw-type", "string"))


def value_schema(settings) -> T.StructType:
    """The record's fields: the value's schema (json, csv) or one ``value`` field (raw)."""
    if settings.get("format", "json") == "raw":
        dtype = T.BinaryType() if settings.get("raw-type", "string") == "binary" else T.StringType()
        return T.StructType([T.StructField("value", dtype, True)])
    schema = parsing.parse_schema(settings["schema"])
    clash = [f.name for f in schema.fields if f.name in METADATA]
    if clash:
        raise ValueError(
            f"settings.schema: field {clash[0]!r} has the name of the Kafka metadata column the source provides; "
            f"rename the field (metadata: {', '.join(METADATA)})"
        )
    return schema


def reader_options(settings) -> dict[str, str]:
    """Spark's Kafka source options of the source's settings (client options included: secrets revealed)."""
    options = dict(client_options(settings))
    if settings.get("topics"):
        options["subscribe"] = ",".join(settings["topics"])
    else:
        options["subscribePattern"] = str(settings["topic-pattern"])
    options["startingOffsets"] = str(settings.get("starting-offsets", "earliest"))
    options["failOnDataLoss"] = "true" if settings.get("fail-on-data-loss", True) else "false"
    if settings.get("max-records-per-batch"):
        options["maxOffsetsPerTrigger"] = str(int(settings["max-records-per-batch"]))
    options["includeHeaders"] = "true"
    return options


def read_stream(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    """The origin columns (position = offset, raw = the value's bytes as a string) and the record's metadata as read."""
    rows = spark.readStream.format("kafka").options(**reader_options(plan.spec.settings)).load()
    return rows.select(
        F.lit(plan.id).alias(C.SOURCE_ID),
        F.lit(plan.index).alias(C.SOURCE_INDEX),
        F.col("offset").alias(C.POSITION),
        F.col("value").cast("string").alias(C.RAW),  # the bytes unchanged (a cast, no decoding)
        F.col("key").alias(_KEY_BYTES),
        F.col("headers").alias(_HEADER_BYTES),
        F.col("topic").alias(TOPIC_COLUMN),
        F.col("partition").alias(_PARTITION),
        F.col("timestamp").alias(_TIMESTAMP),
    )


# -- where a DLQ record came from (sources.origin_*) ----------------------------------------------------------


def origin_file() -> Column:
    """``topic/partition/offset`` (a topic name holds no '/')."""
    return F.concat_ws("/", F.col(TOPIC_COLUMN), F.col(_PARTITION).cast("string"), F.col(C.POSITION).cast("string"))


def origin_split() -> Column:
    return F.col(_PARTITION).cast("long")


def origin_position() -> Column:
    return F.col(C.POSITION)


# -- the record's columns ------------------------------------------------------------------------------------


def original_record() -> dict[str, Column]:
    """The Kafka record as it was read: key, value bytes and headers (NULLs for a record of another source; the
    headers are an array, empty when none, for every Kafka record). Referenced only by the Kafka DLQ's entry,
    evaluated only for nacked records: Spark prunes the columns when nothing reads them."""
    kafka = F.col(TOPIC_COLUMN).isNotNull()
    return {
        ORIGINAL_KEY: F.col(_KEY_BYTES),
        ORIGINAL_VALUE: F.col(_VALUE_BYTES).cast("binary"),
        ORIGINAL_HEADERS: F.when(kafka, F.coalesce(F.col(_HEADER_BYTES), F.array().cast(HEADER_TYPE))),
    }


def _valid_utf8(binary: Column) -> Column:
    return F.is_valid_utf8(binary.cast("string"))


def _headers_map() -> Column:
    """The headers as map<string,string>, the last value of a repeated name (Kafka's ``lastHeader``)."""
    headers = F.coalesce(F.col(_HEADER_BYTES), F.array().cast(HEADER_TYPE))
    names = F.array_distinct(F.transform(headers, lambda h: h["key"]))
    values = F.transform(
        names, lambda name: F.element_at(F.filter(headers, lambda h: h["key"] == name), -1)["value"].cast("string")
    )
    return F.map_from_arrays(names, values)


def _bad_headers() -> Column:
    """Comma-separated names of the headers whose value is not UTF-8 (empty when none)."""
    headers = F.coalesce(F.col(_HEADER_BYTES), F.array().cast(HEADER_TYPE))
    bad = F.filter(headers, lambda h: h["value"].isNotNull() & ~_valid_utf8(h["value"]))
    return F.array_join(F.array_distinct(F.transform(bad, lambda h: h["key"])), ", ")


def _metadata_error(where: dict) -> Column:
    """An error for a key or a header value that is not UTF-8 (the bytes in hex in the message), else NULL."""
    key = F.col(_KEY_BYTES)
    bad_key = key.isNotNull() & ~_valid_utf8(key)
    bad_headers = _bad_headers()
    return (
        F.when(
            bad_key,
            C.error_struct(
                exception_class=INVALID_UTF8_METADATA,
                message=F.concat(F.lit("the record's key is not valid UTF-8 (key bytes, hex: "), F.hex(key), F.lit(")")),
                **where,
            ),
        ).when(
            F.length(bad_headers) > F.lit(0),
            C.error_struct(
                exception_class=INVALID_UTF8_METADATA,
                message=F.concat(
                    F.lit("the value of header(s) "), bad_headers,
                    F.lit(" is not valid UTF-8 (headers are strings in the record's _kafka_headers)"),
                ),
                **where,
            ),
        )
    )


def _no_value_error(fmt: str, where: dict) -> Column:
    return C.error_struct(
        exception_class=NO_VALUE,
        message=f"the record has no value (null, a tombstone): format {fmt} needs one",
        **where,
    )


def record_columns(plan: SourcePlan, *, keep_originals: bool, seq: Column) -> list[Column]:
    """``sources._record_columns`` for a Kafka source: origin, raw value, error, metadata and fields."""
    where = dict(stage="source", component_id=plan.id, component_type=PLUGIN)
    raw = C.quote(C.RAW)  # the value as SQL text: the parse and error expressions are SQL (parsing.py)
    value = F.col(C.RAW)
    fmt = value_format(plan)
    schema = plan.schema
    invalid_utf8, utf8_error = F.expr(parsing.is_invalid_utf8(raw)), F.expr(parsing.utf8_error(raw, where))
    if fmt == "json":
        parsed_sql = parsing.from_json_text(raw, schema)
        parsed = F.expr(parsed_sql)
        value_of = lambda name: parsed[name]  # noqa: E731
        # an empty or blank value parses to no struct at all, not to a corrupt record: it is malformed too (as a
        # DLQ replay's payload is, parsed by sources._record_columns), never a record of NULL fields
        failed = f"(({parsed_sql} IS NULL) OR ({parsing.field_of(parsed_sql, parsing.CORRUPT)} IS NOT NULL))"
        value_error = F.expr(parsing.json_error(raw, lambda name: parsing.field_of(parsed_sql, name), failed, schema,
                                                what="record", utf8_checked=True, **where))
    elif fmt == "csv":
        parsed_sql = parsing.from_csv_text(raw, schema, separator=",")
        parsed = F.expr(parsed_sql)
        value_of = lambda name: parsed[name]  # noqa: E731
        failed = f"({parsing.field_of(parsed_sql, parsing.CORRUPT)} IS NOT NULL)"
        value_error = F.expr(parsing.csv_error(raw, lambda name: parsing.field_of(parsed_sql, name), failed, schema,
                                               separator=",", **where))
    elif raw_type(plan) == "binary":
        value_of = lambda name: value.cast("binary")  # noqa: E731
        value_error = F.lit(None)
    else:
        value_of = lambda name: value  # noqa: E731
        value_error = F.when(invalid_utf8, utf8_error)
    error = _metadata_error(where)
    if fmt in ("json", "csv"):
        error = F.when(value.isNull(), _no_value_error(fmt, where)).when(invalid_utf8, utf8_error).otherwise(
            F.coalesce(error, value_error))
    else:
        error = F.coalesce(value_error, error)
    binary = fmt == "raw" and raw_type(plan) == "binary"
    kept = F.base64(value.cast("binary")) if binary else F.expr(parsing.kept_text(raw))
    fields = [value_of(f.name).alias(f.name) for f in schema.fields]
    originals = [value_of(f.name).alias(plan.original_column(f.name)) for f in schema.fields] if keep_originals else []
    key = F.col(_KEY_BYTES)
    metadata = [
        F.when(_valid_utf8(key), key.cast("string")).alias(KEY),
        F.col(TOPIC_COLUMN).alias(TOPIC),
        F.col(_PARTITION).alias(PARTITION),
        F.col(C.POSITION).alias(OFFSET),
        F.col(_TIMESTAMP).alias(TIMESTAMP),
        _headers_map().alias(HEADERS),
    ]
    return [
        F.col(C.SOURCE_ID),
        F.col(C.SOURCE_INDEX),
        F.col(C.POSITION),
        seq,
        kept.alias(C.RAW),
        error.alias(C.ERROR),
        F.lit(False).alias(C.FILTERED),
        F.col(TOPIC_COLUMN),
        F.col(_PARTITION),
        F.col(_KEY_BYTES),
        F.col(_HEADER_BYTES),
        value.alias(_VALUE_BYTES),
        *metadata,
        *originals,
        *fields,
    ]


def replayed_metadata() -> list[Column]:
    """The metadata columns of a record replayed from the DLQ, which keeps the value only: typed NULLs."""
    return [F.lit(None).cast(dtype).alias(name) for name, dtype in METADATA.items()]
