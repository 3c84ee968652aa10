"""Processors, as Spark expressions applied to the active records of a batch.

Each processor acts only on active records (no error, not filtered); its
per-record failures become errors with stage ``processor`` and its id. The
built-in processors are Spark expressions (``try_*`` friendly); only
``custom`` runs Python per record (see ``custom.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    value = F.expr(str(proc.settings["value"]))
    if name in df.columns:
        return df.withColumn(name, F.when(C.active(), value).otherwise(F.col(C.quote(name))))
    return df.withColumn(name, F.when(C.active(), value))


def field_rename(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    mapping = _as_mapping(proc.settings.get("mapping"))
    return df.withColumnsRenamed({old: new for old, new in mapping.items() if old in df.columns})


def field_exclude(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    names = [n for n in _as_list(proc.settings.get("fields")) if n not in C.INTERNAL_COLUMNS]
    return df.drop(*names)


def filter_(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    return C.with_filter(df, F.expr(str(proc.settings["condition"])))


def sql(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    select = proc.settings.get("select")
    if select is None:
        from airflow_conduit.pipeline.settings_schema import split_select_list

        select = split_select_list(str(proc.settings["expression"]))
    exprs: list[str] = []
    for item in _as_list(select):
        if item.strip() == "*":
            exprs.extend(C.quote(c) for c in C.user_columns(df))
        else:
            exprs.append(item)
    internal = [C.quote(c) for c in df.columns if c in C.INTERNAL_COLUMNS]
    return df.selectExpr(*exprs, *internal)


def json_decode(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    source = proc.settings["field"]
    target = proc.settings.get("target") or source
    schema = parsing.parse_schema(proc.settings["schema"])
    text = F.col(C.quote(source)).cast("string") if source in df.columns else F.lit(None).cast("string")
    df, value = parsing.decode_json(
        df,
        F.when(C.active(), text),
        schema,
        stage="processor",
        component_id=proc.id,
        component_type=proc.plugin,
        what=f"field {source!r}",
    )
    return parsing.drop_helpers(df.withColumn(target, value))


def custom(df: DataFrame, proc: ProcessorSpec, ctx: ProcessorContext) -> DataFrame:
    from airflow_conduit.spark import custom as custom_mod

    return custom_mod.apply_custom(df, proc, ctx)


PROCESSORS = {
    "field.set": field_set,
    "field.rename": field_rename,
    "field.exclude": field_exclude,
    "filter": filter_,
    "sql": sql,
    "json.decode": json_decode,
    "custom": custom,
}


def materialize(df: DataFrame) -> DataFrame:
    """Compute ``df`` now and cut its lineage (local checkpoint).

    Each stage's error column refers to the previous one several times; left
    to itself, the optimizer inlines the chain into one expression that grows
    with every stage until planning overflows the JVM stack. A checkpoint per
    stage keeps every plan small (and runs Python functions exactly once).
    """
    return df.localCheckpoint(eager=True)


def apply_processors(df: DataFrame, processors: tuple[ProcessorSpec, ...], ctx: ProcessorContext) -> DataFrame:
    for proc in processors:
        plugin = proc.plugin.removeprefix("builtin:")
        ctx.where = ("processor", proc.id, plugin)
        df = materialize(PROCESSORS[plugin](df, proc, ctx))
        ctx.where = None
    return df
