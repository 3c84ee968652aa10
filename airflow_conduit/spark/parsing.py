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

Every expression here is written once, as Spark SQL text, from SQL text of its
inputs (a column's quoted name, a parse of it): a JSON file source's record
columns go to the JVM as one ``selectExpr`` list (one round trip at any width,
``sources.SourceRecords``), and a caller that needs a ``Column`` parses the same
text (``F.expr``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark import columns as C

CORRUPT = "__ac_corrupt"
_STRING_MAP = "'map<string,string>'"  # what a line is parsed into to read its keys (SQL)

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


Sql = str  # a Spark SQL expression
ValueOf = Callable[[str], Sql]  # field name -> the field's typed value


def parse_schema(ddl: str) -> T.StructType:
    """A Spark DDL column list (``id BIGINT NOT NULL, name STRING``) as a StructType; NOT NULL = required."""
    return T.StructType.fromDDL(ddl)


def nullable(schema: T.StructType) -> T.StructType:
    """The schema with every field nullable (readers must not drop a record that lacks a NOT NULL field)."""
    return T.StructType([T.StructField(f.name, f.dataType, True) for f in schema.fields])


def reader_schema(schema: T.StructType) -> T.StructType:
    """What a PERMISSIVE reader parses into: the fields, all nullable, plus the corrupt-record column."""
    return nullable(schema).add(CORRUPT, T.StringType(), True)


# -- SQL building blocks ---------------------------------------------------------------------------------------

_s = C.sql_string


def _is_null(value: Sql) -> Sql:
    return f"({value} IS NULL)"


def _case(branches: list[tuple[Sql, Sql]], otherwise: Sql | None = None) -> Sql:
    """``CASE WHEN c1 THEN v1 ... [ELSE o] END`` (NULL when no condition holds and no ``otherwise``)."""
    whens = " ".join(f"WHEN {cond} THEN {value}" for cond, value in branches)
    return f"CASE {whens}" + (f" ELSE {otherwise}" if otherwise is not None else "") + " END"


def sql_or(conds: list[Sql]) -> Sql:
    """TRUE when a condition is TRUE; FALSE or NULL otherwise: a condition of CASE WHEN, where NULL counts as
    FALSE (no ``coalesce`` per condition: each is an expression every plan analyses and optimises)."""
    if not conds:
        return "false"
    out = conds[0]
    for cond in conds[1:]:
        out = f"({out} OR {cond})"
    return out


def _names_where(pairs: list[tuple[str, Sql]]) -> Sql:
    """Comma-separated names whose condition is TRUE (a NULL condition, as in any CASE WHEN, counts as FALSE)."""
    return "concat_ws(', '" + "".join(f", CASE WHEN {cond} THEN {_s(name)} END" for name, cond in pairs) + ")"


def _error(exception_class: str, message: Sql, where: dict) -> Sql:
    """The error struct (``columns.error_struct_sql``) of ``exception_class`` with ``message`` (SQL)."""
    return C.error_struct_sql(exception_class=_s(exception_class), message=message, **where)


def field_of(struct: Sql, name: str) -> Sql:
    """Field ``name`` of the struct ``struct`` (as ``Column[name]`` reads it)."""
    return f"{struct}[{_s(name)}]"


def _options(options: dict[str, str]) -> Sql:
    return "map(" + ", ".join(f"{_s(k)}, {_s(v)}" for k, v in options.items()) + ")"


def _ddl(schema: T.StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


# -- parsing ----------------------------------------------------------------------------------------------------


def from_json_text(text: Sql, schema: T.StructType, *, max_string_length: int = JSON_MAX_STRING_LENGTH) -> Sql:
    """``text`` parsed into ``schema`` (PERMISSIVE): a struct with the corrupt-record field set on failure."""
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "maxStringLen": str(max_string_length)}
    return f"from_json({text}, {_s(reader_schema(schema).json())}, {_options(options)})"


def from_csv_text(text: Sql, schema: T.StructType, *, separator: str) -> Sql:
    """``text`` parsed into ``schema`` as Spark's CSV reader does (PERMISSIVE, the corrupt-record field on failure)."""
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "sep": separator}
    return f"from_csv({text}, {_s(_ddl(reader_schema(schema)))}, {_options(options)})"


def parse_failed(text: Sql, parsed: Sql) -> Sql:
    """TRUE when ``text`` is not NULL and ``parsed`` (its parse) rejected it."""
    return f"(({text} IS NOT NULL) AND (({parsed} IS NULL) OR ({field_of(parsed, CORRUPT)} IS NOT NULL)))"


def typed_null_flags(schema: T.StructType, typed: ValueOf) -> Sql:
    """One character per field of ``schema``, in order: ``1`` where the typed value is NULL, else ``0``.

    What a pending reason needs of the reader's (partial) result of a rejected line: which fields did not
    come out typed. Flags, not names: any field name is safe in them.
    """
    return "concat(" + ", ".join(f"CASE WHEN {_is_null(typed(f.name))} THEN '1' ELSE '0' END" for f in schema.fields) + ")"


def _missing_error(missing: list[tuple[str, Sql]], what: str, where: dict) -> Sql:
    return _error(C.MISSING_FIELD, f"concat({_s(f'{what} is missing required field(s): ')}, {_names_where(missing)})", where)


def is_invalid_utf8(text: Sql) -> Sql:
    """TRUE when ``text`` (a string holding a line's bytes as read) is not valid UTF-8; NULL for NULL."""
    return f"(NOT is_valid_utf8({text}))"


def kept_text(text: Sql) -> Sql:
    """The line as the DLQ keeps it: as is, or base64 of its bytes when it is not valid UTF-8.

    A string that is not UTF-8 cannot cross into Python or a JSON file unchanged (it would come out with
    U+FFFD); base64 keeps every byte.
    """
    return f"CASE WHEN {is_invalid_utf8(text)} THEN base64(CAST({text} AS BINARY)) ELSE {text} END"


def utf8_error(text: Sql, where: dict) -> Sql:
    """"invalid UTF-8 byte 0xFF at byte offset 17 of the record": the first byte that starts no valid sequence."""
    hexed = f"hex(CAST({text} AS BINARY))"
    valid = f"length(regexp_extract({hexed}, {_s(_VALID_UTF8_PREFIX_HEX)}, 0))"
    located = (f"concat('invalid UTF-8 byte 0x', substring({hexed}, ({valid} + 1), 2), ' at byte offset ', "
               f"CAST(CAST(({valid} / 2) AS BIGINT) AS STRING), ' of the record')")
    message = _case([(f"({valid} < length({hexed}))", located)], "'invalid UTF-8 in the record'")
    return _error(INVALID_UTF8, f"concat({message}, ' (the record is kept base64-encoded in the DLQ)')", where)


def text_as_map(text: Sql, max_string_length: int) -> Sql:
    """``text`` parsed into ``map<string,string>`` (NULL: not a JSON object)."""
    return f"from_json({text}, {_STRING_MAP}, {_options({'maxStringLen': str(max_string_length)})})"


def longer_string_than_limit(text: Sql, max_string_length: int) -> Sql:
    """TRUE when ``text`` did not parse only because a string value is over ``max_string_length`` (it parses
    with the limit lifted); the parse runs only for text longer than the limit."""
    lifted = f"from_json({text}, {_STRING_MAP}, {_options({'maxStringLen': _NO_LIMIT})})"
    return f"((length({text}) > {max_string_length}) AND ({lifted} IS NOT NULL))"


def _number_run() -> Sql:
    return _s(f"[-+0-9.eE]{{{JSON_MAX_NUMBER_LENGTH + 1}}}")


def longer_number_than_limit(text: Sql, max_string_length: int) -> Sql:
    """TRUE when ``text`` did not parse only because a number is over the parser's ``maxNumLen``; the parse
    runs only for text holding a run of number characters longer than the limit (searched for only in
    text longer than the limit)."""
    lifted = f"from_json({text}, {_STRING_MAP}, {_options({'maxStringLen': str(max_string_length), 'maxNumLen': _NO_LIMIT})})"
    return (f"(((length({text}) > {JSON_MAX_NUMBER_LENGTH}) AND ({text} RLIKE {_number_run()})) "
            f"AND ({lifted} IS NOT NULL))")


@dataclass(frozen=True)
class RejectedParses:
    """What the reason of a rejected JSON line is read from: the line as a map (NULL: not a JSON object) and
    whether it failed only on a size limit. ``rejected_json_reason`` takes them as columns computed in an
    earlier projection (their names): ``from_json`` has no generated code, so the reason itself stays
    code-generated. ``of`` gives them as ``Column``s for that projection."""

    as_map: Any
    longer_string: Any
    longer_number: Any

    @classmethod
    def sql(cls, text: Sql, max_string_length: int) -> "RejectedParses":
        return cls(text_as_map(text, max_string_length), longer_string_than_limit(text, max_string_length),
                   longer_number_than_limit(text, max_string_length))

    @classmethod
    def of(cls, text: Sql, max_string_length: int) -> "RejectedParses":
        """The parts of the line ``text`` (SQL: a column's quoted name) as ``Column``s."""
        parts = cls.sql(text, max_string_length)
        return cls(F.expr(parts.as_map), F.expr(parts.longer_string), F.expr(parts.longer_number))


# -- the reason of a rejected JSON line ------------------------------------------------------------------------


def _not_an_object_error(text: Sql, *, what: str, max_string_length: int, where: dict, longer_string: Sql,
                         longer_number: Sql) -> Sql:
    """For text that is not a JSON object: over a parser size limit (``longer_string`` / ``longer_number``), or malformed."""
    over_string_limit = (f"{what} exceeds the parser's size limit of {max_string_length:,} characters for a string "
                         "value (source setting max-string-length); the record is ")
    too_large = _error(RECORD_TOO_LARGE,
                       f"concat({_s(over_string_limit)}, format_number(length({text}), 0), ' characters long')", where)
    too_long_number = _error(
        RECORD_TOO_LARGE, _s(f"{what} exceeds the parser's size limit of {JSON_MAX_NUMBER_LENGTH:,} digits for a number"), where)
    malformed = _error(C.MALFORMED_RECORD, _s(f"malformed JSON {what}: not a JSON object"), where)
    return _case([(longer_string, too_large), (longer_number, too_long_number)], malformed)


def _parsed_reason(
    text: Sql, not_an_object: Sql, raw_of: ValueOf, is_null: ValueOf, schema: T.StructType, *, what: str,
    max_string_length: int, where: dict, longer_string: Sql, longer_number: Sql,
) -> Sql:
    """The reason of a rejected line that is valid UTF-8: size limit / malformed, missing field, wrong type.

    ``not_an_object``: TRUE when the text is not a JSON object; ``raw_of(name)``: the field's JSON value,
    NULL when the key is absent or its value is JSON null; ``is_null(name)``: the reader left it NULL.
    """
    # each field's typed NULL first: it is the cheap test, and it short-circuits the field's JSON value, which
    # re-reads the line (get_json_object), for every field the reader typed (a key absent or NULL in the text
    # is NULL typed too, so the results are the same)
    missing_key = [(f.name, f"({is_null(f.name)} AND {_is_null(raw_of(f.name))})") for f in schema.fields if not f.nullable]
    wrong = [(f.name, f"({is_null(f.name)} AND ({raw_of(f.name)} IS NOT NULL))") for f in schema.fields]
    expected = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
    branches = [(not_an_object, _not_an_object_error(text, what=what, max_string_length=max_string_length, where=where,
                                                     longer_string=longer_string, longer_number=longer_number))]
    if missing_key:
        branches.append((sql_or([c for _, c in missing_key]), _missing_error(missing_key, what, where)))
    wrong_type = _error(C.WRONG_TYPE, (f"concat({_s(f'{what} has field(s) of the wrong type: ')}, {_names_where(wrong)}, "
                                       f"{_s(f' (expected {expected})')})"), where)
    return _case(branches, wrong_type)


def _map_reason(text: Sql, parses: RejectedParses, is_null: ValueOf, schema: T.StructType, *, what: str,
                max_string_length: int, where: dict) -> Sql:
    """``_parsed_reason`` read from the line parsed into a map (``RejectedParses``, SQL: any line, any field name)."""
    return _parsed_reason(
        text, _is_null(parses.as_map), lambda name: f"try_element_at({parses.as_map}, {_s(name)})", is_null, schema,
        what=what, max_string_length=max_string_length, where=where, longer_string=parses.longer_string,
        longer_number=parses.longer_number,
    )


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def reason_in_the_pass(schema: T.StructType) -> bool:
    """Whether a short rejected line of ``schema`` gets its reason in the pass (``_short_line_reason``): its
    fields are read by JSON path, which names a plain field name exactly."""
    return all(_PLAIN_NAME.match(f.name) for f in schema.fields)


def short_line_limit(max_string_length: int) -> int:
    """Lines up to this many characters cannot be over a size limit: their reason needs no lifted parse."""
    return min(max_string_length, JSON_MAX_NUMBER_LENGTH)


def decidable_in_the_pass(text: Sql, max_string_length: int) -> Sql:
    """TRUE when the JSON functions ``_short_line_reason`` reads a rejected line with see it as the reader did, so that
    their reason is exact: the line cannot be over a parser size limit (no longer than ``short_line_limit``, or no
    longer than the string limit, the reader's and the functions', and without a run of number characters longer
    than the number limit: no parse with a limit lifted is needed) and holds no control character (which the
    functions accept inside a string and the reader rejects). Evaluated on rejected lines only."""
    length = f"length({text})"
    bounded = f"(({length} <= {min(max_string_length, JSON_MAX_STRING_LENGTH)}) AND (NOT ({text} RLIKE {_number_run()})))"
    control = _s(r"[\x00-\x1F]")
    return f"((({length} <= {short_line_limit(max_string_length)}) OR {bounded}) AND (NOT ({text} RLIKE {control})))"


def _short_line_reason(text: Sql, typed: ValueOf, schema: T.StructType, *, what: str, max_string_length: int,
                       where: dict) -> Sql:
    """The reason of a rejected line ``decidable_in_the_pass``, from code-generated expressions only.

    ``json_object_keys`` (NULL: not a JSON object) and ``get_json_object`` (NULL: key absent or JSON null)
    are code-generated, where ``from_json`` is not: in the pass's projection they keep whole-stage code
    generation, and being inside the rejected lines' branch, good records never evaluate them. Such a
    line is never over a size limit (no lifted parse needed), so the DLQ gets it with its reason.
    """
    return _parsed_reason(
        text, _is_null(f"json_object_keys({text})"), lambda name: f"get_json_object({text}, {_s('$.' + name)})",
        lambda name: _is_null(typed(name)), schema, what=what, max_string_length=max_string_length, where=where,
        longer_string="false", longer_number="false",
    )


def json_error(
    text: Sql, typed: ValueOf, failed: Sql, schema: T.StructType, *, what: str,
    max_string_length: int = JSON_MAX_STRING_LENGTH, defer_reason: bool = False, utf8_checked: bool = False,
    **where: str,
) -> Sql:
    """The error of a JSON record (an error struct) or NULL, as SQL; ``text``, ``typed(name)`` and ``failed`` are SQL.

    ``typed(name)``: the field as parsed into ``schema``; ``failed``: TRUE when the parser rejected the text.
    The reason of a rejection is worked out from ``text`` for rejected records only; ``max_string_length``:
    the parser's limit the text was read with. ``defer_reason``: a rejected (valid UTF-8) line gets the
    placeholder class ``PENDING_REASON``, its reason worked out later by ``rejected_json_reason`` on the
    few rejected lines (see the module docstring: it keeps ``from_json`` out of the pass over every record).
    ``utf8_checked``: the caller gives a text that is not valid UTF-8 its error before this one (a Kafka value),
    so this one has no branch for it: every plan over the record would analyse, optimise and generate code for
    a branch no record takes.
    """
    branches: list[tuple[Sql, Sql]] = []
    if not utf8_checked:
        branches.append((f"({failed} AND {is_invalid_utf8(text)})", utf8_error(text, where)))
    if defer_reason:  # the message holds the typed-NULL flags until the reason replaces it
        if reason_in_the_pass(schema):
            reason = _short_line_reason(text, typed, schema, what=what, max_string_length=max_string_length, where=where)
            branches.append((f"({failed} AND {decidable_in_the_pass(text, max_string_length)})", reason))
        branches.append((failed, _error(PENDING_REASON, typed_null_flags(schema, typed), where)))
    else:
        reason = _map_reason(text, RejectedParses.sql(text, max_string_length), lambda name: _is_null(typed(name)), schema,
                             what=what, max_string_length=max_string_length, where=where)
        branches.append((failed, reason))
    missing_value = [_is_null(typed(f.name)) for f in schema.fields if not f.nullable]
    if missing_value:
        missing = [(f.name, _is_null(typed(f.name))) for f in schema.fields if not f.nullable]
        branches.append((sql_or(missing_value), _missing_error(missing, what, where)))
    return _case(branches)


def rejected_json_reason(
    text: str, flags: str, parses: RejectedParses, schema: T.StructType, *, what: str, max_string_length: int,
    **where: str,
) -> Column:
    """The error of a rejected JSON line (the reason ``json_error(defer_reason=True)`` left pending).

    A pending line is valid UTF-8 (an invalid one got its error in the pass). ``flags`` = the column of the pending
    error's message (``typed_null_flags``: which fields the reader left NULL); ``parses``: the names of the columns
    holding ``RejectedParses.of(text)``, computed in an earlier projection, on the rejected lines only. One SQL
    expression: one JVM round trip to build, whatever the width.
    """
    position = {f.name: i + 1 for i, f in enumerate(schema.fields)}
    columns = RejectedParses(*(C.quote(name) for name in (parses.as_map, parses.longer_string, parses.longer_number)))
    return F.expr(_map_reason(
        C.quote(text), columns, lambda name: f"(substring({C.quote(flags)}, {position[name]}, 1) = '1')", schema,
        what=what, max_string_length=max_string_length, where=where,
    ))


# -- the error of a CSV record --------------------------------------------------------------------------------


def csv_error(text: Sql, typed: ValueOf, failed: Sql, schema: T.StructType, *, separator: str, **where: str) -> Sql:
    """The error of a CSV record (columns by position, as Spark reads them with a user schema) or NULL, as SQL."""
    strings = T.StructType([T.StructField(f.name, T.StringType(), True) for f in schema.fields])
    p = from_csv_text(text, strings, separator=separator)
    present = {f.name: f"(({field_of(p, f.name)} IS NOT NULL) AND ({field_of(p, f.name)} != ''))" for f in schema.fields}
    missing_key = [(f.name, f"(NOT {present[f.name]})") for f in schema.fields if not f.nullable]
    wrong = [(f.name, f"({present[f.name]} AND (try_cast({field_of(p, f.name)} AS {f.dataType.simpleString()}) IS NULL))")
             for f in schema.fields]
    replaced_at = f"instr({text}, {_s(REPLACEMENT_CHARACTER)})"
    branches = [
        (f"({replaced_at} > 0)", _error(INVALID_UTF8, (
            f"concat({_s('invalid UTF-8 in the CSV line: the reader decoded a byte that is not UTF-8 as U+FFFD at character ')}, "
            f"CAST(({replaced_at} - 1) AS STRING), "
            f"{_s(' of the line (0-based; the DLQ keeps the line' + chr(39) + 's bytes base64-encoded)')})"), where)),
        (f"(({p} IS NULL) OR ({field_of(p, CORRUPT)} IS NOT NULL))",
         _error(C.MALFORMED_RECORD, _s(f"malformed CSV line: expected {len(schema.fields)} columns"), where)),
    ]
    if missing_key:
        branches.append((sql_or([c for _, c in missing_key]), _missing_error(missing_key, "record", where)))
    reason = _case(branches, _error(C.WRONG_TYPE, f"concat('record has field(s) of the wrong type: ', {_names_where(wrong)})", where))
    out = [(failed, reason)]
    replaced = [(f.name, f"contains({typed(f.name)}, {_s(REPLACEMENT_CHARACTER)})") for f in schema.fields
                if isinstance(f.dataType, T.StringType)]
    if replaced:  # the only check every CSV record pays: a byte search per string field
        out.append((sql_or([c for _, c in replaced]), _error(INVALID_UTF8, (
            f"concat({_s('invalid UTF-8 in the CSV line: the reader decoded a byte that is not UTF-8 as U+FFFD in field(s) ')}, "
            f"{_names_where(replaced)}, {_s(' (the DLQ keeps the line' + chr(39) + 's bytes base64-encoded)')})"), where)))
    missing_value = [(f.name, _is_null(typed(f.name))) for f in schema.fields if not f.nullable]
    if missing_value:
        out.append((sql_or([c for _, c in missing_value]), _missing_error(missing_value, "record", where)))
    return _case(out)
