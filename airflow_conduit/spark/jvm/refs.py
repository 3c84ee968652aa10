"""JVM classes, members and constant objects looked up once per SparkContext: what every batch uses again.

Through Py4J each dotted step of ``jvm.org.apache...Name`` is a round trip to the driver's JVM; a class looked up
by its full name is one, and a kept handle none. A batch's bookkeeping (a Delta commit, the Kafka DLQ's producer)
and every column a plan builds (Spark's functions, ``Seq`` conversions) call the same few members every time, so
they are kept here, per SparkContext (a new session looks them up again).

Touches: PySpark's ``SparkContext._jvm`` (the Py4J view of the driver's JVM), the entry of every other module of
this package. On a PySpark upgrade check that a classic (not Spark Connect) SparkContext still has it. Pinned by
tests/spark/test_jvm_contracts.py (``test_refs_...``).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

_REFS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def jvm_member(sc, key: str, build: Callable[[Any], Any] | None = None) -> Any:
    """What ``build(jvm)`` returns (a member, a constant: ``scala.Option.empty()``), or the JVM class ``key`` (a full
    binary name: ``org.apache.spark.sql.delta.DeltaOperations$Write``), kept under ``key`` for the SparkContext ``sc``."""
    refs = _REFS.setdefault(sc, {})
    if key not in refs:
        refs[key] = build(sc._jvm) if build is not None else getattr(sc._jvm, key)
    return refs[key]


def jvm_ref(spark, name: str, build: Callable[[Any], Any] | None = None) -> Any:
    """``jvm_member`` for the SparkContext of ``spark``."""
    return jvm_member(spark.sparkContext, name, build)


def none(spark) -> Any:
    """Scala's ``None`` (``Option.empty()``)."""
    return jvm_ref(spark, "scala.None", lambda jvm: jvm.scala.Option.empty())


def some(spark, value: Any) -> Any:
    """Scala's ``Some(value)``: one round trip."""
    return jvm_ref(spark, "scala.Some")(value)
