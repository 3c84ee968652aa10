"""Turn text into typed records with per-record errors instead of dropped rows.

Spark's JSON and CSV readers drop or null out bad input silently. Here the
text is parsed twice: once into ``map<string,string>`` (NULL = not a JSON
object: malformed) and once into the declared schema (a field present in the
map but NULL after typing = wrong type). NOT NULL fields of the DDL schema
that are absent = missing field. Each case becomes a per-record error with
its own exception class and a message naming the fields.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark import columns as C

_CORRUPT = "__ac_corrupt"


def parse_schema(ddl: str) -> T.StructType:
    """A Spark DDL column list (``id BIGINT NOT NULL, name STRING``) as a StructType; NOT NULL = required."""
    return T.StructType.fromDDL(ddl)


def nullable(schema: T.StructType) -> T.StructType:
    """The schema with every field nullable (readers must not drop a record that lacks a NOT NULL field)."""
    return T.StructType([T.StructField(f.name, f.dataType, True) for f in schema.fields])


def _names_where(pairs: list[tuple[str, Column]]) -> Column:
    """Comma-separated names whose condition is TRUE (NULL conditions count as FALSE)."""
    return F.concat_ws(", ", *[F.when(F.coalesce(cond, F.lit(False)), F.lit(name)) for name, cond in pairs])


def _any(conds: list[Column]) -> Column:
    out = F.lit(False)
    for cond in conds:
        out = out | F.coalesce(cond, F.lit(False))
    return out


def decode_json(
    df: DataFrame,
    text: Column,
    schema: T.StructType,
    *,
    stage: str,
    component_id: str,
    component_type: str,
    what: str = "record",
) -> tuple[DataFrame, Column]:
    """Parse JSON text per record; returns (df with errors set, struct column of the typed value).

    A NULL text is not an error (the value is NULL). The typed struct column is
    only meaningful for records without error.
    """
    map_col = "__ac_json_map"
    typed_col = "__ac_json_typed"
    parse_schema_ = nullable(schema).add(_CORRUPT, T.StringType(), True)
    df = df.withColumn(map_col, F.from_json(text, T.MapType(T.StringType(), T.StringType()))).withColumn(
        typed_col,
        F.from_json(text, parse_schema_, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}),
    )
    m = F.col(map_col)
    t = F.col(typed_col)
    raw_of = {f.name: F.try_element_at(m, F.lit(f.name)) for f in schema.fields}
    malformed = text.isNotNull() & m.isNull()
    missing = [(f.name, m.isNotNull() & raw_of[f.name].isNull()) for f in schema.fields if not f.nullable]
    wrong = [(f.name, m.isNotNull() & raw_of[f.name].isNotNull() & t[f.name].isNull()) for f in schema.fields]
    common = dict(stage=stage, component_id=component_id, component_type=component_type)
    df = C.with_error(
        df,
        malformed,
        exception_class=C.MALFORMED_RECORD,
        message=F.lit(f"malformed JSON {what}: not a JSON object"),
        **common,
    )
    if missing:
        df = C.with_error(
            df,
            _any([c for _, c in missing]),
            exception_class=C.MISSING_FIELD,
            message=F.concat(F.lit(f"{what} is missing required field(s): "), _names_where(missing)),
            **common,
        )
    df = C.with_error(
        df,
        _any([c for _, c in wrong]) | (m.isNotNull() & t[_CORRUPT].isNotNull()),
        exception_class=C.WRONG_TYPE,
        message=F.concat(
            F.lit(f"{what} has field(s) of the wrong type: "),
            _names_where(wrong),
            F.lit(" (expected "),
            F.lit(", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)),
            F.lit(")"),
        ),
        **common,
    )
    value = F.struct(*[t[f.name].alias(f.name) for f in schema.fields])
    return df, value


def decode_csv(
    df: DataFrame,
    text: Column,
    schema: T.StructType,
    *,
    separator: str = ",",
    stage: str,
    component_id: str,
    component_type: str,
) -> tuple[DataFrame, Column]:
    """Parse one CSV line per record (columns by position, as Spark does with a user schema)."""
    strings = T.StructType([T.StructField(f.name, T.StringType(), True) for f in schema.fields]).add(
        _CORRUPT, T.StringType(), True
    )
    parsed_col = "__ac_csv"
    df = df.withColumn(
        parsed_col,
        F.from_csv(text, _ddl(strings), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT, "sep": separator}),
    )
    p = F.col(parsed_col)
    raw_of = {f.name: p[f.name] for f in schema.fields}
    present = {name: raw.isNotNull() & (raw != F.lit("")) for name, raw in raw_of.items()}
    typed = {f.name: raw_of[f.name].try_cast(f.dataType) for f in schema.fields}
    common = dict(stage=stage, component_id=component_id, component_type=component_type)
    df = C.with_error(
        df,
        text.isNotNull() & (p.isNull() | p[_CORRUPT].isNotNull()),
        exception_class=C.MALFORMED_RECORD,
        message=F.lit(f"malformed CSV line: expected {len(schema.fields)} columns"),
        **common,
    )
    missing = [(f.name, ~present[f.name]) for f in schema.fields if not f.nullable]
    if missing:
        df = C.with_error(
            df,
            _any([c for _, c in missing]),
            exception_class=C.MISSING_FIELD,
            message=F.concat(F.lit("record is missing required field(s): "), _names_where(missing)),
            **common,
        )
    wrong = [(f.name, present[f.name] & typed[f.name].isNull()) for f in schema.fields]
    df = C.with_error(
        df,
        _any([c for _, c in wrong]),
        exception_class=C.WRONG_TYPE,
        message=F.concat(F.lit("record has field(s) of the wrong type: "), _names_where(wrong)),
        **common,
    )
    value = F.struct(*[F.when(present[f.name], typed[f.name]).alias(f.name) for f in schema.fields])
    return df, value


def _ddl(schema: T.StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


def drop_helpers(df: DataFrame) -> DataFrame:
    """Remove the temporary parse columns."""
    return df.drop("__ac_json_map", "__ac_json_typed", "__ac_csv")
