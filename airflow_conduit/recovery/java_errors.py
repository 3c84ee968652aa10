"""The Java exception behind a Py4J error: its cause chain, root message and SQLSTATE.

PySpark re-raises JVM exceptions it does not translate as ``Py4JJavaError``, whose first line is
only ``An error occurred while calling o763.jdbc.``. What a user needs (``PSQLException: FATAL:
password authentication failed ...``, SQLSTATE ``28P01``) sits in the Java cause chain. Two
readers, both pure (no py4j import; duck typing):

- ``java_causes(exc)``: walks ``exc.java_exception`` through py4j (``getCause()``,
  ``getClass().getName()``, ``getMessage()``, ``getSQLState()``) while the JVM is alive;
- ``java_causes_from_text(text)``: reads the printed stack trace (``: cls: msg`` then
  ``Caused by: cls: msg`` lines), for stderr text or when the JVM is gone.

``root_cause`` picks the cause to report: the deepest one carrying a SQLSTATE (the JDBC driver's
exception, whose message names the server and the reason), else the deepest one.
``is_spark_start_failure`` recognises Spark that could not start at all (classify.py, code 2700).
``java_exception`` is py4j's documented attribute; tests/spark/test_error_causes.py pins the
reading against real py4j and PostgreSQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_CAUSES = 20  # a cause chain longer than this is cut (cycles, pathological wrappers)
_MESSAGE_LIMIT = 500

# "org.postgresql.util.PSQLException: FATAL: password authentication failed" (class, then the message)
_EXCEPTION = re.compile(r"((?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*)(?:: (.*))?$")
_PY4J_CALL = re.compile(r"An error occurred while calling (\S+?)\.?$", re.MULTILINE)
_THREAD_DEATH = re.compile(r'^Exception in thread "[^"]*" (.*)$')  # a JVM whose main thread died (spark-submit)
SPARK_CONTEXT_CONSTRUCTOR = "None.org.apache.spark.api.java.JavaSparkContext"
SPARK_SUBMIT_FRAME = "at org.apache.spark.deploy.SparkSubmit"


@dataclass(frozen=True)
class JavaCause:
    class_name: str
    message: str
    sqlstate: str | None = None

    def text(self) -> str:
        return f"{self.class_name}: {self.message}" if self.message else self.class_name


def _call(obj: Any, method: str) -> Any:
    try:
        return getattr(obj, method)()
    except Exception:  # noqa: BLE001 - a method the class lacks, or a JVM that is gone
        return None


def java_causes(error: BaseException) -> list[JavaCause]:
    """The Java chain of a ``Py4JJavaError`` (outermost first), read through py4j; [] if it has none or the JVM is gone."""
    current = getattr(error, "java_exception", None)
    causes: list[JavaCause] = []
    while current is not None and len(causes) < MAX_CAUSES:
        java_class = _call(current, "getClass")
        name = _call(java_class, "getName") if java_class is not None else None
        if not isinstance(name, str):
            break
        message = _call(current, "getMessage")
        sqlstate = _call(current, "getSQLState")
        causes.append(
            JavaCause(
                name,
                _one_line(message) if isinstance(message, str) else "",
                sqlstate if isinstance(sqlstate, str) and sqlstate else None,
            )
        )
        following = _call(current, "getCause")
        if following is None or following == current:
            break
        current = following
    return causes


def java_causes_from_text(text: str) -> list[JavaCause]:
    """The exceptions of a printed Java stack trace (outermost first); SQLSTATEs are not printed there.

    Py4J prints ``<message>: <exception>`` with the exception on a line starting with ``": "``;
    a JVM whose main thread died prints ``Exception in thread "main" <exception>``; each cause
    follows as ``Caused by: <exception>``.
    """
    causes: list[JavaCause] = []
    for raw in text.splitlines():
        line = raw.strip()
        death = _THREAD_DEATH.match(line)
        if line.startswith("Caused by: "):
            body = line[len("Caused by: "):]
        elif raw.startswith(": ") and not causes:
            body = raw[2:].strip()
        elif death and not causes:
            body = death.group(1)
        else:
            continue
        match = _EXCEPTION.match(body)
        if match:
            causes.append(JavaCause(match.group(1), _one_line(match.group(2) or "")))
            if len(causes) >= MAX_CAUSES:
                break
    return causes


def root_cause(causes: list[JavaCause]) -> JavaCause | None:
    """The deepest cause with a SQLSTATE, else the deepest cause."""
    with_state = [cause for cause in causes if cause.sqlstate]
    if with_state:
        return with_state[-1]
    return causes[-1] if causes else None


def py4j_call(text: str) -> str | None:
    """``o763.jdbc`` from "An error occurred while calling o763.jdbc." (None when the text is not a Py4J error)."""
    match = _PY4J_CALL.search(text)
    return match.group(1) if match else None


def has_java_trace(text: str) -> bool:
    """The text holds a printed Java exception: a Py4J error or a JVM whose thread died."""
    return bool(py4j_call(text)) or any(_THREAD_DEATH.match(line.strip()) for line in text.splitlines())


def is_spark_start_failure(text: str) -> bool:
    """Spark could not even start: ``SparkContext(...)`` failed in the JVM, or spark-submit itself gave up
    (its main thread died in ``org.apache.spark.deploy.SparkSubmit``: a bad master, a missing file, a bad option)."""
    if f"while calling {SPARK_CONTEXT_CONSTRUCTOR}" in text:
        return True
    return SPARK_SUBMIT_FRAME in text and any(_THREAD_DEATH.match(line.strip()) for line in text.splitlines())


def _one_line(message: str) -> str:
    line = " ".join(message.split())
    return line[:_MESSAGE_LIMIT]
