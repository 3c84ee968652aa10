"""The driver's JVM seen from the Python driver: whether it still answers, how it ended, and its log levels.

A killed spark-submit takes the JVM with it while the Python driver may still be building a plan; the runner tells
that apart from a failure of the call (``runner.lost_jvm_or``). A graceful stop quiets the streaming query's own
ERROR log (Spark logs a query ended from ``foreachBatch`` as failed, with a stack trace).

Touches: PySpark's ``SparkContext._jvm`` and ``SparkContext._gateway`` (its ``proc``: the JVM process a local
session started), ``StreamingQuery._jsq``; Log4j 2's ``Configurator.setLevel`` and ``LogManager.getLogger`` in the
driver's JVM. On a Spark upgrade check that Spark still logs through Log4j 2 and that PySpark keeps the gateway's
process. Pinned by tests/spark/test_jvm_driver.py.
"""

from __future__ import annotations

from typing import Any, Callable

from pyspark.sql import SparkSession


def answers(spark: SparkSession) -> bool:
    """Whether the driver's JVM still answers a Py4J call (it is gone when its process was killed)."""
    try:
        spark.sparkContext._jvm.java.lang.System.nanoTime()
    except Exception:  # noqa: BLE001 - any failure to reach it means it is gone
        return False
    return True


def exit_code(spark: SparkSession, wait_seconds: float) -> int | None:
    """The exit code of the driver's JVM when this process started it (a local session) and it ended within
    ``wait_seconds``; else None (under spark-submit the JVM is this process's parent)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is None:
        return None
    try:  # it no longer answers: its end is a moment away, if it is not reaped already
        return proc.wait(timeout=wait_seconds)
    except Exception:  # noqa: BLE001 - unknown is an answer (still ending, or not a child)
        return None


def query_class_name(query: Any) -> str:
    """The JVM class name of a running ``StreamingQuery``'s execution (the logger Spark reports its end with)."""
    return query._jsq.streamingQuery().getClass().getName()


def logger_off(spark: SparkSession, name: str) -> Callable[[], None]:
    """Turn the driver's Log4j logger ``name`` off; returns the function that puts its level back."""
    jvm = spark.sparkContext._jvm
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    previous = jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel()
    configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.OFF)
    return lambda: configurator.setLevel(name, previous)


def level_of(spark: SparkSession, name: str) -> str:
    """The level of the driver's Log4j logger ``name``, by name (``OFF``, ``ERROR``, ...)."""
    return str(spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel().name())
