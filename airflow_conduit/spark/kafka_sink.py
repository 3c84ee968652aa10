"""Destination ``kafka`` and the Kafka dead letter queue: exactly once per batch through Spark's at-least-once sink.

Spark's Kafka sink writes each record at least once: a batch re-run after a crash (the commit marker of
``spark/commits.py`` not written) would write the batch again. This module makes the re-run write only
what the crashed attempt did not:

1. every record carries headers naming its batch: ``conduit.pipeline.id``, ``conduit.query.id`` (the
   streaming query's id, kept in the checkpoint: a new checkpoint restarts batch ids at 0 with a new id),
   ``conduit.batch.id`` and ``conduit.record.id`` (stable across a re-run of the same batch: Spark
   re-runs an uncommitted batch with the same input, read in the same partitions);
2. before the first attempt of batch ``n`` writes, each partition's end offset of the topic is recorded
   in ``STATE_DIR/kafka-intents/<destination-id>/<n>.json`` (written atomically, never rewritten by a
   later attempt of the same batch);
3. an attempt that finds the intent of its batch (and no commit marker: else it would not write) reads
   the topic from the recorded offsets to the current end with Spark's batch Kafka reader and writes
   only the records whose (query, batch, record id) are not there yet (a left anti join).

Every record of an earlier attempt sits at or after the recorded offsets (offsets only grow), in a
partition that existed then or was added since (read from its start). The proof and its one condition
(the earlier attempt's writers are gone when the re-run reads: true when its driver was killed in local
mode, and on a cluster once the dead driver's executors have exited) are in docs/exactly-once.md.

A DLQ record's value is the original record's bytes (a line of a file, the value of a Kafka record, whose
key and headers are kept as well); its error context is in Kafka Connect's ``__connect.errors.*`` headers
plus Conduit's own (docs/kafka.md, Kafka DLQ).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.pipeline.kafka_headers import (
    CONDUIT_DLQ_HEADERS,
    CONNECT,
    CONNECT_HEADERS,
    DLQ_COLUMNS_FROM_HEADERS,
    DLQ_HEADER,
    HEADER_BATCH,
    HEADER_PIPELINE,
    HEADER_QUERY,
    HEADER_RECORD,
)
from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic
from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError
from airflow_conduit.spark import columns as C
from airflow_conduit.spark.analysed_plan import AnalysedPlan, empty_batch_of
from airflow_conduit.spark.batch_numbers import checkpoint_query_id
from airflow_conduit.spark.destination_base import Destination
from airflow_conduit.spark.jvm import kafka_producer
from airflow_conduit.spark.jvm.kafka_admin import KafkaAdmin
from airflow_conduit.spark.jvm.kafka_producer import produce_in_driver
from airflow_conduit.spark.jvm.local_relations import in_driver, is_local
from airflow_conduit.spark.kafka_options import client_options

log = logging.getLogger(__name__)

RECORD_ID = "__ac_record_id"  # the column a Kafka writer dedups on (a string)
INTENTS = "kafka-intents"
CHECKPOINT = Path("checkpoints") / "pipeline"  # runner.QUERY_NAME's checkpoint
ADMIN_TIMEOUT_SECONDS = 120
KEEP_INTENTS = 100  # as many as the commit markers (commits.KEEP_BATCHES)
IN_DRIVER_LIMIT = 50_000  # DLQ records of a batch computed into the driver (in_driver); more are cached on the executors
HEADER_TYPE = "array<struct<key:string,value:binary>>"
DEFAULT_MAX_REQUEST_SIZE = 1_048_576  # the Java producer's max.request.size
# A record's bytes in a record batch beyond its key, value and header bytes (Kafka's v2 format, upper bounds):
BATCH_OVERHEAD = 61  # the batch header (one record per batch in the worst case)
RECORD_OVERHEAD = 21  # length, attributes, timestamp and offset deltas, key and value lengths (varints)
RECORD_HEADER_OVERHEAD = 10  # a header's key and value lengths (varints)
SIZE_GUARD = "__ac_size_guard"  # a DLQ record's column that refuses it when over the limit (size_guard)
OVER_LIMIT = "conduit-dlq-record-over-limit"  # brackets the size and record id in the guard's error message


class KafkaRecordTooLarge(FatalError):
    """A record is bigger than the topic (``max.message.bytes``) or the producer (``max.request.size``) takes.

    The batch fails before its commit: nothing is lost, and every restart fails the same way until the
    limit is raised (or, for a destination, the record made smaller), so it is fatal.
    """

    code = codes.FATAL


class KafkaDlqRecordTooLarge(KafkaRecordTooLarge):
    code = codes.DLQ_WRITE


def too_large(exc: BaseException) -> bool:
    """Whether Spark's Kafka write failed because a record exceeds a size limit (broker's or producer's)."""
    text = str(exc)
    return "RecordTooLargeException" in text or "MESSAGE_TOO_LARGE" in text


def record_size(key: Column, value: Column, headers: Column) -> Column:
    """A Kafka record's bytes as Kafka stores it (key, value, headers, record and batch overhead: upper bounds)."""
    header_bytes = F.aggregate(
        headers, F.lit(0), lambda acc, h: acc + F.length(h["key"]) + F.coalesce(F.length(h["value"]), F.lit(0))
        + F.lit(RECORD_HEADER_OVERHEAD))
    return (F.coalesce(F.length(value), F.lit(0)) + F.coalesce(F.length(key), F.lit(0)) + header_bytes
            + F.lit(RECORD_OVERHEAD + BATCH_OVERHEAD))


def size_guard(limit: int) -> Column:
    """Over Kafka records (``key``, ``value``, ``headers``, ``RECORD_ID``): NULL for a record of at most ``limit``
    bytes; computing a bigger one fails with ``raise_error`` naming its size and id (``over_limit`` reads them
    back). A projection of the records' own plan, so the check costs no query of its own: records computed in the
    driver are checked when the optimizer folds them into a local relation, before any is produced; others when
    they are cached, before Spark's Kafka sink writes any."""
    size = record_size(F.col("key"), F.col("value"), F.col("headers"))
    refusal = F.concat(F.lit(OVER_LIMIT + " "), size.cast("string"), F.lit(" "), F.col(RECORD_ID), F.lit(" " + OVER_LIMIT))
    return F.when(size > F.lit(limit), F.raise_error(refusal)).alias(SIZE_GUARD)


def over_limit(exc: BaseException) -> tuple[str, int] | None:
    """(record id, bytes) of the record ``size_guard`` refused, when ``exc`` is its error; else None."""
    found = re.search(rf"{OVER_LIMIT} (\d+) (.*?) {OVER_LIMIT}", str(exc), re.DOTALL)
    return (found.group(2), int(found.group(1))) if found else None


# -- where the batch is: the query's identity, the intents ---------------------------------------------


def query_identity(state_dir: Path) -> str:
    """The streaming query's id from the checkpoint (it changes with a new checkpoint, whose batch ids
    restart at 0); a folder without a checkpoint (a DLQ replay's) gets an id of its own, kept there."""
    query_id = checkpoint_query_id(state_dir / CHECKPOINT)
    if query_id is not None:
        return query_id
    own = state_dir / INTENTS / "identity.json"
    saved = read_json(own)
    if saved is None:
        saved = {"id": f"local-{uuid.uuid4()}"}
        write_json_atomic(own, saved)
    return str(saved["id"])


class IntentLog:
    """``STATE_DIR/kafka-intents/<destination-id>/<batch>.json``: the topic's end offsets before a batch's first write."""

    def __init__(self, state_dir: Path, destination_id: str):
        self.root = state_dir / INTENTS / destination_id

    def path(self, batch_id: int) -> Path:
        return self.root / f"{batch_id}.json"

    def get(self, batch_id: int, query_id: str, topic: str) -> dict[str, int] | None:
        """The recorded offsets (partition -> offset) of this batch of this query, or None."""
        data = read_json(self.path(batch_id))
        if not data or data.get("query_id") != query_id or data.get("topic") != topic:
            return None  # none, or one of an earlier checkpoint's batch with the same number
        return {int(p): int(o) for p, o in data["offsets"].items()}

    def record(self, batch_id: int, query_id: str, topic: str, offsets: dict[int, int]) -> None:
        write_json_atomic(
            self.path(batch_id),
            {"query_id": query_id, "batch_id": batch_id, "topic": topic, "offsets": {str(p): o for p, o in offsets.items()},
             "at": utc_now_iso()},
            durable=False,  # per batch: see write_json_atomic
        )
        if batch_id >= 0:
            self.path(batch_id - KEEP_INTENTS).unlink(missing_ok=True)


class CompiledRecords(kafka_producer.CompiledProjections):
    """The Kafka DLQ's records of its rows (``records`` and its ``size_guard``), optimised once per run and kept as
    compiled projections: each batch's rows, computed in the driver, go through them to Spark's Kafka writer task,
    with no plan of their own to analyse, optimise and plan per batch.

    Built from a batch's ``records`` over its ``rows``: the kept nodes above the rows (``AnalysedPlan``: only
    deterministic expressions, no other relation) put over a stand-in of the rows that the optimizer cannot fold (a
    ``LogicalRDD`` with their attributes), optimised, and taken when the optimised plan is projections over the
    stand-in alone (``jvm/kafka_producer.CompiledProjections``, which compiles and produces them)."""

    def __init__(self, spark: SparkSession, records: DataFrame, rows: DataFrame):
        stand_in = empty_batch_of(spark, rows)
        over = AnalysedPlan(records, rows, check_ahead=False).over(stand_in)
        if over is None:
            raise ValueError("the records' plan is not projections of the rows alone")
        super().__init__(spark, rows, over, stand_in)


def header(headers: Column, name: str) -> Column:
    """The (first) value of header ``name`` as a string, NULL when absent."""
    return F.try_element_at(F.filter(headers, lambda h: h["key"] == F.lit(name)), F.lit(1))["value"].cast("string")


def _string_header(name: str, value: Column) -> Column:
    return F.struct(F.lit(name).alias("key"), value.cast("string").cast("binary").alias("value"))


# -- the writer ------------------------------------------------------------------------------------------


class KafkaWriter(Destination):
    """What the destination and the DLQ share: client options, the intent, the read-back, the write."""

    wants_record_id = True
    # Spark's Kafka sink runs the batch's plan as a query of its own: an observation on it is never
    # reported, so the pass is carried by another destination or a noop write, and this one reads again.
    carries_a_pass = False
    state_dir: Path | None = None
    pipeline_id = ""

    kafka_sources: dict[str, dict[str, Any]] = {}

    def attach(self, state_dir: Path, spec: Any) -> None:
        self.state_dir = Path(state_dir)
        self.pipeline_id = spec.id
        self.kafka_sources = {s.id: dict(s.settings) for s in spec.sources if s.plugin.removeprefix("builtin:") == "kafka"}

    @property
    def topic(self) -> str:
        return str(self.settings["topic"])

    def options(self) -> dict[str, str]:
        return client_options(self.settings)

    def batch_headers(self, query_id: str, batch_id: int, record_id: Column) -> list[Column]:
        return [
            _string_header(HEADER_PIPELINE, F.lit(self.pipeline_id)),
            _string_header(HEADER_QUERY, F.lit(query_id)),
            _string_header(HEADER_BATCH, F.lit(batch_id)),
            _string_header(HEADER_RECORD, record_id),
        ]

    def records(self, df: DataFrame, batch_id: int, query_id: str) -> DataFrame:  # pragma: no cover - abstract
        """``df`` as Kafka records: ``key``, ``value``, ``headers`` and ``RECORD_ID``."""
        raise NotImplementedError

    @functools.cached_property
    def admin(self) -> KafkaAdmin:
        """The run's admin client of the topic's cluster (end offsets for every batch's intent); closed by ``close``."""
        return KafkaAdmin(self.spark, self.options(), ADMIN_TIMEOUT_SECONDS)

    def close(self) -> None:
        if "admin" in self.__dict__:
            self.admin.close()

    def written_before(self, offsets: dict[int, int], query_id: str, batch_id: int) -> DataFrame:
        """The record ids of this batch already in the topic at or after the recorded offsets."""
        now = self.admin.end_offsets(self.topic, partitions_now=True)
        starting = {str(p): offsets.get(p, -2) for p in sorted(now)}  # a partition added since: from its start
        ending = {str(p): o for p, o in sorted(now.items())}
        frame = (
            self.spark.read.format("kafka").options(**self.options())
            .option("assign", json.dumps({self.topic: sorted(now)}))
            .option("startingOffsets", json.dumps({self.topic: starting}))
            .option("endingOffsets", json.dumps({self.topic: ending}))
            .option("includeHeaders", "true")
            .option("failOnDataLoss", "false")  # records removed by retention since were written: not again
            .load()
        )
        mine = (header(F.col("headers"), HEADER_QUERY) == F.lit(query_id)) & (
            header(F.col("headers"), HEADER_BATCH) == F.lit(str(batch_id))
        )
        return frame.where(mine).select(header(F.col("headers"), HEADER_RECORD).alias(RECORD_ID)).distinct()

    _found_earlier = 0

    def found_from_earlier_attempts(self) -> int:
        found, self._found_earlier = self._found_earlier, 0
        return found

    def write(self, df: DataFrame, batch_id: int) -> None:
        self._found_earlier = 0
        if self.state_dir is None:
            raise RuntimeError(f"Kafka destination {self.id!r} was not attached to a state directory")
        try:
            self._write_batch(df, batch_id)
        except Exception as exc:
            over = over_limit(exc) if self.measures_sizes else None  # the DLQ's records' size_guard refused one
            if over is None:
                raise
            raise self.too_large_error(df, batch_id, over, self.size_limit) from None

    def _write_batch(self, df: DataFrame, batch_id: int) -> None:
        query_id = query_identity(self.state_dir)
        intents = IntentLog(self.state_dir, self.id)
        recorded = intents.get(batch_id, query_id, self.topic)
        told_few = self.nacked_origins is not None and len(self.nacked_origins) <= IN_DRIVER_LIMIT  # by the pass: no plan asked
        few = self.measures_sizes and (told_few or is_local(df))
        if few and recorded is None and self._produce_compiled(df, batch_id, query_id, intents):
            return
        records = self.records(df, batch_id, query_id)
        if recorded is None:
            intents.record(batch_id, query_id, self.topic, self.admin.end_offsets(self.topic))
        else:
            log.info("%s: an earlier attempt of batch %s may have written some of its records; writing only the others",
                     self.id, batch_id)
            before = self.written_before(recorded, query_id, batch_id)
            self._found_earlier = before.count()  # the run report counts what this run writes (a re-run only)
            records = records.join(before, RECORD_ID, "left_anti")
        if few:  # measured, then produced from the driver: computed there once (no Spark job for a local relation)
            if not is_local(records):
                records = in_driver(records)
            self._produce(records, batch_id)
            return
        if self.measures_sizes:  # many: measured, then written by Spark's Kafka sink; computed once, cached
            records = records.persist()
        try:
            self._write(records, batch_id)
        finally:
            self.nacked_origins = None
            if self.measures_sizes and records.is_cached:
                records.unpersist()

    def compiled(self, df: DataFrame, batch_id: int, query_id: str) -> CompiledRecords | None:  # noqa: ARG002
        """The run's compiled records of rows like ``df`` (``CompiledRecords``), or None (a writer without them)."""
        return None

    def _produce_compiled(self, df: DataFrame, batch_id: int, query_id: str, intents: IntentLog) -> bool:
        """Few rows of a first attempt produced through the run's compiled records: the intent recorded, then every
        record computed and checked, then produced. False (nothing done) when they cannot be."""
        compiled = self.compiled(df, batch_id, query_id)
        rows = compiled.rows_of(df) if compiled is not None else None
        if rows is None:
            return False
        intents.record(batch_id, query_id, self.topic, self.admin.end_offsets(self.topic))
        self.nacked_origins = None
        try:
            compiled.produce(rows, self.producer_config, self.topic)
        except Exception as exc:
            if too_large(exc) and over_limit(exc) is None:
                raise self.too_large_error(self.records(df, batch_id, query_id), batch_id) from exc
            raise
        return True

    @functools.cached_property
    def producer_config(self):
        """The Java producer's configuration (``kafka_producer.producer_config``), built once per run."""
        return kafka_producer.producer_config(self.spark, self.options())

    def _produce(self, records: DataFrame, batch_id: int) -> None:
        """Few records computed in the driver (their sizes checked then: ``size_guard``), produced from there
        (``produce_in_driver``)."""
        self.nacked_origins = None
        try:
            produce_in_driver(self.spark, records, self.producer_config, self.topic)
        except Exception as exc:
            if too_large(exc):
                raise self.too_large_error(records, batch_id) from exc
            raise

    def _write(self, records: DataFrame, batch_id: int) -> None:
        self.check_sizes(records, batch_id)
        out = records.select("key", "value", "headers")
        try:
            out.write.format("kafka").options(**self.options()).option("topic", self.topic).save()
        except Exception as exc:
            if too_large(exc):
                raise self.too_large_error(records, batch_id) from exc
            raise

    measures_sizes = False  # check_sizes reads the records before they are written (they are computed once, in_driver)

    def check_sizes(self, records: DataFrame, batch_id: int) -> None:
        """Refuse a batch with a record the topic would refuse, before writing any (a destination: the broker says)."""

    def too_large_error(self, records: DataFrame, batch_id: int) -> KafkaRecordTooLarge:
        return KafkaRecordTooLarge(
            f"destination {self.id!r}: a record of batch {batch_id} is larger than topic {self.topic!r} accepts "
            "(the topic's max.message.bytes, or the producer's max.request.size, default 1 MB): raise the topic's "
            "max.message.bytes and the destination's options max.request.size, or make the record smaller; the batch "
            "was not committed, nothing is lost"
        )


def _as_bytes(value: Column, data_type: T.DataType) -> Column:
    """A Kafka key or value from any column: bytes and strings as they are, structs / arrays / maps as JSON."""
    if isinstance(data_type, (T.BinaryType, T.StringType)):
        return value
    if isinstance(data_type, (T.StructType, T.ArrayType, T.MapType)):
        return F.to_json(value)
    return value.cast("string")


class KafkaDestination(KafkaWriter):
    """Destination ``kafka``: each record is one Kafka record of ``topic``."""

    def records(self, df: DataFrame, batch_id: int, query_id: str) -> DataFrame:
        fields = [c for c in df.columns if not C.is_internal(c)]
        record_id = F.col(C.SEQ).cast("string")
        with_values = df.select(
            "*",
            F.expr(self.settings["key"]).alias("__ac_k") if self.settings.get("key") else F.lit(None).cast("binary").alias("__ac_k"),
            F.expr(self.settings["value"]).alias("__ac_v") if self.settings.get("value")
            else F.to_json(F.struct(*[C.col(f) for f in fields])).alias("__ac_v"),
        )
        types = {f.name: f.dataType for f in with_values.schema.fields}
        headers = self.batch_headers(query_id, batch_id, record_id)
        headers += [_string_header(name, F.lit(value)) for name, value in (self.settings.get("headers") or {}).items()]
        headers += [_string_header(name, C.col(name)) for name in self.settings.get("header-fields") or []]
        return with_values.select(
            _as_bytes(F.col("__ac_k"), types["__ac_k"]).alias("key"),
            _as_bytes(F.col("__ac_v"), types["__ac_v"]).alias("value"),
            F.array(*headers).cast(HEADER_TYPE).alias("headers"),
            record_id.alias(RECORD_ID),
        )


# -- the dead letter queue ---------------------------------------------------------------------------------

def dlq_record_id(df: DataFrame) -> Column:
    """A DLQ record's identity in its batch: where the record came from (the same on a re-run of the batch)."""
    parts = ["source_id", "source_file", "source_split_start", "source_position"]
    return F.concat_ws("|", *[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in parts if c in df.columns])


def dlq_value(df: DataFrame) -> Column:
    """The original record's bytes: a line that is not UTF-8 is kept base64-encoded in ``record`` (its message
    says so), decoded here; every other ``record`` is its text."""
    from airflow_conduit.spark.parsing import INVALID_UTF8

    record = F.col("record")
    encoded = (F.col("exception_class") == F.lit(INVALID_UTF8)) & F.col("exception_message").contains("base64")
    decoded = F.try_to_binary(record, F.lit("base64"))
    return F.when(encoded & decoded.isNotNull(), decoded).otherwise(record.cast("binary"))


ORIGINAL_SOURCE, ORIGINAL_POSITION = "__ac_o_source", "__ac_o_position"


class KafkaDeadLetterQueue(KafkaWriter):
    """DLQ plugin ``kafka``: one Kafka record per nacked record, the original bytes as its value."""

    wants_local_rows = True  # few DLQ records are computed and produced in the driver: no Spark job
    wants_origins = True  # how many, read by the pass with its counts: few rows not local (a file's lines) are collected

    def carried_in_entry(self, columns: list[str]) -> dict[str, Column]:
        """A Kafka source's record as read (key, value bytes, headers), carried by the pass into the DLQ entry."""
        from airflow_conduit.spark import kafka_source

        return kafka_source.original_record() if self.kafka_sources and kafka_source.TOPIC_COLUMN in columns else {}

    def _from_kafka(self) -> Column:
        """The DLQ row is of a record a Kafka source read (its ``source_file`` is ``topic/partition/offset``)."""
        return F.col("source_id").isin(list(self.kafka_sources)) if self.kafka_sources else F.lit(False)

    def kafka_originals(self, df: DataFrame) -> DataFrame | None:
        """The Kafka records the DLQ rows of Kafka sources came from, read again from their topics (key,
        value and headers byte for byte), keyed by (source id, ``topic/partition/offset``); None without any.

        Each source's partitions are read from the lowest to the highest nacked offset of the rows.
        """
        if not self.kafka_sources:
            return None
        origins = self.nacked_origins
        if origins is None:  # not told by the batch pass: from the rows, one Spark job
            origins = [tuple(row) for row in df.select("source_id", "source_file").collect()]
        spots = {(o[0], o[1]) for o in origins if o[0] in self.kafka_sources and o[1]}
        ranges: dict[str, dict[str, dict[int, list[int]]]] = {}
        for source_id, where in sorted(spots):
            topic, partition, offset = where.rsplit("/", 2)
            low_high = ranges.setdefault(source_id, {}).setdefault(topic, {}).setdefault(int(partition), [int(offset)] * 2)
            low_high[0], low_high[1] = min(low_high[0], int(offset)), max(low_high[1], int(offset))
        frames = []
        for source_id, topics in ranges.items():
            frame = (
                self.spark.read.format("kafka").options(**client_options(self.kafka_sources[source_id]))
                .option("assign", json.dumps({t: sorted(ps) for t, ps in topics.items()}))
                .option("startingOffsets", json.dumps({t: {str(p): r[0] for p, r in ps.items()} for t, ps in topics.items()}))
                .option("endingOffsets", json.dumps({t: {str(p): r[1] + 1 for p, r in ps.items()} for t, ps in topics.items()}))
                .option("includeHeaders", "true")
                .option("failOnDataLoss", "false")  # gone since (retention): the DLQ row's own text is used
                .load()
            )
            frames.append(frame.select(
                F.lit(source_id).alias(ORIGINAL_SOURCE),
                F.concat_ws("/", "topic", F.col("partition").cast("string"), F.col("offset").cast("string")).alias(ORIGINAL_POSITION),
                F.col("key").alias("__ac_o_key"), F.col("value").alias("__ac_o_value"), F.col("headers").alias("__ac_o_headers"),
            ))
        return functools.reduce(DataFrame.unionByName, frames) if frames else None

    def connect_position(self) -> list[Column]:
        """Connect's topic / partition / offset headers: a Kafka source's record's own; a file's path and line."""
        kafka = self._from_kafka()
        topic = F.when(kafka, F.substring_index(F.col("source_file"), "/", 1)).otherwise(F.col("source_file"))
        return [
            _string_header(CONNECT + "topic", F.coalesce(topic, F.col("source_id"))),
            _string_header(CONNECT + "partition", F.when(kafka, F.col("source_split_start"))),
            _string_header(CONNECT + "offset", F.col("source_position")),
        ]

    @functools.cached_property
    def _selects(self) -> dict:
        return {}

    def _ours(self, columns: tuple[str, ...], batch: Column, query_id: str, record_id: Column) -> Column:
        """The DLQ's own headers (a header whose value is NULL left out)."""
        present = set(columns)
        headers = [_string_header(HEADER_PIPELINE, F.lit(self.pipeline_id)), _string_header(HEADER_QUERY, F.lit(query_id)),
                   _string_header(HEADER_BATCH, batch), _string_header(HEADER_RECORD, record_id)]
        headers += self.connect_position()
        for name, column in CONNECT_HEADERS:
            if name not in ("topic", "partition", "offset") and column in present:
                headers.append(_string_header(CONNECT + name, F.col(column)))
        headers += [_string_header(DLQ_HEADER + c, F.col(c)) for c in CONDUIT_DLQ_HEADERS if c in present]
        return F.filter(F.array(*headers).cast(HEADER_TYPE), lambda h: h["value"].isNotNull())

    def records(self, df: DataFrame, batch_id: int, query_id: str) -> DataFrame:
        from airflow_conduit.spark.kafka_source import ORIGINAL_HEADERS, ORIGINAL_KEY, ORIGINAL_VALUE

        columns = tuple(df.columns)
        if ORIGINAL_HEADERS in columns:  # carried by the pass: the select list is built once per run
            key = (columns, query_id)
            if key not in self._selects:
                record_id = dlq_record_id(df)
                ours = self._ours(columns, F.col("batch_id"), query_id, record_id)  # the rows' batch id: batch_id
                original = F.col(ORIGINAL_HEADERS)  # an array for every Kafka record, NULL for another source's
                self._selects[key] = C.JvmColumns([
                    F.col(ORIGINAL_KEY).alias("key"),
                    F.when(original.isNotNull(), F.col(ORIGINAL_VALUE)).otherwise(dlq_value(df)).alias("value"),
                    F.concat(F.coalesce(original, F.array().cast(HEADER_TYPE)), ours).alias("headers"),  # the original's first
                    record_id.alias(RECORD_ID),
                ])
            return self._guarded(C.select(df, self._selects[key]))
        return self._records_read_back(df, batch_id, query_id)

    def compiled(self, df: DataFrame, batch_id: int, query_id: str) -> CompiledRecords | None:
        """The records of rows carrying their Kafka record (``records``' select list, kept per run), compiled once per
        run from its first DLQ rows (``CompiledRecords``); None for other rows (a replay's) or where they cannot be."""
        from airflow_conduit.spark.kafka_source import ORIGINAL_HEADERS

        key = ("compiled", query_id)  # rows of another schema are refused by its rows_of
        if key not in self._selects:
            self._selects[key] = None
            if ORIGINAL_HEADERS in df.columns:
                try:
                    self._selects[key] = CompiledRecords(self.spark, self.records(df, batch_id, query_id), df)
                except Exception:  # noqa: BLE001 - an optimisation: the records are then planned at every batch
                    log.debug("the Kafka DLQ's records are not compiled; they are planned at every batch", exc_info=True)
        return self._selects[key]

    def _records_read_back(self, df: DataFrame, batch_id: int, query_id: str) -> DataFrame:
        """Records of DLQ rows the pass carried no Kafka record for (a replay's): a Kafka source's read back."""
        record_id = dlq_record_id(df)
        ours = self._ours(tuple(df.columns), F.lit(batch_id), query_id, record_id)
        key, value = F.lit(None).cast("binary"), dlq_value(df)
        originals = self.kafka_originals(df)
        if originals is not None:
            on = (df["source_id"] == originals[ORIGINAL_SOURCE]) & (df["source_file"] == originals[ORIGINAL_POSITION])
            df = df.join(F.broadcast(originals), on, "left")
            key, value = F.col("__ac_o_key"), F.when(F.col(ORIGINAL_SOURCE).isNotNull(), F.col("__ac_o_value")).otherwise(value)
            ours = F.concat(F.coalesce(F.col("__ac_o_headers"), F.array().cast(HEADER_TYPE)), ours)  # the original's first
        return self._guarded(df.select(key.alias("key"), value.alias("value"), ours.alias("headers"), record_id.alias(RECORD_ID)))

    def _guarded(self, records: DataFrame) -> DataFrame:
        """``records`` with their ``size_guard`` (a projection of its own over them: in theirs, the headers' expression
        would be built and evaluated twice)."""
        if "guard" not in self._selects:
            self._selects["guard"] = C.JvmColumns([F.col("*"), size_guard(self.size_limit)])
        return C.select(records, self._selects["guard"])

    measures_sizes = True

    @functools.cached_property
    def size_limit(self) -> int:
        """The biggest record the DLQ topic and the producer take (read once per run: a record over it fails the
        run, and raising the limit takes a restart)."""
        return min(self.admin.max_message_bytes(self.topic),
                   int(self.options().get("kafka.max.request.size", DEFAULT_MAX_REQUEST_SIZE)))

    def check_sizes(self, records: DataFrame, batch_id: int) -> None:
        """Every DLQ record is measured before any is written: one the topic (``max.message.bytes``) or the producer
        (``max.request.size``) would refuse stops the batch (a refusal by the broker would surface only after the
        producer's retries, ``delivery.timeout.ms``, 2 minutes, as a timeout). The records' ``size_guard`` column
        does it when they are computed: here, the many records Spark's Kafka sink writes, into their cache."""
        records.count()

    def _biggest(self, records: DataFrame) -> tuple[str, int] | None:
        """(record id, bytes) of the biggest record as Kafka stores it (key, value, headers, record overhead)."""
        if "sizes" not in self._selects:
            size = record_size(F.col("key"), F.col("value"), F.col("headers"))
            self._selects["sizes"] = C.JvmColumns([size.alias("size"), F.col(RECORD_ID)])
        rows = C.select(records, self._selects["sizes"]).collect()  # few: no sort (a shuffle, more jobs)
        biggest = max(rows, key=lambda row: row["size"], default=None)
        return (biggest[RECORD_ID], int(biggest["size"])) if biggest else None

    def too_large_error(self, records: DataFrame, batch_id: int, over: tuple[str, int] | None = None,
                        limit: int | None = None) -> KafkaRecordTooLarge:
        """``over``: (record id, bytes) of a record over ``limit`` (``size_guard`` found it); else the biggest, measured."""
        which = f" (one of them: {over[0]}, about {over[1]:,} bytes" if over else ""
        if not over:
            biggest = self._biggest(records)
            which = f" (the biggest: {biggest[0]}, about {biggest[1]:,} bytes" if biggest else " ("
        which += f"; the limit: {limit:,} bytes)" if limit else ")"
        return KafkaDlqRecordTooLarge(
            f"dead letter queue: a DLQ record of batch {batch_id} is larger than topic {self.topic!r} accepts{which}; "
            "raise the topic's max.message.bytes (and the DLQ's options max.request.size above 1 MB for bigger "
            "records): the batch was not committed and no destination committed it, nothing is lost; the restart "
            "writes it once the limit allows"
        )


# -- reading the DLQ back (dlq replay, the UI) --------------------------------------------------------------

def kafka_dlq_frame(spark: SparkSession, dlq: KafkaWriter) -> DataFrame:
    """The DLQ topic from its earliest retained record to its end now, as the DLQ's columns (``record``: the
    value as text; a value that is not UTF-8 base64-encoded, as the file DLQ keeps it) plus the DLQ record's
    own position ``dlq_topic`` / ``dlq_partition`` / ``dlq_offset``."""
    frame = (
        spark.read.format("kafka").options(**dlq.options())
        .option("subscribe", dlq.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .load()
    )
    headers = F.col("headers")
    text = F.col("value").cast("string")
    utf8 = F.try_validate_utf8(text).isNotNull()
    return frame.select(
        *[header(headers, name).cast(kind).alias(column) for column, name, kind in DLQ_COLUMNS_FROM_HEADERS],
        F.when(F.col("value").isNull(), F.lit(None)).when(utf8, text).otherwise(F.base64("value")).alias("record"),
        F.col("topic").alias("dlq_topic"),
        F.col("partition").alias("dlq_partition"),
        F.col("offset").alias("dlq_offset"),
    )


def read_kafka_dlq(spark: SparkSession, dlq: KafkaWriter) -> list[dict[str, Any]]:
    """Every record of a Kafka DLQ (see ``kafka_dlq_frame``), as dicts, for ``dlq replay``."""
    return [row.asDict(recursive=True) for row in kafka_dlq_frame(spark, dlq).collect()]
