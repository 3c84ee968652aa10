"""Expectations and quarantine for open-source SDP, built only on SDP's public API.

``quarantined_table`` declares, inside a project's definitions file, a streaming table fed by one PERMISSIVE
read and checked by expectations, each with an action:

- ``warn``: the record is kept; the rule's failures are counted;
- ``drop``: the record is left out of the table and counted;
- ``quarantine``: the record goes to ``<table>_quarantine`` instead, with its raw record and KIP-298-style
  context (rule, flow, source file or topic/partition/offset, time); a malformed record (the read's corrupt
  record column set) always does;
- ``fail``: the run stops with ``CONDUIT_EXPECTATION_FAILED`` naming the rule and the flow, which the engine
  classifies as fatal (code 2210): the pipeline is degraded, not restarted.

The read is a temporary view (``<table>_checked``) with one verdict column per rule; two append flows read it:
``<table>`` (the records that pass) and ``<table>_quarantine``. Each flow counts its records with
``DataFrame.observe``, which reaches the runner's streaming listener; the run report gets per-rule counts
(``totals.expectations``), the quarantined records as its DLQ count. Needs pyspark only where it is called.

A ``source`` that takes ``path=`` is replayable (``replay.py``): the view also reads the table's replay inbox
(``<warehouse>/_conduit_replay/<table>``) with that same source, so replayed records are parsed and checked by the
flow's current code and reach ``<table>`` or the quarantine through the flows' own checkpoints, exactly once.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

ACTIONS = ("warn", "drop", "quarantine", "fail")
ERROR_NAME = "CONDUIT_EXPECTATION_FAILED"  # the named error of a `fail` rule (recovery/codes.py EXPECTATION_FAILED)
CORRUPT_RECORD = "_corrupt_record"
MALFORMED_RULE = "malformed_record"  # the implicit quarantine rule of a record the PERMISSIVE read could not parse
OBSERVATION = "conduit_expectations"  # observation names: conduit_expectations|<kind>|<target>
QUARANTINE_SUFFIX = "_quarantine"
REPLAY_FOLDER = "_conduit_replay"  # <warehouse>/_conduit_replay/<table>: the replay inbox of a quarantined table
WAREHOUSE_CONF = "spark.sql.warehouse.dir"
QUARANTINE_COLUMNS = ("quarantine_id", "record", "record_bytes", "rule", "rules", "error", "flow", "source_file",
                      "source_topic", "source_partition", "source_offset", "failed_at")


@dataclass(frozen=True)
class Expectation:
    """One rule: a Spark SQL boolean condition a record must meet, and what happens to a record that does not."""

    name: str
    condition: str
    action: str = "warn"

    def __post_init__(self):
        if self.action not in ACTIONS:
            raise ValueError(f"expectation {self.name!r}: action must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        if not self.name or "|" in self.name or ":" in self.name:
            raise ValueError(f"expectation name {self.name!r}: a non-empty name without '|' or ':'")


def expect(name: str, condition: str, action: str = "warn") -> Expectation:
    return Expectation(name, condition, action)


def quarantine_table_name(table: str) -> str:
    return f"{table}{QUARANTINE_SUFFIX}"


def replay_inbox(warehouse: str, table: str) -> str:
    """The folder a replay stages a table's quarantined records in (read by the table's checked view)."""
    return os.path.join(os.path.abspath(str(warehouse).removeprefix("file://").removeprefix("file:")), REPLAY_FOLDER, table)


def accepts_path(source: Callable[..., Any]) -> bool:
    """A source that takes ``path=`` can read the replay inbox with the same parse as its own input."""
    try:
        parameters = inspect.signature(source).parameters
    except (TypeError, ValueError):
        return False
    return "path" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def permissive(reader: Any, schema: str) -> Any:
    """A stream reader in PERMISSIVE mode whose malformed records keep their text in ``_corrupt_record``."""
    return (reader.schema(f"{schema}, {CORRUPT_RECORD} STRING").option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_RECORD))


def column_names(schema: str) -> list[str]:
    """The top-level column names of a DDL schema (``"id INT, tags ARRAY<STRING>, m MAP<STRING, INT>"``).

    Read here, not from the DataFrame: SDP refuses analysis (``df.columns``) inside a query function.
    """
    names, depth, start = [], 0, 0
    for index, char in enumerate(schema + ","):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            part = schema[start:index].strip()
            if part:
                names.append(part.split()[0].strip("`"))
            start = index + 1
    return names


def quarantined_table(name: str, source: Callable[[], Any], expectations: Sequence[Expectation], *, schema: str,
                      kafka: bool = False, comment: str | None = None) -> None:
    """Declare ``name`` and ``name``_quarantine (streaming tables) fed from ``source()`` through ``expectations``.

    ``schema``: the records' columns (DDL), as given to ``permissive``; ``source()`` returns them with
    ``_corrupt_record``; a ``source`` taking ``path=`` makes the table replayable (``replay.py``). ``kafka``: the source also has Kafka's ``topic``, ``partition``, ``offset`` and ``value``
    columns (the quarantine keeps them as context and raw bytes).
    """
    from pyspark import pipelines as dp
    from pyspark.sql import functions as F

    rules = list(expectations)
    names = [rule.name for rule in rules]
    if len(set(names)) != len(names) or MALFORMED_RULE in names:
        raise ValueError(f"table {name}: expectation names must be unique and not {MALFORMED_RULE!r}: {names}")
    checked_view, quarantine = f"{name}_checked", quarantine_table_name(name)
    verdict = {rule.name: f"__conduit_ok_{index}" for index, rule in enumerate(rules)}

    replayable = not kafka and accepts_path(source)

    @dp.temporary_view(name=checked_view)
    def checked():
        df = source()
        if replayable:  # the inbox exists before the stream starts: a file stream over a missing path fails
            inbox = replay_inbox(spark_of().conf.get(WAREHOUSE_CONF), name)
            os.makedirs(inbox, exist_ok=True)
            df = df.unionByName(source(path=inbox))
        df = df.withColumn("__conduit_parsed", F.col(CORRUPT_RECORD).isNull())
        for rule in rules:  # a rule is judged only on a parsed record; null counts as failed
            df = df.withColumn(verdict[rule.name], ~F.col("__conduit_parsed") | F.coalesce(F.expr(rule.condition), F.lit(False)))
        return df.withColumn("__conduit_file", F.input_file_name()).withColumn("__conduit_raw", F.col(CORRUPT_RECORD))

    columns = column_names(schema)

    def quarantined(col: Callable[[str], Any]) -> Any:
        failed = [~col(verdict[r.name]) for r in rules if r.action == "quarantine"]
        condition = ~col("__conduit_parsed")
        for item in failed:
            condition = condition | item
        return condition

    dp.create_streaming_table(name=name, comment=comment)
    dp.create_streaming_table(name=quarantine, comment=f"records of {name} quarantined by its expectations")

    @dp.append_flow(target=name, name=name)
    def to_table():
        df = spark_of().readStream.table(checked_view)
        kept = ~quarantined(F.col)
        for rule in rules:
            if rule.action == "drop":
                kept = kept & F.col(verdict[rule.name])
        aggregates = [F.count(F.lit(1)).alias("rows"), F.sum(F.when(kept, 1).otherwise(0)).alias("written"),
                      F.sum(F.when(~kept & ~quarantined(F.col), 1).otherwise(0)).alias("dropped")]
        for rule in rules:
            aggregates.append(F.sum(F.when(F.col("__conduit_parsed") & ~F.col(verdict[rule.name]), 1).otherwise(0))
                              .alias(f"{rule.action}:{rule.name}"))
        df = df.observe(f"{OBSERVATION}|table|{name}", *aggregates)
        for rule in rules:
            if rule.action == "fail":
                message = F.concat(F.lit(f"{ERROR_NAME}: expectation {rule.name!r} ({rule.condition}) of flow {name} "
                                         "failed on a record from "), F.coalesce(F.col("__conduit_file"), F.lit("?")))
                df = df.filter(F.when(~F.col(verdict[rule.name]), F.raise_error(message)).otherwise(F.lit(True)))
        return df.filter(kept).select(*columns)

    @dp.append_flow(target=quarantine, name=quarantine)
    def to_quarantine():
        df = spark_of().readStream.table(checked_view)
        failing = [F.when(~F.col("__conduit_parsed"), F.lit(MALFORMED_RULE))]
        failing += [F.when(~F.col(verdict[r.name]), F.lit(r.name)) for r in rules if r.action == "quarantine"]
        record = F.coalesce(F.col("__conduit_raw"), F.to_json(F.struct(*[F.col(c) for c in columns])))
        df = df.filter(quarantined(F.col)).withColumn("__conduit_rules", F.filter(F.array(*failing), lambda x: x.isNotNull()))
        out = df.select(
            F.sha2(F.concat_ws("|", F.lit(name), F.col("__conduit_file"),
                               F.col("offset").cast("string") if kafka else F.lit(""), record), 256).alias("quarantine_id"),
            record.alias("record"),
            (F.col("value") if kafka else F.encode(record, "UTF-8")).alias("record_bytes"),
            F.col("__conduit_rules")[0].alias("rule"),
            F.col("__conduit_rules").alias("rules"),
            F.when(~F.col("__conduit_parsed"), F.lit("malformed record: the read could not parse it"))
             .otherwise(F.concat(F.lit("expectation failed: "), F.array_join(F.col("__conduit_rules"), ", "))).alias("error"),
            F.lit(name).alias("flow"),
            F.nullif(F.col("__conduit_file"), F.lit("")).alias("source_file"),
            (F.col("topic") if kafka else F.lit(None).cast("string")).alias("source_topic"),
            (F.col("partition") if kafka else F.lit(None).cast("int")).alias("source_partition"),
            (F.col("offset") if kafka else F.lit(None).cast("long")).alias("source_offset"),
            F.current_timestamp().alias("failed_at"),
        )
        return out.observe(f"{OBSERVATION}|quarantine|{name}", F.count(F.lit(1)).alias("rows"))



def spark_of() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


@dataclass
class FlowCounts:
    """What one batch of a checked flow did, from its observation."""

    kind: str  # table | quarantine
    target: str
    read: int = 0
    written: int = 0
    dropped: int = 0
    quarantined: int = 0
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)  # rule -> {action, passed, failed}


def counts_from_observed(flow: str, observed: dict[str, Any]) -> FlowCounts | None:
    """The counts of a flow declared by ``quarantined_table`` (its observation), None for any other flow."""
    for key, row in observed.items():
        parts = str(key).split("|")
        if len(parts) != 3 or parts[0] != OBSERVATION:
            continue
        values = row.asDict() if hasattr(row, "asDict") else dict(row)
        kind, target = parts[1], parts[2]
        rows = int(values.get("rows") or 0)
        if kind == "quarantine":
            return FlowCounts(kind, quarantine_table_name(target), read=rows, quarantined=rows)
        counts = FlowCounts(kind, target, read=rows, written=int(values.get("written") or 0),
                            dropped=int(values.get("dropped") or 0))
        for alias, value in values.items():
            action, _, rule = str(alias).partition(":")
            if rule and action in ACTIONS:
                failed = int(value or 0)
                counts.rules[rule] = {"action": action, "passed": rows - failed, "failed": failed}
        return counts
    return None
