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

Two rejections are told apart from malformed text, also only for rejected
lines: invalid UTF-8 (Jackson decodes a JSON line's bytes strictly and
rejects an invalid byte; the byte and its offset are found in the line's
bytes, which the corrupt-record column keeps) and a record over the JSON
parser's size limits (a string value longer than ``maxStringLen``, a number
longer than ``maxNumLen``: it parses once the limit is lifted). Spark's CSV
reader decodes lines leniently, an invalid byte becoming U+FFFD, so for CSV
a U+FFFD in a string field or in a rejected line is the sign (one byte
search per string field of every record: the only check good CSV records pay).

Spark's ``from_json`` has no generated code: an expression holding it takes
the whole projection out of whole-stage code generation, for every record.
So the file sources work out the reason of a rejected JSON line without it
(``defer_reason``). A line that cannot be over a size limit (no longer than
``short_line_limit``, or no longer than the string limit and without a run of
number characters over the number limit) and holds no control character
(``decidable_in_the_pass``) gets its reason in the pass, from ``json_object_keys`` and ``get_json_object``, which
are code-generated (``_short_line_reason``). Any other line (or one of a schema
whose field names a JSON path cannot name) is only marked (``PENDING_REASON``)
and keeps its text, and its reason is worked out on the DLQ's rows, after the
pass (``rejected_json_reason``; see ``dlq.PendingReasons``). The pass keeps
which fields the reader left NULL (``typed_null_flags``, in the pending
error's message): the reader's partial result of a rejected line is what a
second typed parse would give, so the reason needs one parse of the line
(into a map), not two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark import columns as C

CORRUPT = "__ac_corrupt"
_STRING_MAP = T.MapType(T.StringType(), T.StringType())

INVALID_UTF8 = "airflow_conduit.spark.InvalidUtf8Error"
# The class a rejected JSON line carries through the pass until its reason is worked out (never in a DLQ).
PENDING_REASON = "__ac_pending_reason"
RECORD_TOO_LARGE = "airflow_conduit.spark.RecordTooLargeError"
# Spark 4.2's JSON options (JSONOptions: maxStringLen, maxNumLen), handed to Jackson's StreamReadConstraints
JSON_MAX_STRING_LENGTH = 20_000_000
JSON_MAX_NUMBER_LENGTH = 1_000
_NO_LIMIT = str(2**31 - 1)
REPLACEMENT_CHARACTER = "\ufffd"  # what a lenient decoder puts for an invalid byte
# One well-formed UTF-8 sequence (Unicode 15, table 3-7) as uppercase hex; possessive, so that the
# regex engine iterates instead of recursing over a long line.
_UTF8_SEQUENCE_HEX = (
    "[0-7][0-9A-F]|C[2-9A-F][89AB][0-9A-F]|D[0-9A-F][89AB][0-9A-F]"
    "|E0[AB][0-9A-F][89AB][0-9A-F]|E[1-9ABCEF][89AB][0-9A-F][89AB][0-9A-F]|ED[89][0-9A-F][89AB][0-9A-F]"
    "|F0[9AB][0-9A-F][89AB][0-9A-F][89AB][0-9A-F]|F[1-3][89AB][0-9A-F][89AB][0-9A-F][89AB][0-9A-F]"
    "|F48[0-9A-F][89AB][0-9A-F][89AB][0-9A-F]"
)
_VALID_UTF8_PREFIX_HEX = f"^(?:{_UTF8_SEQUENCE_HEX})*+"
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
    """Comma-separated names whose condition is TRUE (a NULL condition, as in any CASE WHEN, counts as FALSE)."""
    return F.concat_ws(", ", *[F.when(cond, F.lit(name)) for name, cond in pairs])


def _any(conds: list[Column]) -> Column:
    """TRUE when a condition is TRUE; FALSE or NULL otherwise: a condition of CASE WHEN, where NULL counts as
    FALSE (no ``coalesce`` per condition: each is an expression every plan analyses and optimises)."""
    if not conds:
        return F.lit(False)
    out = conds[0]
    for cond in conds[1:]:
        out = out | cond
    return out


def _missing(schema: T.StructType, value_of) -> list[tuple[str, Column]]:
    return [(f.name, value_of(f.name).isNull()) for f in schema.fields if not f.nullable]


def typed_null_flags(schema: T.StructType, typed: ValueOf) -> Column:
    """One character per field of ``schema``, in order: ``1`` where the typed value is NULL, else ``0``.

    What a pending reason needs of the reader's (partial) result of a rejected line: which fields did not
    come out typed. Flags, not names: any field name is safe in them.
    """
    return F.concat(*[F.when(typed(f.name).isNull(), F.lit("1")).otherwise(F.lit("0")) for f in schema.fields])


def _missing_error(missing: list[tuple[str, Column]], what: str, where: dict) -> Column:
    return C.error_struct(
        exception_class=C.MISSING_FIELD,
        message=F.concat(F.lit(f"{what} is missing required field(s): "), _names_where(missing)),
        **where,
    )


def is_invalid_utf8(text: Column) -> Column:
    """TRUE when ``text`` (a string column holding a line's bytes as read) is not valid UTF-8; NULL for NULL."""
    return ~F.is_valid_utf8(text)


def kept_text(text: Column) -> Column:
    """The line as the DLQ keeps it: as is, or base64 of its bytes when it is not valid UTF-8.

    A string that is not UTF-8 cannot cross into Python or a JSON file unchanged (it would come out with
    U+FFFD); base64 keeps every byte.
    """
    return F.when(is_invalid_utf8(text), F.base64(text.cast("binary"))).otherwise(text)


def _utf8_error(text: Column, where: dict) -> Column:
    """"invalid UTF-8 byte 0xFF at byte offset 17 of the record": the first byte that starts no valid sequence."""
    hexed = F.hex(text.cast("binary"))
    valid = F.length(F.regexp_extract(hexed, _VALID_UTF8_PREFIX_HEX, 0))
    located = F.concat(
        F.lit("invalid UTF-8 byte 0x"), F.substring(hexed, valid + 1, 2), F.lit(" at byte offset "),
        (valid / 2).cast("long").cast("string"), F.lit(" of the record"),
    )
    message = F.when(valid < F.length(hexed), located).otherwise(F.lit("invalid UTF-8 in the record"))
    return C.error_struct(
        exception_class=INVALID_UTF8,
        message=F.concat(message, F.lit(" (the record is kept base64-encoded in the DLQ)")),
        **where,
    )


def longer_string_than_limit(text: Column, max_string_length: int) -> Column:
    """TRUE when ``text`` did not parse only because a string value is over ``max_string_length`` (it parses
    with the limit lifted); the parse runs only for text longer than the limit."""
    return (F.length(text) > F.lit(max_string_length)) & F.from_json(text, _STRING_MAP, {"maxStringLen": _NO_LIMIT}).isNotNull()


def longer_number_than_limit(text: Column, max_string_length: int) -> Column:
    """TRUE when ``text`` did not parse only because a number is over the parser's ``maxNumLen``; the parse
    runs only for text holding a run of number characters longer than the limit (searched for only in
    text longer than the limit)."""
    number_run = f"[-+0-9.eE]{{{JSON_MAX_NUMBER_LENGTH + 1}}}"
    lifted = {"maxStringLen": str(max_string_length), "maxNumLen": _NO_LIMIT}
    long_enough = F.length(text) > F.lit(JSON_MAX_NUMBER_LENGTH)
    return long_enough & text.rlike(number_run) & F.from_json(text, _STRING_MAP, lifted).isNotNull()


def _too_large_or_malformed(
    text: Column, what: str, max_string_length: int, where: dict, *, longer_string: Column, longer_number: Column
) -> Column:
    """For text that does not parse: over a parser size limit (``longer_string`` / ``longer_number``), or malformed."""
    return (
        F.when(
            longer_string,
            C.error_struct(
                exception_class=RECORD_TOO_LARGE,
                message=F.concat(
                    F.lit(f"{what} exceeds the parser's size limit of {max_string_length:,} characters for a string "
                          "value (source setting max-string-length); the record is "),
                    F.format_number(F.length(text), 0),
                    F.lit(" characters long"),
                ),
                **where,
            ),
        )
        .when(
            longer_number,
            C.error_struct(
                exception_class=RECORD_TOO_LARGE,
                message=f"{what} exceeds the parser's size limit of {JSON_MAX_NUMBER_LENGTH:,} digits for a number",
                **where,
            ),
        )
        .otherwise(
            C.error_struct(exception_class=C.MALFORMED_RECORD, message=f"malformed JSON {what}: not a JSON object", **where)
        )
    )


@dataclass(frozen=True)
class RejectedParses:
    """What the reason of a rejected JSON line is read from: the line as a map (NULL: not a JSON object) and
    whether it failed only on a size limit. ``rejected_json_reason`` takes them as columns computed in an
    earlier projection: ``from_json`` has no generated code, so the reason itself stays code-generated."""

    as_map: Column
    longer_string: Column
    longer_number: Column

    @classmethod
    def of(cls, text: Column, max_string_length: int) -> "RejectedParses":
        return cls(
            text_as_map(text, max_string_length),
            longer_string_than_limit(text, max_string_length),
            longer_number_than_limit(text, max_string_length),
        )


def _parsed_reason(
    text: Column, not_an_object: Column, raw_of: dict[str, Column], is_null: Callable[[str], Column],
    schema: T.StructType, *, what: str, max_string_length: int, where: dict,
    longer_string: Column, longer_number: Column,
) -> Column:
    """The reason of a rejected line that is valid UTF-8: size limit / malformed, missing field, wrong type.

    ``not_an_object``: TRUE when the text is not a JSON object; ``raw_of[name]``: the field's JSON value,
    NULL when the key is absent or its value is JSON null; ``is_null(name)``: the reader left it NULL.
    """
    # each field's typed NULL first: it is the cheap test, and it short-circuits the field's JSON value, which
    # re-reads the line (get_json_object), for every field the reader typed (a key absent or NULL in the text
    # is NULL typed too, so the results are the same)
    missing_key = [(f.name, is_null(f.name) & raw_of[f.name].isNull()) for f in schema.fields if not f.nullable]
    wrong = [(f.name, is_null(f.name) & raw_of[f.name].isNotNull()) for f in schema.fields]
    expected = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
    too_large_or_malformed = _too_large_or_malformed(
        text, what, max_string_length, where, longer_string=longer_string, longer_number=longer_number
    )
    reason = F.when(not_an_object, too_large_or_malformed)
    if missing_key:
        reason = reason.when(_any([c for _, c in missing_key]), _missing_error(missing_key, what, where))
    return reason.otherwise(
        C.error_struct(
            exception_class=C.WRONG_TYPE,
            message=F.concat(
                F.lit(f"{what} has field(s) of the wrong type: "), _names_where(wrong), F.lit(f" (expected {expected})")
            ),
            **where,
        )
    )


def _map_reason(
    text: Column, parses: RejectedParses, is_null: Callable[[str], Column], schema: T.StructType, *, what: str,
    max_string_length: int, where: dict,
) -> Column:
    """``_parsed_reason`` read from the line parsed into a map (``RejectedParses``: any line, any field name)."""
    m = parses.as_map
    return _parsed_reason(
        text, m.isNull(), {f.name: F.try_element_at(m, F.lit(f.name)) for f in schema.fields}, is_null, schema,
        what=what, max_string_length=max_string_length, where=where,
        longer_string=parses.longer_string, longer_number=parses.longer_number,
    )


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def reason_in_the_pass(schema: T.StructType) -> bool:
    """Whether a short rejected line of ``schema`` gets its reason in the pass (``_short_line_reason``): its
    fields are read by JSON path, which names a plain field name exactly."""
    return all(_PLAIN_NAME.match(f.name) for f in schema.fields)


def short_line_limit(max_string_length: int) -> int:
    """Lines up to this many characters cannot be over a size limit: their reason needs no lifted parse."""
    return min(max_string_length, JSON_MAX_NUMBER_LENGTH)


def decidable_in_the_pass(text: Column, max_string_length: int) -> Column:
    """TRUE when the JSON functions ``_short_line_reason`` reads a rejected line with see it as the reader did, so that
    their reason is exact: the line cannot be over a parser size limit (no longer than ``short_line_limit``, or no
    longer than the string limit, the reader's and the functions', and without a run of number characters longer
    than the number limit: no parse with a limit lifted is needed) and holds no control character (which the
    functions accept inside a string and the reader rejects). Evaluated on rejected lines only."""
    number_run = f"[-+0-9.eE]{{{JSON_MAX_NUMBER_LENGTH + 1}}}"
    length = F.length(text)
    bounded = (length <= F.lit(min(max_string_length, JSON_MAX_STRING_LENGTH))) & ~text.rlike(number_run)
    return ((length <= F.lit(short_line_limit(max_string_length))) | bounded) & ~text.rlike(r"[\x00-\x1F]")


def _short_line_reason(text: Column, typed: ValueOf, schema: T.StructType, *, what: str, max_string_length: int,
                       where: dict) -> Column:
    """The reason of a rejected line ``decidable_in_the_pass``, from code-generated expressions only.

    ``json_object_keys`` (NULL: not a JSON object) and ``get_json_object`` (NULL: key absent or JSON null)
    are code-generated, where ``from_json`` is not: in the pass's projection they keep whole-stage code
    generation, and being inside the rejected lines' branch, good records never evaluate them. Such a
    line is never over a size limit (no lifted parse needed), so the DLQ gets it with its reason.
    """
    raw_of = {f.name: F.get_json_object(text, f"$.{f.name}") for f in schema.fields}
    return _parsed_reason(
        text, F.json_object_keys(text).isNull(), raw_of, lambda name: typed(name).isNull(), schema, what=what,
        max_string_length=max_string_length, where=where, longer_string=F.lit(False), longer_number=F.lit(False),
    )


def json_error(
    text: Column, typed: ValueOf, failed: Column, schema: T.StructType, *, what: str,
    max_string_length: int = JSON_MAX_STRING_LENGTH, defer_reason: bool = False, utf8_checked: bool = False,
    **where: str,
) -> Column:
    """The error of a JSON record (an error struct) or NULL.

    ``typed(name)``: the field as parsed into ``schema``; ``failed``: TRUE when the parser rejected the text.
    The reason of a rejection is worked out from ``text`` for rejected records only; ``max_string_length``:
    the parser's limit the text was read with. ``defer_reason``: a rejected (valid UTF-8) line gets the
    placeholder class ``PENDING_REASON``, its reason worked out later by ``rejected_json_reason`` on the
    few rejected lines (see the module docstring: it keeps ``from_json`` out of the pass over every record).
    ``utf8_checked``: the caller gives a text that is not valid UTF-8 its error before this one (a Kafka value),
    so this one has no branch for it: every plan over the record would analyse, optimise and generate code for
    a branch no record takes.
    """
    branches: list[tuple[Column, Column]] = []
    if not utf8_checked:
        branches.append((failed & is_invalid_utf8(text), _utf8_error(text, where)))
    if defer_reason:  # the message holds the typed-NULL flags until the reason replaces it
        if reason_in_the_pass(schema):
            reason = _short_line_reason(text, typed, schema, what=what, max_string_length=max_string_length, where=where)
            branches.append((failed & decidable_in_the_pass(text, max_string_length), reason))
        pending = C.error_struct(exception_class=PENDING_REASON, message=typed_null_flags(schema, typed), **where)
        branches.append((failed, pending))
    else:
        parsed = _map_reason(
            text, RejectedParses.of(text, max_string_length), lambda name: typed(name).isNull(), schema, what=what,
            max_string_length=max_string_length, where=where,
        )
        branches.append((failed, parsed))
    missing_value = _missing(schema, typed)
    if missing_value:
        branches.append((_any([c for _, c in missing_value]), _missing_error(missing_value, what, where)))
    return C.case(branches)


def text_as_map(text: Column, max_string_length: int) -> Column:
    """``text`` parsed into ``map<string,string>`` (NULL: not a JSON object)."""
    return F.from_json(text, _STRING_MAP, {"maxStringLen": str(max_string_length)})


def rejected_json_reason(
    text: str, flags: str, parses: RejectedParses, schema: T.StructType, *, what: str, max_string_length: int,
    **where: str,
) -> Column:
    """The error of a rejected JSON line (the reason ``json_error(defer_reason=True)`` left pending).

    A pending line is valid UTF-8 (an invalid one got its error in the pass). ``flags`` = the column of the pending
    error's message (``typed_null_flags``: which fields the reader left NULL); ``parses``: the names of the columns
    holding ``RejectedParses.of(text)``, computed in an earlier projection, on the rejected lines only.

    The same expression as ``_map_reason``'s, written as one SQL expression: built with ``Column`` calls it is a
    few dozen JVM round trips per field of the schema; parsed from its text it is one, whatever the width.
    """
    position = {f.name: i + 1 for i, f in enumerate(schema.fields)}
    as_map = _sql_column(parses.as_map)
    return F.expr(_parsed_reason_sql(
        _sql_column(text), f"({as_map} IS NULL)", lambda name: f"try_element_at({as_map}, {_sql_string(name)})",
        lambda name: f"(substring({_sql_column(flags)}, {position[name]}, 1) = '1')", schema, what=what,
        max_string_length=max_string_length, where=where, longer_string=_sql_column(parses.longer_string),
        longer_number=_sql_column(parses.longer_number),
    ))


# -- the pending reason as SQL text (one JVM round trip to build, whatever the schema's width) ----------------


_sql_string = C.sql_string


def _sql_column(name: str) -> str:
    return C.quote(name)


def _sql_error_struct(*, exception_class: str, message: str, where: dict) -> str:
    """``columns.error_struct`` as SQL; ``exception_class`` and ``message`` are SQL expressions."""
    return (
        f"CAST(named_struct('stage', {_sql_string(where['stage'])}, "
        f"'component_id', {_sql_string(where['component_id'])}, "
        f"'component_type', {_sql_string(where['component_type'])}, "
        f"'exception_class', CAST({exception_class} AS STRING), 'message', CAST({message} AS STRING), "
        f"'stacktrace', CAST(NULL AS STRING), 'attempt', CAST(1 AS INT)) AS {C.ERROR_TYPE})"
    )


def _sql_names_where(pairs: list[tuple[str, str]]) -> str:
    """``_names_where`` as SQL."""
    return "concat_ws(', ', " + ", ".join(
        f"CASE WHEN coalesce({cond}, false) THEN {_sql_string(name)} END" for name, cond in pairs) + ")"


def _sql_any(conds: list[str]) -> str:
    """``_any`` as SQL."""
    return "(" + " OR ".join(["false", *(f"coalesce({cond}, false)" for cond in conds)]) + ")"


def _not_an_object_errors_sql(text: str, *, what: str, max_string_length: int, where: dict,
                              struct: Callable[..., str]) -> tuple[str, str, str]:
    """The errors of a JSON line the parser did not read as an object, as SQL: a string over the size limit, a number
    over it, or malformed. ``struct`` builds the error (each caller's matches the ``Column`` builder it stands for)."""
    over_string_limit = (f"{what} exceeds the parser's size limit of {max_string_length:,} characters for a string "
                         "value (source setting max-string-length); the record is ")
    too_large = struct(
        exception_class=_sql_string(RECORD_TOO_LARGE),
        message=f"concat({_sql_string(over_string_limit)}, format_number(length({text}), 0), ' characters long')",
        where=where,
    )
    too_long_number = struct(
        exception_class=_sql_string(RECORD_TOO_LARGE),
        message=_sql_string(f"{what} exceeds the parser's size limit of {JSON_MAX_NUMBER_LENGTH:,} digits for a number"),
        where=where,
    )
    malformed = struct(exception_class=_sql_string(C.MALFORMED_RECORD),
                       message=_sql_string(f"malformed JSON {what}: not a JSON object"), where=where)
    return too_large, too_long_number, malformed


def _parsed_reason_sql(
    text: str, not_an_object: str, raw_of: Callable[[str], str], is_null: Callable[[str], str],
    schema: T.StructType, *, what: str, max_string_length: int, where: dict, longer_string: str, longer_number: str,
) -> str:
    """``_parsed_reason`` as one SQL expression (its arguments are SQL expressions)."""
    too_large, too_long_number, malformed = _not_an_object_errors_sql(
        text, what=what, max_string_length=max_string_length, where=where, struct=_sql_error_struct)
    reason = (f"CASE WHEN {not_an_object} THEN (CASE WHEN {longer_string} THEN {too_large} "
              f"WHEN {longer_number} THEN {too_long_number} ELSE {malformed} END)")
    missing_key = [(f.name, f"({raw_of(f.name)} IS NULL)") for f in schema.fields if not f.nullable]
    if missing_key:
        missing = _sql_error_struct(
            exception_class=_sql_string(C.MISSING_FIELD),
            message=f"concat({_sql_string(f'{what} is missing required field(s): ')}, {_sql_names_where(missing_key)})",
            where=where,
        )
        reason += f" WHEN {_sql_any([cond for _, cond in missing_key])} THEN {missing}"
    wrong = [(f.name, f"({raw_of(f.name)} IS NOT NULL AND {is_null(f.name)})") for f in schema.fields]
    expected = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
    wrong_type = _sql_error_struct(
        exception_class=_sql_string(C.WRONG_TYPE),
        message=(f"concat({_sql_string(f'{what} has field(s) of the wrong type: ')}, {_sql_names_where(wrong)}, "
                 f"{_sql_string(f' (expected {expected})')})"),
        where=where,
    )
    return reason + f" ELSE {wrong_type} END"


def csv_error(text: Column, typed: ValueOf, failed: Column, schema: T.StructType, *, separator: str, **where: str) -> Column:
    """The error of a CSV record (columns by position, as Spark reads them with a user schema) or NULL."""
    strings = T.StructType([T.StructField(f.name, T.StringType(), True) for f in schema.fields]).add(
        CORRUPT, T.StringType(), True
    )
    p = F.from_csv(text, _ddl(strings), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "sep": separator})
    present = {f.name: p[f.name].isNotNull() & (p[f.name] != F.lit("")) for f in schema.fields}
    missing_key = [(f.name, ~present[f.name]) for f in schema.fields if not f.nullable]
    wrong = [(f.name, present[f.name] & p[f.name].try_cast(f.dataType).isNull()) for f in schema.fields]
    replaced_at = F.instr(text, REPLACEMENT_CHARACTER)
    reason = F.when(
        replaced_at > F.lit(0),
        C.error_struct(
            exception_class=INVALID_UTF8,
            message=F.concat(
                F.lit("invalid UTF-8 in the CSV line: the reader decoded a byte that is not UTF-8 as U+FFFD at character "),
                (replaced_at - F.lit(1)).cast("string"),
                F.lit(" of the line (0-based; the DLQ keeps the line's bytes base64-encoded)"),
            ),
            **where,
        ),
    ).when(
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
    replaced = [(f.name, typed(f.name).contains(REPLACEMENT_CHARACTER)) for f in schema.fields if isinstance(f.dataType, T.StringType)]
    if replaced:  # the only check every CSV record pays: a byte search per string field
        out = out.when(
            _any([c for _, c in replaced]),
            C.error_struct(
                exception_class=INVALID_UTF8,
                message=F.concat(
                    F.lit("invalid UTF-8 in the CSV line: the reader decoded a byte that is not UTF-8 as U+FFFD in field(s) "),
                    _names_where(replaced),
                    F.lit(" (the DLQ keeps the line's bytes base64-encoded)"),
                ),
                **where,
            ),
        )
    missing_value = _missing(schema, typed)
    if missing_value:
        out = out.when(_any([c for _, c in missing_value]), _missing_error(missing_value, "record", where))
    return out


def from_json_text(text: Column, schema: T.StructType, *, max_string_length: int = JSON_MAX_STRING_LENGTH) -> Column:
    """``text`` parsed into ``schema`` (PERMISSIVE): a struct with the corrupt-record field set on failure."""
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "maxStringLen": str(max_string_length)}
    return F.from_json(text, reader_schema(schema), options)


def _ddl(schema: T.StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


# -- a JSON file source's error as SQL text, the same expression as ``json_error(defer_reason=True)`` ----------
# The record columns of a JSON file source are built once per run as a select list of SQL text (one JVM round trip
# for the list, whatever the schema's width: ``sources.SourceRecords``). Each builder below writes the expression
# its ``Column`` namesake builds, node for node, so that the plan (and its generated code) is the same.


def _sql_struct_error(*, exception_class: str, message: str, where: dict) -> str:
    """``columns.error_struct`` as SQL, as ``F.struct`` of aliased columns builds it; ``exception_class`` and
    ``message`` are SQL expressions."""
    return (
        f"CAST(struct({_sql_string(where['stage'])} AS stage, {_sql_string(where['component_id'])} AS component_id, "
        f"{_sql_string(where['component_type'])} AS component_type, "
        f"CAST({exception_class} AS STRING) AS exception_class, CAST({message} AS STRING) AS message, "
        f"CAST(NULL AS STRING) AS stacktrace, CAST(1 AS INT) AS attempt) AS {C.ERROR_TYPE})"
    )


def _sql_case(branches: list[tuple[str, str]], otherwise: str | None = None) -> str:
    """``F.when(c1, v1).when(c2, v2)...[.otherwise(o)]`` as SQL."""
    whens = " ".join(f"WHEN {cond} THEN {value}" for cond, value in branches)
    return f"CASE {whens}" + (f" ELSE {otherwise}" if otherwise is not None else "") + " END"


def sql_or(conds: list[str]) -> str:
    """``_any`` (and ``functools.reduce`` of ``|``) as SQL: left-nested, no coalesce."""
    if not conds:
        return "false"
    out = conds[0]
    for cond in conds[1:]:
        out = f"({out} OR {cond})"
    return out


def _sql_names_exact(pairs: list[tuple[str, str]]) -> str:
    """``_names_where`` as SQL (no coalesce: a NULL condition of CASE WHEN counts as FALSE)."""
    parts = [f"CASE WHEN {cond} THEN {_sql_string(name)} END" for name, cond in pairs]
    return "concat_ws(', '" + "".join(f", {p}" for p in parts) + ")"


def _sql_is_null(value: str) -> str:
    return f"({value} IS NULL)"


def is_invalid_utf8_sql(text: str) -> str:
    """``is_invalid_utf8`` as SQL."""
    return f"(NOT is_valid_utf8({text}))"


def kept_text_sql(text: str) -> str:
    """``kept_text`` as SQL."""
    return f"CASE WHEN {is_invalid_utf8_sql(text)} THEN base64(CAST({text} AS BINARY)) ELSE {text} END"


def _utf8_error_sql(text: str, where: dict) -> str:
    """``_utf8_error`` as SQL."""
    hexed = f"hex(CAST({text} AS BINARY))"
    valid = f"length(regexp_extract({hexed}, {_sql_string(_VALID_UTF8_PREFIX_HEX)}, 0))"
    located = (f"concat('invalid UTF-8 byte 0x', substring({hexed}, ({valid} + 1), 2), ' at byte offset ', "
               f"CAST(CAST(({valid} / 2) AS BIGINT) AS STRING), ' of the record')")
    message = _sql_case([(f"({valid} < length({hexed}))", located)], "'invalid UTF-8 in the record'")
    return _sql_struct_error(
        exception_class=_sql_string(INVALID_UTF8),
        message=f"concat({message}, ' (the record is kept base64-encoded in the DLQ)')",
        where=where,
    )


def typed_null_flags_sql(schema: T.StructType, typed: Callable[[str], str]) -> str:
    """``typed_null_flags`` as SQL (``typed(name)``: the field's typed value as SQL)."""
    return "concat(" + ", ".join(f"CASE WHEN {_sql_is_null(typed(f.name))} THEN '1' ELSE '0' END" for f in schema.fields) + ")"


def _missing_error_sql(missing: list[tuple[str, str]], what: str, where: dict) -> str:
    """``_missing_error`` as SQL."""
    return _sql_struct_error(
        exception_class=_sql_string(C.MISSING_FIELD),
        message=f"concat({_sql_string(f'{what} is missing required field(s): ')}, {_sql_names_exact(missing)})",
        where=where,
    )


def _short_line_reason_sql(text: str, typed: Callable[[str], str], schema: T.StructType, *, what: str,
                           max_string_length: int, where: dict) -> str:
    """``_short_line_reason`` (``_parsed_reason`` of the JSON functions' reading, never over a size limit) as SQL."""
    raw_of = {f.name: f"get_json_object({text}, {_sql_string('$.' + f.name)})" for f in schema.fields}
    missing_key = [(f.name, f"({_sql_is_null(typed(f.name))} AND {_sql_is_null(raw_of[f.name])})")
                   for f in schema.fields if not f.nullable]
    wrong = [(f.name, f"({_sql_is_null(typed(f.name))} AND ({raw_of[f.name]} IS NOT NULL))") for f in schema.fields]
    expected = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
    too_large, too_long_number, malformed = _not_an_object_errors_sql(
        text, what=what, max_string_length=max_string_length, where=where, struct=_sql_struct_error)
    too_large_or_malformed = _sql_case([("false", too_large), ("false", too_long_number)], malformed)
    branches = [(_sql_is_null(f"json_object_keys({text})"), too_large_or_malformed)]
    if missing_key:
        branches.append((sql_or([c for _, c in missing_key]), _missing_error_sql(missing_key, what, where)))
    wrong_type = _sql_struct_error(
        exception_class=_sql_string(C.WRONG_TYPE),
        message=(f"concat({_sql_string(f'{what} has field(s) of the wrong type: ')}, {_sql_names_exact(wrong)}, "
                 f"{_sql_string(f' (expected {expected})')})"),
        where=where,
    )
    return _sql_case(branches, wrong_type)


def decidable_in_the_pass_sql(text: str, max_string_length: int) -> str:
    """``decidable_in_the_pass`` as SQL."""
    number_run = _sql_string(f"[-+0-9.eE]{{{JSON_MAX_NUMBER_LENGTH + 1}}}")
    length = f"length({text})"
    bounded = f"(({length} <= {min(max_string_length, JSON_MAX_STRING_LENGTH)}) AND (NOT ({text} RLIKE {number_run})))"
    control = _sql_string(r"[\x00-\x1F]")
    return f"((({length} <= {short_line_limit(max_string_length)}) OR {bounded}) AND (NOT ({text} RLIKE {control})))"


def json_error_sql(text: str, typed: Callable[[str], str], failed: str, schema: T.StructType, *, what: str,
                   max_string_length: int = JSON_MAX_STRING_LENGTH, **where: str) -> str:
    """``json_error(..., defer_reason=True)`` as SQL: ``text``, ``typed(name)`` and ``failed`` are SQL expressions."""
    pending = _sql_struct_error(exception_class=_sql_string(PENDING_REASON), message=typed_null_flags_sql(schema, typed),
                                where=where)
    branches = [(f"({failed} AND {is_invalid_utf8_sql(text)})", _utf8_error_sql(text, where))]
    if reason_in_the_pass(schema):
        reason = _short_line_reason_sql(text, typed, schema, what=what, max_string_length=max_string_length, where=where)
        branches.append((f"({failed} AND {decidable_in_the_pass_sql(text, max_string_length)})", reason))
    branches.append((failed, pending))
    missing_value = [(f.name, _sql_is_null(typed(f.name))) for f in schema.fields if not f.nullable]
    if missing_value:
        branches.append((sql_or([c for _, c in missing_value]), _missing_error_sql(missing_value, what, where)))
    return _sql_case(branches)
