"""DLQ records: the original record plus its error context (KIP-298, Kafka Connect's DLQ headers).

One flat row per nacked record, so that any destination type (file json /
csv / parquet, jdbc, log) can hold it. Column names follow Kafka Connect's
``__connect.errors.*`` headers where one exists.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_conduit.pipeline.model import PipelineSpec
from airflow_conduit.pipeline.secrets import redact
from airflow_conduit.spark import columns as C
from airflow_conduit.spark import parsing
from airflow_conduit.spark.jvm import dataframe_calls
from airflow_conduit.spark.sources import (
    SourcePlan,
    json_max_string_length,
    origin_file,
    origin_position,
    origin_split,
    per_source,
)


def component_configs(spec: PipelineSpec) -> dict[str, str]:
    """component id -> JSON of its settings with secrets masked (for include-configs)."""
    out: dict[str, str] = {}
    for comp in spec.components():
        out[comp.id] = json.dumps({"plugin": comp.plugin, "settings": redact(dict(comp.settings))}, default=str, sort_keys=True)
    return out


def _configs(spec: PipelineSpec, component_id: Column) -> Column:
    if not spec.dead_letter_queue.include_configs:
        return F.lit(None).cast("string")
    pairs: list[Column] = []
    for key, value in component_configs(spec).items():
        pairs += [F.lit(key), F.lit(value)]
    return F.try_element_at(F.create_map(*pairs), component_id).cast("string") if pairs else F.lit(None).cast("string")


def _original_record(spec: PipelineSpec, plans: list[SourcePlan], keep_originals: bool) -> Column:
    """The record as the source gave it: its text when it failed to parse, else its fields as read, as JSON."""
    if not spec.dead_letter_queue.include_messages:
        return F.lit(None).cast("string")
    if not keep_originals:
        return F.col(C.RAW)
    def as_read(plan: SourcePlan) -> Column:
        return F.to_json(F.struct(*[F.col(plan.original_column(f.name)).alias(f.name) for f in plan.schema.fields]))

    return F.coalesce(F.col(C.RAW), per_source(plans, as_read))


# A DLQ record's columns, in order. What varies per record is gathered by the pass (``dlq_entry``); what is the
# same for a whole batch (the pipeline, run, batch, time, a component's settings) is added after it (``PendingReasons.rows``).
DLQ_COLUMNS = (
    "pipeline_id", "run_id", "batch_id", "source_id", "source_file", "source_position", "source_split_start", "stage",
    "component_id", "component_type", "exception_class", "exception_message", "exception_stacktrace", "attempt",
    "time_of_error", "record", "configs",
)
ORIGINAL = "original"  # the entry's text of the record: see dlq_entry
# The fields of a DLQ entry (``dlq_entry``), in order.
ENTRY_FIELDS = (
    "source_id", "source_file", "source_position", "source_split_start", "stage", "component_id", "component_type",
    "exception_class", "exception_message", "exception_stacktrace", "attempt", ORIGINAL,
)
# The types (``DataType.typeName``) of the DLQ columns that are not an entry's field.
BATCH_COLUMN_TYPES = {"pipeline_id": "string", "run_id": "string", "batch_id": "long", "time_of_error": "string",
                      "record": "string", "configs": "string"}
BATCH_VALUES = "__ac_batch_values"  # the batch's own DLQ values (batch id, time of error) as one struct


def _kept_original(spec: PipelineSpec, plans: list[SourcePlan], keep_originals: bool) -> Column:
    """The DLQ record's ``record`` when messages are included; else only the text a pending reason is worked out from."""
    if spec.dead_letter_queue.include_messages:
        return _original_record(spec, plans, keep_originals)
    return pending_text()


def dlq_entry(spec: PipelineSpec, plans: list[SourcePlan], *, keep_originals: bool) -> list[Column]:
    """What a nacked record's DLQ row takes from the record itself (only evaluated for nacked records).

    Only this is gathered in the pass (and copied into the observation's buffer for every nacked record,
    sent to the driver and back to the DLQ write's task): the columns that are the same for the whole batch
    are added after it. ``ORIGINAL`` is the ``record`` column, or with ``include-messages: false`` the text of
    a line whose reason is pending (a rejected line's text is also its ``record``).
    """
    err = F.col(C.ERROR)
    columns = [
        F.col(C.SOURCE_ID),
        origin_file(plans),
        origin_position(plans),
        origin_split(plans),
        err["stage"],
        err["component_id"],
        err["component_type"],
        err["exception_class"],
        err["message"],
        err["stacktrace"],
        F.coalesce(err["attempt"], F.lit(1)),
        _kept_original(spec, plans, keep_originals),
    ]
    return [column.alias(name) for column, name in zip(columns, ENTRY_FIELDS, strict=True)]


# -- reasons worked out after the pass (parsing.PENDING_REASON) ---------------------------------------------


def pending_text() -> Column:
    """The text of a rejected line whose reason is still to be worked out; NULL for every other record."""
    return F.when(F.col(C.ERROR)["exception_class"] == F.lit(parsing.PENDING_REASON), F.col(C.RAW))


def _json_plans(plans: list[SourcePlan]) -> list[SourcePlan]:
    return [p for p in plans if p.parser == "json"]


def _parse_column(plan: SourcePlan, part: str) -> str:
    """The column ``_parses`` puts one part of ``parsing.RejectedParses`` in, for ``plan``'s lines."""
    return f"__ac_{part}{plan.index}"


_PARSE_PARTS = tuple(f.name for f in dataclasses.fields(parsing.RejectedParses))


def _parses(plans: list[SourcePlan], text: str, source_id: Column) -> list[Column]:
    """Per JSON source, its pending lines parsed once (as a map) and checked against the size limits, as
    columns of their own projection (see ``parsing.RejectedParses``)."""
    out: list[Column] = []
    for plan in _json_plans(plans):
        mine = source_id == F.lit(plan.id)
        parses = parsing.RejectedParses.of(C.quote(text), json_max_string_length(plan.spec))
        out += [F.when(mine, getattr(parses, part)).alias(_parse_column(plan, part)) for part in _PARSE_PARTS]
    return out


def _reason(plans: list[SourcePlan], text: str, source_id: Column, flags: str) -> Column | None:
    """The pending reason, from the columns ``_parses`` added and the typed-NULL flags the pass kept (``text`` and
    ``flags``: column names)."""
    branches = []
    for plan in _json_plans(plans):
        where = dict(stage="source", component_id=plan.id, component_type=plan.spec.plugin)
        parses = parsing.RejectedParses(*(_parse_column(plan, part) for part in _PARSE_PARTS))
        found = parsing.rejected_json_reason(
            text, flags, parses, plan.schema, what="record", max_string_length=json_max_string_length(plan.spec), **where,
        )
        branches.append((source_id == F.lit(plan.id), found))
    return C.case(branches) if branches else None


class PendingReasons:
    """DLQ rows from the entries the pass gathered (``rows``): every pending reason worked out, the batch's own
    columns added. Its columns are built once per run, the reasons' only when a batch first has a pending one.

    Only a rejected line not ``parsing.decidable_in_the_pass`` (or of a schema a JSON path cannot name) is pending (the
    others get their reason in the pass), so most runs never build it.
    """

    def __init__(self, spec: PipelineSpec, plans: list[SourcePlan]):
        self.spec = spec
        self.plans = plans
        self.needed = bool(_json_plans(plans))
        per_record = {name: F.col(name) for name in DLQ_COLUMNS}
        per_record["record"] = F.col(ORIGINAL) if spec.dead_letter_queue.include_messages else F.lit(None).cast("string")
        per_record["configs"] = _configs(spec, F.col("component_id"))
        self._as_gathered = {name: column.alias(name) for name, column in per_record.items()}
        self._selects: dict[tuple[str, tuple[str, ...]], C.JvmColumns] = {}

    @functools.cached_property
    def _reasons(self) -> tuple[Column, list[Column], Column, dict[str, Column]]:
        """The pending text, its parses, its reason and the DLQ's columns with the reason in them."""
        text, source_id = F.col("text"), F.col("source_id")
        pending_text = F.when(F.col("exception_class") == F.lit(parsing.PENDING_REASON), F.col(ORIGINAL)).alias("text")
        reason_of = _reason(self.plans, "text", source_id, "exception_message").alias("reason")
        pending, reason = text.isNotNull(), F.col("reason")
        per_record = dict(self._as_gathered)  # already aliased; only the two reason columns are new
        for name, field in (("exception_class", "exception_class"), ("exception_message", "message")):
            per_record[name] = F.when(pending, reason[field]).otherwise(F.col(name)).alias(name)
        return pending_text, _parses(self.plans, "text", source_id), reason_of, per_record

    def rows(
        self, entries: DataFrame, *, run_id: str, batch_id: int, time_of_error: str, pending: bool = True,
        keep: tuple[str, ...] = (),
    ) -> DataFrame:
        """The DLQ rows (``DLQ_COLUMNS``) of ``entries`` (the columns of ``dlq_entry``), on these few rows, after the pass.

        ``pending``: some entry's reason is still to be worked out (a line not ``parsing.decidable_in_the_pass``,
        or a field name a JSON path cannot name); without one the rows are one projection of the entries.
        ``keep``: columns of ``entries`` kept after the DLQ's (``source_lines.ORDINAL``).
        The reasons in three projections, so that each line is parsed once (an expression used many times
        is not inlined into the next projection when it is not cheap): the parses, the reason, the DLQ's columns.
        """
        if not (self.needed and pending):
            # the batch's own two values in one literal struct (two JVM round trips), read by the run's select list
            values = f"named_struct('batch_id', CAST({int(batch_id)} AS BIGINT), 'time_of_error', {_sql_string(time_of_error)})"
            with_batch = dataframe_calls.with_jvm_column(entries, BATCH_VALUES, C.jvm_function("expr")(values))
            return C.select(with_batch, self._gathered_select(run_id, keep))
        batch = self._batch_columns(run_id)
        batch.update({"batch_id": F.lit(batch_id).cast("long"), "time_of_error": F.lit(time_of_error)})
        pending_text, parses, reason, per_record = self._reasons
        entries = entries.select("*", pending_text, *parses).select("*", reason)
        return entries.select(*_select_list(batch, per_record, keep))

    def driver_rows(
        self, entries: list[tuple], lines: list[tuple[int, str] | None] | None, *, run_id: str, batch_id: int, time_of_error: str,
    ) -> list[tuple]:
        """What ``rows`` and ``source_lines.SourceLines.apply`` make of gathered entries without a pending reason,
        made on the driver: one tuple (``DLQ_COLUMNS``) per entry (``ENTRY_FIELDS``); ``lines``: each entry's
        line in its file (number, text) or None (not found, or not looked up). Each row is picked in one C call
        from the entry, the batch's values, its record and its configs (``_driver_row_picker``): a batch can have
        tens of thousands, made while the executors wait."""
        dlq = self.spec.dead_letter_queue
        configs = component_configs(self.spec) if dlq.include_configs else {}
        messages = dlq.include_messages
        pick = _driver_row_picker()
        position, original, component = (ENTRY_FIELDS.index(name) for name in ("source_position", ORIGINAL, "component_id"))
        batch = (self.spec.id, run_id, batch_id, time_of_error)
        out = []
        for i, values in enumerate(entries):
            if len(values) != len(ENTRY_FIELDS):
                raise ValueError(f"a DLQ entry has {len(values)} fields, not {len(ENTRY_FIELDS)}")
            line = lines[i] if lines is not None else None
            if line is None:
                record = values[original] if messages else None
            else:
                values = (*values[:position], line[0], *values[position + 1:])
                record = line[1] if messages else None
            out.append(pick((*values, *batch, record, configs.get(values[component]))))
        return out

    def _batch_columns(self, run_id: str) -> dict[str, Column]:
        """The columns that are the same for a whole batch; the batch's own two as typed placeholders."""
        return {
            "pipeline_id": F.lit(self.spec.id), "run_id": F.lit(run_id), "batch_id": F.lit(None).cast("long"),
            "time_of_error": F.lit(None).cast("string"),
        }

    def _gathered_select(self, run_id: str, keep: tuple[str, ...]) -> C.JvmColumns:
        """The select list of rows without a pending reason, built once per run (the batch's own columns are then
        set by one ``withColumns``)."""
        key = (run_id, keep)
        if key not in self._selects:
            batch = self._batch_columns(run_id)
            batch.update({name: F.col(f"{BATCH_VALUES}.{name}") for name in ("batch_id", "time_of_error")})
            self._selects[key] = C.JvmColumns(_select_list(batch, self._as_gathered, keep))
        return self._selects[key]


@functools.lru_cache(maxsize=1)
def _driver_row_picker():
    """The DLQ columns, in order, from (entry fields, pipeline id, run id, batch id, time of error, record, configs)."""
    sources = (*ENTRY_FIELDS, "pipeline_id", "run_id", "batch_id", "time_of_error", "record", "configs")
    return operator.itemgetter(*(sources.index(name) for name in DLQ_COLUMNS))


def _sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _select_list(batch: dict[str, Column], per_record: dict[str, Column], keep: tuple[str, ...]) -> list[Column]:
    """``DLQ_COLUMNS`` in order (the batch's from ``batch``, the others from ``per_record``), then ``keep``."""
    return [batch[name].alias(name) if name in batch else per_record[name] for name in DLQ_COLUMNS] + [F.col(k) for k in keep]
