"""The building blocks of a plugin's settings table: a setting's kind (how its value is checked), the
``Setting`` itself and a plugin's ``PluginSchema``.

Apart from the tables (settings_schema.py) so that modules contributing settings to several plugins'
tables (kafka_settings.py: the Kafka client settings of the source, destination and DLQ) can build on
them without importing the tables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_conduit.pipeline.ddl import DDLError, parse_ddl
from airflow_conduit.pipeline.secrets import mask_url_credentials, uri_has_userinfo_password

@dataclass(frozen=True)
class Context:
    """What a kind needs besides the value: where relative paths start, whether the value came from ${ENV}."""

    base_dir: str
    from_env: bool = False


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}.get(
        type(value), type(value).__name__
    )


def _got(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return _type_name(value)
    return f"{_type_name(value)} {value!r}" if value is not None else _type_name(value)


class Kind:
    """How one setting's value is checked and normalized; ``coerce`` raises ValueError saying what was expected."""

    doc = "value"

    def coerce(self, value: Any, ctx: Context) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class String(Kind):
    doc = "string"

    def coerce(self, value, ctx):
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {_got(value)}")
        if not value.strip():
            raise ValueError("expected a non-empty string")
        return value


class PathKind(String):
    """A file system path or URI; a relative local path is resolved against the spec file's folder."""

    doc = "path"

    def coerce(self, value, ctx):
        value = super().coerce(value, ctx)
        if uri_has_userinfo_password(value):
            raise ValueError(
                f"the URI contains a password ({mask_url_credentials(value)!r}): give credentials through "
                "the file system's own configuration (Spark/Hadoop settings, environment), never in the path"
            )
        if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", value) or value.startswith("file:"):
            return value
        return os.path.normpath(os.path.join(ctx.base_dir, os.path.expanduser(value)))


@dataclass(frozen=True)
class Integer(Kind):
    minimum: int | None = None
    maximum: int | None = None

    @property
    def doc(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"integer {self.minimum}..{self.maximum}"
        if self.minimum is not None:
            return f"integer >= {self.minimum}"
        return "integer"

    def coerce(self, value, ctx):
        if ctx.from_env and isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an {self.doc}, got {_got(value)}")
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise ValueError(f"expected an {self.doc}, got {value}")
        return value


@dataclass(frozen=True)
class Number(Kind):
    minimum: float | None = None
    maximum: float | None = None

    @property
    def doc(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"number {self.minimum:g}..{self.maximum:g}"
        return "number"

    def coerce(self, value, ctx):
        if ctx.from_env and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a {self.doc}, got {_got(value)}")
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise ValueError(f"expected a {self.doc}, got {value}")
        return float(value)


class Boolean(Kind):
    doc = "boolean"

    def coerce(self, value, ctx):
        if ctx.from_env and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_got(value)}")
        return value


@dataclass(frozen=True)
class Choice(Kind):
    choices: tuple[str, ...]

    @property
    def doc(self) -> str:
        return " | ".join(self.choices)

    def coerce(self, value, ctx):
        if not isinstance(value, str) or value.lower() not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {_got(value)}")
        return value.lower()


class DDLSchema(String):
    doc = "DDL column list"

    def coerce(self, value, ctx):
        value = super().coerce(value, ctx)
        try:
            parse_ddl(value)
        except DDLError as exc:
            raise ValueError(f"expected a DDL column list like 'id INT, name STRING': {exc}") from None
        return value


@dataclass(frozen=True)
class StringList(Kind):
    """A list of non-empty strings; with ``allow_single`` a lone string is read as a one-item list."""

    allow_single: bool = False
    doc = "list of strings"

    def coerce(self, value, ctx):
        if self.allow_single and isinstance(value, str) and value.strip():
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
            raise ValueError(f"expected a non-empty list of strings, got {_got(value)}")
        if len(set(value)) != len(value):
            raise ValueError(f"the list names some entries twice: {value}")
        return list(value)


_NO_DEFAULT = object()


@dataclass(frozen=True)
class Setting:
    """One setting of one plugin.

    ``required_when``/``only_when`` are ``(other_key, values)``: the setting is
    required / allowed only when the other setting (after defaults) is one of
    ``values``. The default is filled only where the setting is allowed.
    """

    kind: Kind
    doc: str
    required: bool = False
    default: Any = _NO_DEFAULT
    required_when: tuple[str, tuple[Any, ...]] | None = None
    only_when: tuple[str, tuple[Any, ...]] | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


# A cross-field check gets the normalized settings and a report(key, message) callback.
Check = Callable[[dict[str, Any], Callable[[str, str], None]], None]


@dataclass(frozen=True)
class PluginSchema:
    doc: str
    settings: Mapping[str, Setting]
    checks: tuple[Check, ...] = ()
    one_of: tuple[tuple[str, ...], ...] = ()  # groups of keys of which exactly one must be given
