"""A small pure-Python reader for Spark DDL schema strings (``"id INT, customer STRING NOT NULL"``).

The spec is validated before Spark starts, so a typo in a schema must be caught
without Spark. This accepts the subset of Spark's DDL that file sources and the
generator use: scalar types, DECIMAL(p, s), (VAR)CHAR(n), ARRAY<...>,
MAP<..., ...>, STRUCT<...>, backquoted names, NOT NULL and COMMENT. The runner
still hands the original string to Spark (``StructType.fromDDL``); columns
declared NOT NULL are reported by :func:`parse_ddl` so the runner can nack
records that miss them.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

SIMPLE_TYPES = {
    "BOOLEAN": "BOOLEAN",
    "TINYINT": "TINYINT",
    "BYTE": "TINYINT",
    "SMALLINT": "SMALLINT",
    "SHORT": "SMALLINT",
    "INT": "INT",
    "INTEGER": "INT",
    "BIGINT": "BIGINT",
    "LONG": "BIGINT",
    "FLOAT": "FLOAT",
    "REAL": "FLOAT",
    "DOUBLE": "DOUBLE",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMP_LTZ": "TIMESTAMP",
    "TIMESTAMP_NTZ": "TIMESTAMP_NTZ",
    "STRING": "STRING",
    "BINARY": "BINARY",
    "VARIANT": "VARIANT",
}
DECIMAL_TYPES = {"DECIMAL", "DEC", "NUMERIC"}
LENGTH_TYPES = {"VARCHAR": "VARCHAR", "CHAR": "CHAR", "CHARACTER": "CHAR"}
COMPLEX_TYPES = {"ARRAY", "MAP", "STRUCT"}
ALL_TYPE_NAMES = sorted(set(SIMPLE_TYPES) | DECIMAL_TYPES | set(LENGTH_TYPES) | COMPLEX_TYPES)

_TOKEN = re.compile(
    r"\s*(?:(?P<bq>`(?:[^`]|``)*`)|(?P<str>'(?:[^'\\]|\\.)*')|(?P<num>\d+)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[<>(),:]))"
)


class DDLError(ValueError):
    """The schema string is not a DDL column list; the message says where and what was expected."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # normalized upper-case Spark type, e.g. "DECIMAL(10,2)", "ARRAY<STRING>"
    nullable: bool = True
    comment: str | None = None


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            bad = text[pos:].lstrip()[:1]
            raise DDLError(f"unexpected character {bad!r} at position {len(text) - len(text[pos:].lstrip())}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        if kind == "bq":
            value = value[1:-1].replace("``", "`")
        tokens.append((kind, value))
        pos = m.end()
    return tokens


def _quote(name: str) -> str:
    """A name as Spark's DDL reads it back: plain identifiers as they are, others in backquotes."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self, what: str) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise DDLError(f"unexpected end of schema, expected {what}")
        self.i += 1
        return tok

    def expect(self, punct: str) -> None:
        kind, value = self.next(repr(punct))
        if kind != "punct" or value != punct:
            raise DDLError(f"expected {punct!r}, got {value!r}")

    def accept(self, punct: str) -> bool:
        tok = self.peek()
        if tok and tok[0] == "punct" and tok[1] == punct:
            self.i += 1
            return True
        return False

    def accept_word(self, word: str) -> bool:
        tok = self.peek()
        if tok and tok[0] == "ident" and tok[1].upper() == word:
            self.i += 1
            return True
        return False

    def name(self) -> str:
        kind, value = self.next("a column name")
        if kind not in ("ident", "bq"):
            raise DDLError(f"expected a column name, got {value!r}")
        return value

    def integer(self) -> int:
        kind, value = self.next("a number")
        if kind != "num":
            raise DDLError(f"expected a number, got {value!r}")
        return int(value)

    def data_type(self, column: str) -> str:
        kind, value = self.next(f"a type for column {column!r}")
        upper = value.upper()
        if kind != "ident" or upper not in ALL_TYPE_NAMES:
            hint = difflib.get_close_matches(upper, ALL_TYPE_NAMES, n=1)
            suggestion = f" (did you mean {hint[0]}?)" if hint else ""
            raise DDLError(f"unknown type {value!r} for column {column!r}{suggestion}")
        if upper in SIMPLE_TYPES:
            return SIMPLE_TYPES[upper]
        if upper in DECIMAL_TYPES:
            if self.accept("("):
                precision = self.integer()
                scale = self.integer() if self.accept(",") else 0
                self.expect(")")
                if not 1 <= precision <= 38 or scale > precision:
                    raise DDLError(f"DECIMAL({precision},{scale}) for column {column!r}: need 1 <= precision <= 38 and scale <= precision")
                return f"DECIMAL({precision},{scale})"
            return "DECIMAL(10,0)"
        if upper in LENGTH_TYPES:
            self.expect("(")
            length = self.integer()
            self.expect(")")
            return f"{LENGTH_TYPES[upper]}({length})"
        self.expect("<")
        if upper == "ARRAY":
            inner = self.data_type(column)
            self.expect(">")
            return f"ARRAY<{inner}>"
        if upper == "MAP":
            key = self.data_type(column)
            self.expect(",")
            val = self.data_type(column)
            self.expect(">")
            return f"MAP<{key},{val}>"
        fields: list[str] = []
        if not self.accept(">"):
            while True:
                col = self.column(allow_colon=True, parent=column)
                fields.append(f"{_quote(col.name)}:{col.type}" + ("" if col.nullable else " NOT NULL"))
                if self.accept(">"):
                    break
                self.expect(",")
        return f"STRUCT<{','.join(fields)}>"

    def column(self, allow_colon: bool = False, parent: str | None = None) -> Column:
        name = self.name()
        shown = f"{parent}.{name}" if parent else name
        if allow_colon:
            self.accept(":")
        col_type = self.data_type(shown)
        nullable = True
        comment = None
        while True:
            if self.accept_word("NOT"):
                if not self.accept_word("NULL"):
                    raise DDLError(f"expected NULL after NOT for column {shown!r}")
                nullable = False
            elif self.accept_word("COMMENT"):
                kind, value = self.next("a quoted comment")
                if kind != "str":
                    raise DDLError(f"expected a quoted comment for column {shown!r}, got {value!r}")
                comment = value[1:-1]
            else:
                break
        return Column(name, col_type, nullable, comment)


def parse_ddl(text: str) -> list[Column]:
    """Columns of a DDL list ``"name TYPE [NOT NULL] [COMMENT '...'], ..."``; raises DDLError."""
    if not isinstance(text, str) or not text.strip():
        raise DDLError("expected a DDL column list such as 'id INT, name STRING'")
    parser = _Parser(text)
    columns: list[Column] = []
    seen: set[str] = set()
    while True:
        col = parser.column()
        if col.name.lower() in seen:
            raise DDLError(f"column {col.name!r} is declared twice")
        seen.add(col.name.lower())
        columns.append(col)
        tok = parser.peek()
        if tok is None:
            break
        if tok != ("punct", ","):
            raise DDLError(f"expected ',' or the end of the schema after column {col.name!r}, got {tok[1]!r}")
        parser.i += 1
    return columns


def parse_type(text: str) -> str:
    """A single data type, e.g. ``"DECIMAL(10, 2)"`` -> ``"DECIMAL(10,2)"``; raises DDLError."""
    if not isinstance(text, str) or not text.strip():
        raise DDLError("expected a Spark SQL type such as INT or STRING")
    parser = _Parser(text)
    result = parser.data_type("<type>")
    if parser.peek() is not None:
        raise DDLError(f"unexpected {parser.peek()[1]!r} after type {result}")
    return result
