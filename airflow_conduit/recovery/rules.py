"""User classification rules: "errors like this one are fatal / transient", evaluated before the built-in rules.

A rule is a mapping, for example (YAML)::

    error-rules:
      - {class: com.acme.QuotaExceededException, as: transient}
      - {sqlstate: "40001", as: transient, name: serialization failure}
      - {message: "(?i)schema .* is locked", as: transient}
      - {condition: DELTA_CONCURRENT_APPEND, as: transient}
      - {stage: destination, code: 2600, as: transient}

Every matcher given must match (AND); the first matching rule wins.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import ErrorKind, RecoveryConfigError

if TYPE_CHECKING:
    from airflow_conduit.recovery.facts import ErrorFacts

VERDICTS = (ErrorKind.FATAL, ErrorKind.TRANSIENT)
_MATCHERS = ("code", "class", "condition", "sqlstate", "message", "stage")
_KEY_ALIASES = {"exception-class": "class", "exception_class": "class", "error_code": "error-code"}
_KNOWN_KEYS = set(_MATCHERS) | {"as", "name", "error-code"}


@dataclass(frozen=True)
class ClassificationRule:
    """One user rule. ``as_`` is the verdict it gives; ``error_code`` is the code reported when it matches."""

    as_: ErrorKind
    name: str | None = None
    code: tuple[int, ...] | None = None
    exception_class: str | None = None  # exact or glob, full ("java.net.ConnectException") or short name
    condition: str | None = None  # Spark error condition; "A" also matches "A.SUB"; globs allowed
    sqlstate: str | None = None  # prefix: "08", "40001", "42P"
    message: str | None = None  # regular expression searched in the error text (case-insensitive)
    stage: str | None = None  # source | processor | destination | dlq | runner
    error_code: int | None = None

    @property
    def fatal(self) -> bool:
        return self.as_ == ErrorKind.FATAL

    @property
    def reported_code(self) -> int:
        if self.error_code is not None:
            return self.error_code
        return codes.FATAL if self.fatal else codes.TRANSIENT

    def label(self, index: int) -> str:
        return f"error-rules[{index}]" + (f" ({self.name})" if self.name else "")

    def matches(self, facts: "ErrorFacts") -> bool:
        if self.code is not None and facts.code not in self.code:
            return False
        if self.exception_class is not None and not any(
            _class_matches(self.exception_class, name) for name in facts.class_names
        ):
            return False
        if self.condition is not None and not any(_condition_matches(self.condition, c) for c in facts.conditions):
            return False
        if self.sqlstate is not None and not any(s.upper().startswith(self.sqlstate.upper()) for s in facts.sqlstates):
            return False
        if self.message is not None and not re.search(self.message, facts.text, re.IGNORECASE):
            return False
        if self.stage is not None and facts.stage != self.stage:
            return False
        return True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.code is not None:
            out["code"] = list(self.code)
        for key, value in (
            ("class", self.exception_class),
            ("condition", self.condition),
            ("sqlstate", self.sqlstate),
            ("message", self.message),
            ("stage", self.stage),
        ):
            if value is not None:
                out[key] = value
        out["as"] = str(self.as_)
        if self.error_code is not None:
            out["error-code"] = self.error_code
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, where: str = "error-rules[0]") -> "ClassificationRule":
        if isinstance(data, ClassificationRule):
            return data
        if not isinstance(data, Mapping):
            raise RecoveryConfigError(where, data, "a rule must be a mapping like {class: X, as: fatal}")
        values: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = _KEY_ALIASES.get(str(raw_key), str(raw_key).replace("_", "-"))
            if key not in _KNOWN_KEYS:
                raise RecoveryConfigError(
                    f"{where}.{raw_key}", value, f"unknown rule key; use one of {', '.join(sorted(_KNOWN_KEYS))}"
                )
            values[key] = value
        verdict = values.get("as")
        if verdict not in VERDICTS:
            raise RecoveryConfigError(f"{where}.as", verdict, "must be 'fatal' or 'transient'")
        if not any(values.get(m) is not None for m in _MATCHERS):
            raise RecoveryConfigError(where, dict(data), f"a rule needs at least one of {', '.join(_MATCHERS)}")
        rule_codes = values.get("code")
        if rule_codes is not None:
            rule_codes = tuple(_as_int(c, f"{where}.code") for c in (rule_codes if isinstance(rule_codes, (list, tuple)) else [rule_codes]))
        message = values.get("message")
        if message is not None:
            try:
                re.compile(str(message))
            except re.error as exc:
                raise RecoveryConfigError(f"{where}.message", message, f"not a valid regular expression ({exc})") from None
        error_code = values.get("error-code")
        if error_code is not None:
            error_code = _as_int(error_code, f"{where}.error-code")
            expected = codes.FATAL_RANGE if verdict == ErrorKind.FATAL else codes.TRANSIENT_RANGE
            if error_code not in expected:
                raise RecoveryConfigError(
                    f"{where}.error-code", error_code,
                    f"a {verdict} rule reports a code in {expected.start}-{expected.stop - 1}",
                )
        return cls(
            as_=ErrorKind(verdict),
            name=None if values.get("name") is None else str(values["name"]),
            code=rule_codes,
            exception_class=_opt_str(values.get("class")),
            condition=_opt_str(values.get("condition")),
            sqlstate=_opt_str(values.get("sqlstate")),
            message=_opt_str(message),
            stage=_opt_str(values.get("stage")),
            error_code=error_code,
        )


def parse_rules(rules: Iterable[Any] | None, *, option: str = "error-rules") -> tuple[ClassificationRule, ...]:
    """Rules from a list of mappings (or ClassificationRule objects)."""
    if rules is None:
        return ()
    if isinstance(rules, (str, bytes, Mapping)):
        raise RecoveryConfigError(option, rules, "expected a list of rules")
    return tuple(ClassificationRule.from_mapping(r, where=f"{option}[{i}]") for i, r in enumerate(rules))


def _as_int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise RecoveryConfigError(where, value, "expected an integer")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise RecoveryConfigError(where, value, "expected an integer") from None
    if not isinstance(value, str) and number != value:
        raise RecoveryConfigError(where, value, "expected an integer")
    return number


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _class_matches(pattern: str, name: str) -> bool:
    short = name.rsplit(".", 1)[-1]
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(short, pattern)


def _condition_matches(pattern: str, condition: str) -> bool:
    pattern, condition = pattern.upper(), condition.upper()
    return condition == pattern or condition.startswith(pattern + ".") or fnmatch.fnmatchcase(condition, pattern)
