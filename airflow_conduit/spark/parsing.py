"""Typed records with per-record errors instead of dropped rows, at the price of one parse.

Spark's readers parse each line once into the declared schema (PERMISSIVE,
with a corrupt-record column that holds the original text of the lines that
did not parse). Only for those lines is the precise reason worked out, in a
conditional branch that good records never evaluate: the text parsed into
``map<string,string>`` (NULL = not a JSON object: malformed), a required key
that is absent (missing field), or a key present but NULL after typing
(wrong type). A line that parsed but lacks a NOT NULL field is a missing
field too. Each case becomes a per-record error with its own exception class
and a message naming the fields.
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark import columns as C

CORRUPT = "__ac_corrupt"
_STRING_MAP = T.MapType(T.StringType(), T.StringType())
ValueOf = Callable[[str], Column]  # field name -> the field's typed value


def parse_schema(ddl: str) -> T.StructType:
    """A Spark DDL column list (``id BIGINT NOT NULL, name STRING``) as a StructType; NOT NULL = required."""
    return T.StructType.fromDDL(ddl)


def nullable(schema: T.StructType) -> T.StructType:
    """The schema with every field nullable (readers must not drop a record that lacks a NOT NULL field)."""
    return T.StructType([T.StructField(f.name, f.dataType, True) for f in schema.fields])


def reader_schema(schema: T.StructType) -> T.StructType:
    """What a PERMISSIVE reader parses into: the fields, all nullable, plus the corrupt-record column."""
    return nullable(schema).add(CORRUPT, T.StringType(), True)


def _names_where(pairs: list[tuple[str, Column]]) -> Column:
    """Comma-separated names whose condition is TRUE (NULL conditions count as FALSE)."""
    return F.concat_ws(", ", *[F.when(F.coalesce(cond, F.lit(False)), F.lit(name)) for name, cond in pairs])


def _any(conds: list[Column]) -> Column:
    out = F.lit(False)
    for cond in conds:
        out = out | F.coalesce(cond, F.lit(False))
    return out


def _missing(schema: T.StructType, value_of) -> list[tuple[str, Column]]:
    return [(f.name, value_of(f.name).isNull()) for f in schema.fields if not f.nullable]


def _missing_error(missing: list[tuple[str, Column]], what: str, where: dict) -> Column:
    return C.error_struct(
        exception_class=C.MISSING_FIELD,
        message=F.concat(F.lit(f"{what} is missing required field(s): "), _names_where(missing)),
        **where,
    )


def json_error(text: Column, typed: ValueOf, failed: Column, schema: T.StructType, *, what: str, **where: str) -> Column:
    """The error of a JSON record (an error struct) or NULL.

    ``typed(name)``: the field as parsed into ``schema``; ``failed``: TRUE when the parser rejected the text.
    The reason of a rejection is worked out from ``text`` for rejected records only.
    """
    m = F.from_json(text, _STRING_MAP)
    raw_of = {f.name: F.try_element_at(m, F.lit(f.name)) for f in schema.fields}
    missing_key = _missing(schema, lambda name: raw_of[name])
    wrong = [(f.name, raw_of[f.name].isNotNull() & typed(f.name).isNull()) for f in schema.fields]
    expected = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
    reason = F.when(
        m.isNull(),
        C.error_struct(exception_class=C.MALFORMED_RECORD, message=f"malformed JSON {what}: not a JSON object", **where),
    )
    if missing_key:
        reason = reason.when(_any([c for _, c in missing_key]), _missing_error(missing_key, what, where))
    reason = reason.otherwise(
        C.error_struct(
            exception_class=C.WRONG_TYPE,
            message=F.concat(
                F.lit(f"{what} has field(s) of the wrong type: "), _names_where(wrong), F.lit(f" (expected {expected})")
            ),
            **where,
        )
    )
    out = F.when(failed, reason)
    missing_value = _missing(schema, typed)
    if missing_value:
        out = out.when(_any([c for _, c in missing_value]), _missing_error(missing_value, what, where))
    return out


def csv_error(text: Column, typed: ValueOf, failed: Column, schema: T.StructType, *, separator: str, **where: str) -> Column:
    """The error of a CSV record (columns by position, as Spark reads them with a user schema) or NULL."""
    strings = T.StructType([T.StructField(f.name, T.StringType(), True) for f in schema.fields]).add(
        CORRUPT, T.StringType(), True
    )
    p = F.from_csv(text, _ddl(strings), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "sep": separator})
    present = {f.name: p[f.name].isNotNull() & (p[f.name] != F.lit("")) for f in schema.fields}
    missing_key = [(f.name, ~present[f.name]) for f in schema.fields if not f.nullable]
    wrong = [(f.name, present[f.name] & p[f.name].try_cast(f.dataType).isNull()) for f in schema.fields]
    reason = F.when(
        p.isNull() | p[CORRUPT].isNotNull(),
        C.error_struct(
            exception_class=C.MALFORMED_RECORD, message=f"malformed CSV line: expected {len(schema.fields)} columns", **where
        ),
    )
    if missing_key:
        reason = reason.when(_any([c for _, c in missing_key]), _missing_error(missing_key, "record", where))
    reason = reason.otherwise(
        C.error_struct(
            exception_class=C.WRONG_TYPE,
            message=F.concat(F.lit("record has field(s) of the wrong type: "), _names_where(wrong)),
            **where,
        )
    )
    out = F.when(failed, reason)
    missing_value = _missing(schema, typed)
    if missing_value:
        out = out.when(_any([c for _, c in missing_value]), _missing_error(missing_value, "record", where))
    return out


def from_json_text(text: Column, schema: T.StructType) -> Column:
    """``text`` parsed into ``schema`` (PERMISSIVE): a struct with the corrupt-record field set on failure."""
    return F.from_json(text, reader_schema(schema), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})


def _ddl(schema: T.StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
