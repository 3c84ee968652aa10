"""Everything the classifier can learn from an error, whatever shape it arrives in.

Inputs: an exception (its whole ``__cause__``/``__context__`` chain), a
``StructuredError``, a dict or JSON text of one, or stderr / plain text from a job
(which may carry an ``AIRFLOW_CONDUIT_ERROR {json}`` line, Java stack traces,
Spark ``[ERROR_CONDITION]`` tags and ``SQLSTATE: 42703`` notes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError, PipelineError, StructuredError, TransientError
from airflow_conduit.recovery.java_errors import (
    JavaCause,
    has_java_trace,
    java_causes,
    java_causes_from_text,
    py4j_call,
    root_cause,
)

# "java.net.ConnectException", "org.postgresql.util.PSQLException", "psycopg2.OperationalError"
_QUALIFIED_CLASS = re.compile(
    r"(?<![\w.$])((?:[A-Za-z_][\w]*\.)+[A-Z][\w$]*(?:Exception|Error|Failure|Throwable))(?![\w$])"
)
# Spark 4 messages start with "[CONDITION.SUB_CONDITION] ..."
_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]{2,}(?:\.[A-Z0-9_]+)*)\]")
# "SQLSTATE: 42703" (Spark), "SQLState: 08001" (JDBC), "sqlstate=23505"
_SQLSTATE = re.compile(r"SQL ?STATE\s*[:=]?\s*([0-9A-Z]{5})\b", re.IGNORECASE)
_STACK_FRAME = re.compile(r"^\s*(?:at [\w$.<>/]+\(|\.\.\. \d+ (?:more|common frames omitted))")
_SUMMARY_LIMIT = 500
_TEXT_LIMIT = 200_000


@dataclass
class Marker:
    """A ``TransientError``/``FatalError`` (any ``PipelineError``) found in an exception chain."""

    class_name: str
    fatal: bool
    code: int


@dataclass
class ErrorFacts:
    code: int | None = None  # explicit structured error code
    fatal_flag: bool | None = None  # the structured error's own "fatal" (used for codes outside the ranges)
    markers: list[Marker] = field(default_factory=list)  # outermost first
    class_names: list[str] = field(default_factory=list)  # Python chain (with bases), then names found in text
    conditions: list[str] = field(default_factory=list)
    sqlstates: list[str] = field(default_factory=list)
    stage: str | None = None
    exit_code: int | None = None
    text: str = ""  # all messages, for regular expressions
    summary: str = ""  # one line for humans
    exception_class: str | None = None  # the most specific class known (outermost exception / structured field)
    component_id: str | None = None
    component_type: str | None = None
    java_root: JavaCause | None = None  # the Java exception behind a Py4J error (java_errors.root_cause)


def gather_facts(error: Any, *, exit_code: int | None = None) -> ErrorFacts:
    facts = ErrorFacts(exit_code=exit_code)
    if error is None:
        pass
    elif isinstance(error, BaseException):
        _from_exception(facts, error)
    elif isinstance(error, StructuredError):
        _from_structured(facts, error)
    elif isinstance(error, dict):
        _from_dict(facts, error)
    elif isinstance(error, (str, bytes)):
        text = error.decode("utf-8", "replace") if isinstance(error, bytes) else error
        _from_text(facts, text)
    else:
        raise TypeError(
            f"cannot classify {type(error).__name__}: pass an exception, a StructuredError, a dict or text"
        )
    facts.text = facts.text[-_TEXT_LIMIT:]
    _scan_text(facts, facts.text)
    if not facts.summary:
        facts.summary = _first_line(facts.text)
    return facts


def _from_exception(facts: ErrorFacts, error: BaseException) -> None:
    texts: list[str] = []
    for exc in _chain(error):
        names = _class_names(type(exc))
        if facts.exception_class is None:
            facts.exception_class = names[0]
        _add_all(facts.class_names, names)
        if isinstance(exc, PipelineError):
            fatal = _marker_is_fatal(exc)
            facts.markers.append(Marker(type(exc).__name__, fatal, _marker_code(exc, fatal)))
        structured = getattr(exc, "structured_error", None)
        if isinstance(structured, StructuredError) and facts.code is None:
            _from_structured(facts, structured, keep_text=False)
        _add(facts.conditions, _call(exc, "getCondition") or _call(exc, "getErrorClass"))
        _add(facts.sqlstates, _call(exc, "getSqlState") or getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None))
        message = _safe_str(exc)
        texts.append(f"{names[0]}: {message}" if message else names[0])
        _add_java_chain(facts, java_causes(exc) or (java_causes_from_text(message) if py4j_call(message) else []))
        if not facts.summary:
            facts.summary = (
                facts.java_root.text() if facts.java_root is not None
                else _first_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
            )
        if facts.code is None and codes.ERROR_LINE_PREFIX.strip() in message:
            line_error = StructuredError.from_stderr(message)
            if line_error is not None:
                _from_structured(facts, line_error, keep_text=False)
    facts.text = "\n".join(texts)


def _from_structured(facts: ErrorFacts, error: StructuredError, *, keep_text: bool = True) -> None:
    facts.code = int(error.code)
    facts.fatal_flag = bool(error.fatal)
    if error.exception_class:
        _add(facts.class_names, error.exception_class)
        facts.exception_class = facts.exception_class or error.exception_class
    _add(facts.conditions, error.error_condition)
    _add(facts.sqlstates, error.sqlstate)
    facts.stage = facts.stage or error.stage
    facts.component_id = facts.component_id or error.component_id
    facts.component_type = facts.component_type or error.component_type
    if keep_text:
        facts.text = (facts.text + "\n" + (error.message or "")).strip("\n")
        facts.summary = facts.summary or _first_line(error.message or "")


def _from_dict(facts: ErrorFacts, data: dict[str, Any]) -> None:
    if "code" in data:
        try:
            _from_structured(facts, StructuredError.from_dict(data))
            return
        except (TypeError, ValueError):
            pass  # a dict with a broken code: use what it says in words
    facts.stage = data.get("stage") if isinstance(data.get("stage"), str) else None
    for key in ("exception_class", "error_condition", "sqlstate"):
        value = data.get(key)
        if isinstance(value, str):
            {"exception_class": facts.class_names, "error_condition": facts.conditions, "sqlstate": facts.sqlstates}[key].append(value)
    facts.text = str(data.get("message") or json.dumps(data, sort_keys=True, default=str))


def _from_text(facts: ErrorFacts, text: str) -> None:
    structured = StructuredError.from_stderr(text)
    if structured is not None:
        _from_structured(facts, structured, keep_text=False)
        facts.summary = _first_line(structured.message or "")
        facts.text = (structured.message or "") + "\n" + text
        return
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict):
            _from_dict(facts, data)
            return
    facts.text = text
    if has_java_trace(text):
        _add_java_chain(facts, java_causes_from_text(text))
    facts.summary = facts.java_root.text() if facts.java_root is not None else _last_meaningful_line(text)


def _add_java_chain(facts: ErrorFacts, causes: list[JavaCause]) -> None:
    """A Py4J error's Java causes: their classes, their SQLSTATEs (the root's first) and the root for the summary."""
    root = root_cause(causes)
    if root is None:
        return
    if facts.java_root is None:
        facts.java_root = root
    _add(facts.sqlstates, root.sqlstate)
    for cause in causes:
        _add(facts.class_names, cause.class_name)
        _add(facts.sqlstates, cause.sqlstate)


def _scan_text(facts: ErrorFacts, text: str) -> None:
    """Java class names, Spark error conditions and SQLSTATEs written in the messages."""
    for match in _QUALIFIED_CLASS.finditer(text):
        _add(facts.class_names, match.group(1))
    for match in _CONDITION.finditer(text):
        _add(facts.conditions, match.group(1))
    for match in _SQLSTATE.finditer(text):
        _add(facts.sqlstates, match.group(1).upper())


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The exception, then its causes and contexts (depth first, outermost first), each once."""
    seen: set[int] = set()
    stack = [error]
    while stack:
        exc = stack.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        followers: list[BaseException] = []
        if exc.__cause__ is not None:
            followers.append(exc.__cause__)
        if exc.__context__ is not None:
            followers.append(exc.__context__)
        followers.extend(getattr(exc, "exceptions", None) or [])  # ExceptionGroup members
        stack.extend(reversed([f for f in followers if isinstance(f, BaseException)]))


def _class_names(cls: type) -> list[str]:
    """Qualified name of the class, then of its bases (not object/BaseException/Exception)."""
    names = []
    for klass in cls.__mro__:
        if klass in (object, BaseException, Exception):
            continue
        module = klass.__module__
        names.append(klass.__qualname__ if module == "builtins" else f"{module}.{klass.__qualname__}")
    return names or [cls.__qualname__]


def _marker_is_fatal(exc: PipelineError) -> bool:
    if isinstance(exc, FatalError):
        return True
    if isinstance(exc, TransientError):
        return False
    return bool(codes.is_fatal_code(exc.code))


def _marker_code(exc: PipelineError, fatal: bool) -> int:
    expected = codes.FATAL_RANGE if fatal else codes.TRANSIENT_RANGE
    return exc.code if exc.code in expected else (codes.FATAL if fatal else codes.TRANSIENT)


def _call(obj: Any, method: str) -> Any:
    func = getattr(obj, method, None)
    if not callable(func):
        return None
    try:
        value = func()
    except Exception:  # a broken accessor must not break classification
        return None
    return value if isinstance(value, str) and value else None


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return ""


def _add(items: list[str], value: Any) -> None:
    if isinstance(value, str) and value and value not in items:
        items.append(value)


def _add_all(items: list[str], values: list[str]) -> None:
    for value in values:
        _add(items, value)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:_SUMMARY_LIMIT]
    return ""


def _last_meaningful_line(text: str) -> str:
    """For stderr: the last line that looks like an error (the first lines are often log noise)."""
    # Stack frames ("at org.apache.spark.deploy.SparkSubmit.error(...)", "... 12 more") are not the error.
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _STACK_FRAME.match(line)]
    for line in reversed(lines):
        if re.search(r"error|exception|failed|refused|denied|timed out", line, re.IGNORECASE):
            return line[:_SUMMARY_LIMIT]
    return lines[-1][:_SUMMARY_LIMIT] if lines else ""
