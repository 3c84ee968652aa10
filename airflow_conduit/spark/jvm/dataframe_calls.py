"""DataFrame methods called with JVM arguments (columns, ``Seq``s, maps) built once per run: one round trip each.

A PySpark ``withColumn`` / ``drop`` converts its Python arguments on every call (a ``Column`` is already a JVM
column, but a list goes over one element per round trip); a batch's DLQ rows add the same few columns every
batch. Here the JVM arguments are built once (``string_seq``, ``java_map``, ``jvm_column``) and the call is the
Dataset's own.

Touches: PySpark's ``pyspark.sql.classic.dataframe.DataFrame(jdf, session)``, ``DataFrame._jdf`` (the JVM ``Dataset``), ``Column._jc`` (the JVM ``Column``),
``SparkContext._active_spark_context`` and its ``_jvm``, and Spark's ``PythonUtils.toSeq`` (``private[spark]``
in Scala, public in bytecode). On a PySpark upgrade check those attributes (a classic, not Spark Connect,
session) and that ``Dataset.withColumn(String, Column)`` and ``Dataset.drop(Seq<String>)`` keep their signatures.
Pinned by tests/spark/test_jvm_contracts.py (``test_dataframe_calls_...``).
"""

from __future__ import annotations

from typing import Any

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame



def frame(jdf: Any, like: DataFrame) -> DataFrame:
    """A DataFrame of the JVM ``Dataset`` ``jdf``, in ``like``'s session (PySpark's classic ``DataFrame``)."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    return ClassicDataFrame(jdf, like.sparkSession)


def _jvm():
    sc = SparkContext._active_spark_context
    assert sc is not None and sc._jvm is not None, "a JVM argument needs the driver's SparkContext"
    return sc._jvm


def jvm_column(column: Column) -> Any:
    """The JVM column of ``column`` (what a JVM function or ``with_jvm_column`` takes)."""
    return column._jc


def string_seq(strings: list[str]) -> Any:
    """A JVM ``Seq`` of ``strings`` (Spark's ``PythonUtils.toSeq``), for ``drop``."""
    return _jvm().PythonUtils.toSeq(list(strings))


def java_map(values: dict[str, str]) -> Any:
    """A ``java.util.HashMap`` of ``values`` (the options of a JVM function: ``from_json``'s)."""
    java = _jvm().java.util.HashMap()
    for key, value in values.items():
        java.put(key, value)
    return java


def with_column(df: DataFrame, name: str, column: Column) -> DataFrame:
    """``df.withColumn(name, column)`` in one round trip."""
    return frame(df._jdf.withColumn(name, column._jc), df)


def with_jvm_column(df: DataFrame, name: str, jcolumn: Any) -> DataFrame:
    """``df.withColumn(name, <the JVM column jcolumn>)`` in one round trip (a column built by JVM functions:
    ``columns.jvm_function``)."""
    return frame(df._jdf.withColumn(name, jcolumn), df)


def drop(df: DataFrame, names: Any) -> DataFrame:
    """``df.drop(*names)`` in one round trip, ``names`` being a ``string_seq``."""
    return frame(df._jdf.drop(names), df)
