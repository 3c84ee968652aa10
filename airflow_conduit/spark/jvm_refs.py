"""JVM classes and constant objects looked up once per SparkContext: what every batch uses again.

Through Py4J each dotted step of ``jvm.org.apache...Name`` is a round trip to the driver's JVM; a class looked up
by its full name is one, and a kept handle none. A batch's bookkeeping (a Delta commit, the Kafka DLQ's producer)
calls the same few classes every time, so they are kept here, per SparkContext (a new session looks them up again).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

_REFS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def jvm_ref(spark, name: str, build: Callable[[Any], Any] | None = None) -> Any:
    """The JVM class ``name`` (a full binary name: ``org.apache.spark.sql.delta.DeltaOperations$Write``), or what
    ``build(jvm)`` returns (a constant: ``scala.Option.empty()``), kept for the SparkContext of ``spark``."""
    sc = spark.sparkContext
    refs = _REFS.setdefault(sc, {})
    if name not in refs:
        refs[name] = build(sc._jvm) if build is not None else getattr(sc._jvm, name)
    return refs[name]


def none(spark) -> Any:
    """Scala's ``None`` (``Option.empty()``)."""
    return jvm_ref(spark, "scala.None", lambda jvm: jvm.scala.Option.empty())


def some(spark, value: Any) -> Any:
    """Scala's ``Some(value)``: one round trip."""
    return jvm_ref(spark, "scala.Some")(value)
