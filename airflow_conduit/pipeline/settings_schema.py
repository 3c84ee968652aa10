"""Every plugin's settings in one table: name, kind, default, when required.

This is the single place to add a setting: one ``Setting(...)`` line in the
plugin's table. The loader checks types and allowed values, fills defaults,
refuses unknown keys (suggesting the closest known one) and runs the plugin's
cross-field checks. docs/sources.md, processors.md, destinations.md, kafka.md and delta.md document the same table.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from airflow_conduit.pipeline.ddl import DDLError, parse_type
from airflow_conduit.pipeline.kafka_settings import (
    KAFKA_CLIENT_CHECKS,
    KAFKA_CLIENT_ONE_OF,
    KAFKA_CLIENT_SETTINGS,
    KAFKA_SOURCE_SCHEMA,
)
from airflow_conduit.pipeline.secrets import mask_url_credentials, url_has_credentials
from airflow_conduit.pipeline.setting_kinds import (  # noqa: F401 - re-exported: json_schema and tests import them here
    Boolean,
    Choice,
    DDLSchema,
    Integer,
    Kind,
    Number,
    PathKind,
    PluginSchema,
    Setting,
    String,
    StringList,
    _got,
)

FORMATS = ("json", "csv", "parquet")
LOG_LEVELS = ("info", "warn", "error")


class TypeMap(Kind):
    """Mapping column name -> Spark SQL type (generator fields); types are normalized upper case."""

    doc = "mapping name -> type"

    def coerce(self, value, ctx):
        if not isinstance(value, dict) or not value:
            raise ValueError(f"expected a non-empty mapping of field name to Spark SQL type, got {_got(value)}")
        out: dict[str, str] = {}
        for name, type_text in value.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"field names must be strings, got {_got(name)}")
            try:
                out[name] = parse_type(type_text)
            except DDLError as exc:
                raise ValueError(f"field {name!r}: {exc}") from None
        return out


class StringMap(Kind):
    doc = "mapping string -> string"

    def coerce(self, value, ctx):
        if not isinstance(value, dict) or not value:
            raise ValueError(f"expected a non-empty mapping of string to string, got {_got(value)}")
        for k, v in value.items():
            if not isinstance(k, str) or not isinstance(v, str) or not k or not v:
                raise ValueError(f"expected string -> string entries, got {k!r}: {v!r}")
        return dict(value)


def _outside_quotes(text: str) -> tuple[list[tuple[int, str]], str | None]:
    """(position, character) of every character outside SQL quotes ('...', "...", `...`), and the quote left open."""
    found: list[tuple[int, str]] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        else:
            found.append((i, ch))
        i += 1
    return found, quote


def _balance_problem(text: str) -> str | None:
    """Cheap sanity check of a SQL expression: quotes closed, brackets balanced (Spark checks the rest)."""
    closing = {")": "(", "]": "["}
    stack: list[str] = []
    chars, quote = _outside_quotes(text)
    for i, ch in chars:
        if ch in "([":
            stack.append(ch)
        elif ch in ")]":
            if not stack or stack.pop() != closing[ch]:
                return f"unbalanced {ch!r} at position {i}"
    if quote:
        return f"unterminated {quote} quote"
    if stack:
        return f"unclosed {stack[-1]!r}"
    return None


def split_select_list(text: str) -> list[str]:
    """Split ``"*, a + 1 AS b, concat(x, y) AS z"`` on top-level commas."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in _outside_quotes(text)[0]:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


class Expression(Kind):
    """A Spark SQL expression; a YAML number or boolean is read as its SQL literal."""

    doc = "Spark SQL expression"

    def coerce(self, value, ctx):
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = repr(value)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected a Spark SQL expression (string), got {_got(value)}")
        problem = _balance_problem(value)
        if problem:
            raise ValueError(f"not a valid Spark SQL expression: {problem}")
        return value


class ExpressionList(Kind):
    doc = "list of Spark SQL expressions"

    def coerce(self, value, ctx):
        if not isinstance(value, list) or not value:
            raise ValueError(f"expected a non-empty list of Spark SQL expressions, got {_got(value)}")
        return [Expression().coerce(v, ctx) for v in value]


RULE_ACTIONS = ("warn", "drop", "fail")
RULE_KEYS = ("name", "condition", "action")
_RULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")


class RuleList(Kind):
    """Expectation rules: a list of {name, condition, action}; names unique, conditions checked like any expression."""

    doc = "list of rules {name, condition, action: warn | drop | fail}"

    def coerce(self, value, ctx):
        if not isinstance(value, list) or not value:
            raise ValueError(f"expected a non-empty list of rules (name, condition, action), got {_got(value)}")
        rules: list[dict[str, str]] = []
        seen: set[str] = set()
        for index, item in enumerate(value):
            where = f"rule {index + 1}"
            if not isinstance(item, dict):
                raise ValueError(f"{where}: expected a mapping with name, condition and action, got {_got(item)}")
            unknown = [k for k in item if k not in RULE_KEYS]
            if unknown:
                raise ValueError(f"{where}: unknown key {unknown[0]!r}; expected: {', '.join(RULE_KEYS)}")
            name = item.get("name")
            if not isinstance(name, str) or not _RULE_NAME.match(name):
                raise ValueError(f"{where}: 'name' must be letters, digits, '_', '.' or '-', got {_got(name)}")
            where = f"rule {name!r}"
            if name in seen:
                raise ValueError(f"{where}: the name is used twice in this processor")
            seen.add(name)
            if "condition" not in item:
                raise ValueError(f"{where}: missing 'condition' (a Spark SQL boolean expression)")
            try:
                condition = Expression().coerce(item["condition"], ctx)
            except ValueError as exc:
                raise ValueError(f"{where}: condition: {exc}") from None
            action = item.get("action", "warn")
            if not isinstance(action, str) or action.lower() not in RULE_ACTIONS:
                raise ValueError(f"{where}: 'action' must be one of {', '.join(RULE_ACTIONS)}, got {_got(action)}")
            rules.append({"name": name, "condition": condition, "action": action.lower()})
        return rules


class FunctionRef(String):
    doc = "module:callable"
    _PATTERN = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")

    def coerce(self, value, ctx):
        value = super().coerce(value, ctx)
        if not self._PATTERN.match(value.strip()):
            raise ValueError(f"expected 'package.module:function', got {value!r}")
        return value.strip()


class JdbcUrl(String):
    doc = "jdbc:<subprotocol>:..."

    def coerce(self, value, ctx):
        value = super().coerce(value, ctx)
        # checked first, and the value is never echoed unmasked: a refused URL must not leak its password
        if url_has_credentials(value):
            raise ValueError(
                f"the URL contains a password ({mask_url_credentials(value)!r}): remove it and put it in "
                "settings.password (use ${ENV_VAR}) so it is never printed or logged"
            )
        if not re.match(r"jdbc:[a-z0-9]+:", value):
            raise ValueError(
                f"expected a JDBC URL such as 'jdbc:postgresql://host:5432/db', got {mask_url_credentials(value)!r}"
            )
        return value




def _sql_select_list(settings: dict[str, Any], report: Callable[[str, str], None]) -> None:
    """``expression: "*, a AS b"`` is also offered to the runner as ``select: ["*", "a AS b"]``."""
    if "expression" in settings and "select" not in settings:
        parts = split_select_list(settings["expression"])
        if any(not p for p in parts):
            report("expression", "has an empty item in its select list (a stray comma?)")
        settings["select"] = parts


DELTA_MODES = ("append", "merge")


def _delta_path_is_a_delta_table(settings: dict[str, Any], report: Callable[[str, str], None]) -> None:
    """A local folder that already holds files but no ``_delta_log`` is not a Delta table (Parquet, JSON...):
    refused when the spec is loaded, not at the first batch. Remote paths are checked by the runner."""
    path = settings.get("path")
    if not isinstance(path, str) or re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", path) and not path.startswith("file:"):
        return
    folder = path.removeprefix("file://").removeprefix("file:")
    if not os.path.isdir(folder) or os.path.isdir(os.path.join(folder, "_delta_log")):
        return
    if any(not name.startswith(".") for name in os.listdir(folder)):
        report(
            "path",
            f"{folder} holds files but is not a Delta table (no _delta_log): point it at a Delta table or a new "
            f"folder, or convert the folder first (CONVERT TO DELTA parquet.`{folder}` for Parquet files)",
        )


# --------------------------------------------------------------------------------------------
# The tables. Keys are the YAML setting names.
# --------------------------------------------------------------------------------------------

_FORMAT_CSV = ("format", ("csv",))

SOURCE_SCHEMAS: dict[str, PluginSchema] = {
    "file": PluginSchema(
        "Files in a folder read by Spark's file source; new files are picked up on the next batch.",
        {
            "path": Setting(PathKind(), "folder (or glob) to read; relative to the spec file's folder", required=True),
            "format": Setting(Choice(FORMATS), "file format", default="json"),
            "schema": Setting(
                DDLSchema(),
                "Spark DDL column list; NOT NULL columns make a record without them a per-record error",
                required_when=("format", ("json", "csv")),
            ),
            "max-files-per-trigger": Setting(Integer(minimum=1), "at most this many new files per micro-batch"),
            "header": Setting(Boolean(), "the first line of each CSV file is a header", default=True, only_when=_FORMAT_CSV),
            "max-string-length": Setting(
                Integer(minimum=1, maximum=2**31 - 1),
                "longest string value the JSON parser accepts (Spark's maxStringLen); a longer one is a DLQ record",
                default=20_000_000,
                only_when=("format", ("json",)),
            ),
        },
    ),
    "generator": PluginSchema(
        "Synthetic records for demos and benchmarks, with a share of bad records on purpose.",
        {
            "records": Setting(Integer(minimum=1), "total number of records to generate", default=1000),
            "rate": Setting(Integer(minimum=1), "records per second (continuous mode); unset: as fast as possible"),
            "fields": Setting(TypeMap(), "field name -> Spark SQL type of the generated records", required=True),
            "bad-record-ratio": Setting(
                Number(minimum=0.0, maximum=1.0), "share of records generated malformed (for DLQ demos)", default=0.0
            ),
            "seed": Setting(Integer(), "random seed: the same seed gives the same records", default=0),
        },
    ),
    "kafka": KAFKA_SOURCE_SCHEMA,
}

RESERVED_HEADER_PREFIXES = ("conduit.", "__connect.")  # the headers the Kafka writers set themselves


def _header_names_free(settings: dict[str, Any], report: Callable[[str, str], None]) -> None:
    """A Kafka record's own headers must not pose as the dedup or error headers the runner writes."""
    names = [*(settings.get("headers") or {}), *(settings.get("header-fields") or [])]
    for key in ("headers", "header-fields"):
        for name in settings.get(key) or []:
            if name.startswith(RESERVED_HEADER_PREFIXES):
                report(key, f"header {name!r}: names starting with {' or '.join(RESERVED_HEADER_PREFIXES)} are the runner's own")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        report("header-fields", f"header(s) {', '.join(map(repr, twice))} given both in headers and header-fields")


KAFKA_DESTINATION_SCHEMA = PluginSchema(
    "Records written to a Kafka topic with Spark's Kafka sink, exactly once per batch (dedup headers, read-back).",
    {
        **KAFKA_CLIENT_SETTINGS,
        "topic": Setting(String(), "topic to write (it must exist)", required=True),
        "key": Setting(Expression(), "the record's key: a field name or any Spark SQL expression; unset: no key"),
        "value": Setting(
            Expression(), "the record's value: a field name or Spark SQL expression; unset: the whole record as JSON"
        ),
        "headers": Setting(StringMap(), "static headers: name -> value"),
        "header-fields": Setting(StringList(allow_single=True), "fields whose values become headers of their own name"),
    },
    checks=(*KAFKA_CLIENT_CHECKS, _header_names_free),
    one_of=KAFKA_CLIENT_ONE_OF,
)

DESTINATION_SCHEMAS: dict[str, PluginSchema] = {
    "file": PluginSchema(
        "Files written by Spark's writer, one batch at a time, idempotent per batch.",
        {
            "path": Setting(PathKind(), "output folder; relative to the spec file's folder", required=True),
            "format": Setting(Choice(FORMATS), "file format", default="json"),
            "header": Setting(Boolean(), "write a header line in each CSV file", default=True, only_when=_FORMAT_CSV),
        },
    ),
    "jdbc": PluginSchema(
        "A database table written over JDBC (tested with PostgreSQL).",
        {
            "url": Setting(JdbcUrl(), "JDBC URL without credentials, e.g. jdbc:postgresql://host:5432/db", required=True),
            "table": Setting(String(), "target table, optionally schema-qualified", required=True),
            "user": Setting(String(), "database user"),
            "password": Setting(String(), "database password (a secret: write ${ENV_VAR})"),
            "key": Setting(
                StringList(allow_single=True), "key columns: rows are upserted on them (idempotent across restarts)"
            ),
            "driver": Setting(String(), "JDBC driver class", default="org.postgresql.Driver"),
        },
    ),
    "delta": PluginSchema(
        "A Delta Lake table, appended to or merged into, exactly once per batch by Delta's idempotent transactions.",
        {
            "path": Setting(PathKind(), "the table's folder (created at the first write when missing); relative to the spec file's folder"),
            "table": Setting(String(), "an existing Delta table in the session's catalog, e.g. lake.orders"),
            "mode": Setting(Choice(DELTA_MODES), "append every record, or merge (upsert) on `key`", default="append"),
            "key": Setting(
                StringList(allow_single=True), "key columns of a merge: a record updates the row with its key, else is inserted",
                required_when=("mode", ("merge",)), only_when=("mode", ("merge",)),
            ),
            "merge-schema": Setting(
                Boolean(), "a record field the table lacks adds a column (Delta's mergeSchema) instead of sending the record to the DLQ",
                default=False,
            ),
        },
        checks=(_delta_path_is_a_delta_table,),
        one_of=(("path", "table"),),
    ),
    "kafka": KAFKA_DESTINATION_SCHEMA,
    "log": PluginSchema(
        "Writes each record to the driver log (Conduit's default DLQ, builtin:log).",
        {
            "level": Setting(Choice(LOG_LEVELS), "log level", default="warn"),
            "message": Setting(String(), "message logged with each record", default="record delivery failed"),
        },
    ),
}

PROCESSOR_SCHEMAS: dict[str, PluginSchema] = {
    "field.set": PluginSchema(
        "Sets a field to the value of a Spark SQL expression (a string literal needs quotes: \"'EUR'\").",
        {
            "field": Setting(String(), "field to set (created if missing)", required=True),
            "value": Setting(Expression(), "Spark SQL expression", required=True),
        },
    ),
    "field.rename": PluginSchema(
        "Renames fields.",
        {"mapping": Setting(StringMap(), "old name -> new name", required=True)},
    ),
    "field.exclude": PluginSchema(
        "Removes fields.",
        {"fields": Setting(StringList(allow_single=True), "fields to remove", required=True)},
    ),
    "filter": PluginSchema(
        "Keeps the records where the condition is TRUE; FALSE or NULL drops the record (acked, counted as filtered).",
        {"condition": Setting(Expression(), "Spark SQL boolean expression", required=True)},
    ),
    "sql": PluginSchema(
        "Replaces each record by a Spark SQL select list evaluated on it (DataFrame.selectExpr).",
        {
            "select": Setting(ExpressionList(), "select expressions, e.g. ['*', 'amount * 100 AS cents']"),
            "expression": Setting(Expression(), "the same as one string: '*, amount * 100 AS cents'"),
        },
        checks=(_sql_select_list,),
        one_of=(("select", "expression"),),
    ),
    "json.decode": PluginSchema(
        "Parses a JSON string field into a struct; malformed JSON is a per-record error (DLQ).",
        {
            "field": Setting(String(), "string field holding JSON", required=True),
            "schema": Setting(DDLSchema(), "DDL column list of the decoded struct", required=True),
            "target": Setting(String(), "field that receives the struct; default: replaces `field`"),
        },
    ),
    "custom": PluginSchema(
        "Calls a user's Python function for each record (dict in, dict out; None drops it); exceptions are per-record errors.",
        {"function": Setting(FunctionRef(), "importable 'package.module:function'", required=True)},
    ),
    "expect": PluginSchema(
        "Data-quality rules: each a Spark SQL boolean expression; a record fails a rule when it is FALSE or NULL. "
        "Action warn counts it, drop sends the record to the DLQ, fail also stops the run after the batch.",
        {"rules": Setting(RuleList(), "list of {name, condition, action (default warn)}", required=True)},
    ),
}

SCHEMAS_BY_ROLE: dict[str, dict[str, PluginSchema]] = {
    "source": SOURCE_SCHEMAS,
    "destination": DESTINATION_SCHEMAS,
    "processor": PROCESSOR_SCHEMAS,
}
