"""Processors, as Spark expressions applied to the active records of a batch.

Each processor acts only on active records (no error, not filtered); its
per-record failures become errors with stage ``processor`` and its id. The
built-in processors are Spark expressions (``try_*`` friendly) and only add to
the batch's plan: they run in the same pass as the read and the writes, with
no Spark job of their own. Only ``custom`` runs Python per record (see
``custom.py``) and computes its batch once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.pipeline.model import PipelineSpec, ProcessorSpec
from airflow_conduit.spark import columns as C
from airflow_conduit.spark import parsing


@dataclass
class ProcessorContext:
    """What processors share within one batch: the spec (retry settings), retry count, the running processor."""

    spec: PipelineSpec
    retries: int = 0  # KIP-298 total-retries of custom processors in this batch
    where: tuple[str, str, str] | None = None  # the processor running now, for error reports
    cached: list[DataFrame] = field(default_factory=list)  # what the batch cached, released when it ends
    built: dict = field(default_factory=dict)  # the processors' columns, kept by the runner for all its batches

    def once(self, key: tuple, build: Callable[[], Any]) -> Any:
        """What a processor builds the same at every batch (each Column call is a JVM round trip), built once.
        Keys hold the processor's ``id()``: processor ids are unique within a stage, not across stages.

        ``Column`` objects are unresolved expressions: one serves every batch's plan (each plan resolves
        its own copy, so a nondeterministic function such as ``rand()`` still gets a new seed per batch)."""
        if key not in self.built:
            self.built[key] = build()
        return self.built[key]

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value)


def _as_mapping(value: Any) -> dict[str, str]:
    if isinstance(value, str):  # Conduit's "old:new,old2:new2"
        pairs = [p.split(":", 1) for p in value.split(",") if p.strip()]
        return {a.strip(): b.strip() for a, b in pairs}
    return dict(value or {})


def field_set(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    name = proc.settings["field"]
    exists = name in df.columns

    def build():
        value = F.expr(str(proc.settings["value"]))
        if exists:
            return C.JvmColumns([F.when(C.active(), value).otherwise(F.col(C.quote(name)))], [name])
        return C.JvmColumns([F.when(C.active(), value)], [name])

    return C.with_columns(df, ctx.once(("field.set", id(proc), exists), build))


def field_rename(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    mapping = _as_mapping(proc.settings.get("mapping"))
    return df.withColumnsRenamed({old: new for old, new in mapping.items() if old in df.columns})


def field_exclude(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    names = [n for n in _as_list(proc.settings.get("fields")) if not C.is_internal(n)]
    return df.drop(*names)


def filter_(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    return C.with_columns(df, ctx.once(("filter", id(proc)), lambda: C.filter_columns(F.expr(str(proc.settings["condition"])))))


def sql(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    select = proc.settings.get("select")
    if select is None:
        from airflow_conduit.pipeline.settings_schema import split_select_list

        select = split_select_list(str(proc.settings["expression"]))
    names = tuple(df.columns)

    def build():
        exprs: list[str] = []
        for item in _as_list(select):
            if item.strip() == "*":
                exprs.extend(C.quote(c) for c in names if not C.is_internal(c))
            else:
                exprs.append(item)
        internal = [C.quote(c) for c in names if C.is_internal(c)]
        return C.jvm_strings([*exprs, *internal])  # SQL text: not one round trip per column

    return C.select_expr(df, ctx.once(("sql", id(proc), names), build))


def json_decode(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    source = proc.settings["field"]
    target = proc.settings.get("target") or source
    schema = parsing.parse_schema(proc.settings["schema"])
    text_sql = f"CAST({C.quote(source)} AS STRING)" if source in df.columns else "CAST(NULL AS STRING)"
    parsed_sql = parsing.from_json_text(text_sql, schema)
    error = F.expr(parsing.json_error(
        text_sql,
        lambda name: parsing.field_of(parsed_sql, name),
        parsing.parse_failed(text_sql, parsed_sql),
        schema,
        what=f"field {source!r}",
        stage="processor",
        component_id=proc.id,
        component_type=proc.plugin,
    ))
    text, parsed = F.expr(text_sql), F.expr(parsed_sql)
    df = C.with_error_column(df, F.when(text.isNotNull(), error))
    value = F.when(text.isNotNull(), F.struct(*[parsed[f.name].alias(f.name) for f in schema.fields]))
    return df.withColumn(target, F.when(C.active(), value))


def custom(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    from airflow_conduit.spark import custom as custom_mod

    return custom_mod.apply_custom(df, proc, ctx)


def expect(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    from airflow_conduit.spark import expectations

    return expectations.apply_expect(df, proc, expectations.rules_of(ctx.spec))


def delta_fit(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    """Not a user's processor: the runner adds it after a Delta destination's processors (``delta_sink``)."""
    from airflow_conduit.spark import delta_sink

    return delta_sink.fit_processor(df, proc, ctx)


PROCESSORS = {
    "field.set": field_set,
    "field.rename": field_rename,
    "field.exclude": field_exclude,
    "filter": filter_,
    "sql": sql,
    "json.decode": json_decode,
    "custom": custom,
    "expect": expect,
    "delta.fit": delta_fit,
}


def apply_processors(df: DataFrame, processors: tuple[ProcessorSpec, ...], ctx: ProcessorContext) -> DataFrame:
    """Add the processors to the plan, in order (``ctx.where`` names the one being added, for error reports)."""
    for proc in processors:
        plugin = proc.plugin.removeprefix("builtin:")
        ctx.where = ("processor", proc.id, plugin)
        df = PROCESSORS[plugin](df, proc, ctx)
        ctx.where = None
    return df


FAILING_PLUGINS = frozenset({"json.decode", "custom", "expect"})  # processors that can fail one record (-> DLQ)


def _can_fail(proc: ProcessorSpec) -> bool:
    plugin = proc.plugin.removeprefix("builtin:")
    if plugin == "expect":  # only drop and fail rules nack records
        return any(r.get("action", "warn") != "warn" for r in proc.settings.get("rules") or ())
    return plugin in FAILING_PLUGINS


def can_fail_records(processors: tuple[ProcessorSpec, ...]) -> bool:
    return any(_can_fail(p) for p in processors)
