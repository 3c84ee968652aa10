"""Select lists, SQL text and Spark's functions handed to the JVM once per run: one round trip per batch each.

PySpark turns a list of columns into a JVM ``Seq`` one element per Py4J round trip, on every ``select``,
``withColumns`` or ``observe``, and looks a function of ``functions`` up by reflection before each call; a batch's
plan makes several such lists with dozens of columns. Here the ``Seq``s are built once per run (``JvmColumns``,
``jvm_strings``, ``jvm_seq``), the functions looked up once per SparkContext (``function_member``), and the Dataset's
own ``select`` / ``selectExpr`` / ``withColumns`` / ``where`` called with them. ``parse_expression`` asks Spark's SQL
parser about a condition without building a plan.

Touches: PySpark's ``DataFrame._jdf`` (the JVM ``Dataset``), ``Column._jc`` (the JVM ``Column``),
``SparkContext._active_spark_context`` and its ``_jvm``, ``SparkSession._jsparkSession``; Spark's
``PythonUtils.toSeq`` (``private[spark]`` in Scala, public in bytecode), ``functions`` (the Scala object's static
forwarders), ``Dataset.select(Seq<Column>)``, ``selectExpr(Seq<String>)``, ``withColumns(Seq<String>, Seq<Column>)``,
``where(Column)`` and ``SessionState.sqlParser().parseExpression`` (``frame``, ``jvm_column`` and
``with_jvm_column`` are ``dataframe_calls``'). On a Spark or PySpark upgrade check those
signatures (a classic, not Spark Connect, session). Pinned by tests/spark/test_jvm_columns.py.
"""

from __future__ import annotations

from typing import Any

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, SparkSession

from airflow_conduit.spark.jvm.dataframe_calls import frame, jvm_column, with_jvm_column
from airflow_conduit.spark.jvm.refs import jvm_member

__all__ = ["JvmColumns", "frame", "function_member", "jvm_column", "jvm_function", "jvm_seq", "jvm_strings",
           "parse_expression", "select", "select_expr", "where", "with_columns", "with_jvm_column"]


def _context():
    sc = SparkContext._active_spark_context
    assert sc is not None and sc._jvm is not None, "a JVM list needs the driver's SparkContext"
    return sc


class JvmColumns:
    """Columns built once per run and handed to the JVM once, as one ``Seq``.

    With the ``Seq`` kept, each ``select``, ``with_columns`` or ``observe`` of it is one round trip, whatever the width.
    ``Column`` objects are unresolved expressions, so one list serves every batch's DataFrame.
    """

    def __init__(self, columns: list[Column], names: list[str] | None = None):
        sc = _context()
        self.columns = list(columns)
        self.names = list(names) if names is not None else None
        self.seq = jvm_seq(sc, [c._jc for c in self.columns])
        self.name_seq = jvm_seq(sc, self.names) if self.names is not None else None
        self.rest = jvm_seq(sc, [c._jc for c in self.columns[1:]])  # for observe(first, rest)

    def __bool__(self) -> bool:
        return bool(self.columns)


_STRINGS_SEPARATOR = "\u0000"  # a character no column name or SQL expression of a select list holds


def jvm_strings(strings: list[str]) -> Any:
    """A JVM ``Seq`` of ``strings`` in three round trips, whatever their number: joined here and split by the JVM
    (PySpark converts a list one element per round trip). Built once per run where the strings are (select lists
    of ``selectExpr``); an empty string or one that holds the separator is converted the usual way."""
    jvm = _context()._jvm
    if not strings or any(not text or _STRINGS_SEPARATOR in text for text in strings):
        return jvm.PythonUtils.toSeq(list(strings))
    tokens = jvm.java.util.StringTokenizer(_STRINGS_SEPARATOR.join(strings), _STRINGS_SEPARATOR)
    return jvm.PythonUtils.toSeq(jvm.java.util.Collections.list(tokens))


_LIST_OF = 10  # the most elements ``java.util.List.of`` takes as separate arguments (one round trip)


def jvm_seq(sc, items: list) -> Any:
    """A JVM ``Seq`` of ``items`` (JVM objects, strings, numbers) in two round trips per ten items.

    Py4J hands a Python list to the JVM one element per round trip (an ``ArrayList`` and an ``add`` each);
    ``List.of`` takes up to ten as arguments of one call. A list holding None is converted the usual way
    (``List.of`` refuses NULL)."""
    to_seq = jvm_member(sc, "PythonUtils.toSeq", lambda jvm: jvm.PythonUtils.toSeq)
    items = list(items)
    if not items or any(item is None for item in items):
        return to_seq(items)
    list_of = jvm_member(sc, "List.of", lambda jvm: getattr(jvm.java.util.List, "of"))
    if len(items) <= _LIST_OF:
        return to_seq(list_of(*items))
    joined = jvm_member(sc, "java.util.ArrayList")(len(items))
    for start in range(0, len(items), _LIST_OF):
        joined.addAll(list_of(*items[start:start + _LIST_OF]))
    return to_seq(joined)


def jvm_function(name: str) -> Any:
    """Spark's ``functions.<name>`` as a Py4J member, looked up once per SparkContext: calling it is one JVM round
    trip (``F.<name>(...)`` is three: the class, the method, then the call). For what a batch builds anew."""
    return function_member(name, _context())


def function_member(name: str, sc) -> Any:
    """Spark's ``functions.<name>`` of ``sc``'s JVM, looked up once per SparkContext (``jvm_function``)."""
    return jvm_member(sc, f"functions.{name}", lambda jvm: getattr(getattr(jvm, "org.apache.spark.sql.functions"), name))


def select(df: DataFrame, columns: JvmColumns) -> DataFrame:
    """``df.select(*columns.columns)`` in one round trip."""
    return frame(df._jdf.select(columns.seq), df)


def select_expr(df: DataFrame, strings: Any) -> DataFrame:
    """``df.selectExpr(*strings)`` in one round trip, ``strings`` being a ``jvm_strings`` Seq."""
    return frame(df._jdf.selectExpr(strings), df)


def with_columns(df: DataFrame, columns: JvmColumns) -> DataFrame:
    """``df.withColumns(dict(zip(columns.names, columns.columns)))`` in one round trip."""
    return frame(df._jdf.withColumns(columns.name_seq, columns.seq), df)


def where(df: DataFrame, condition: Any) -> DataFrame:
    """``df.where(condition)`` in one round trip, ``condition`` being a JVM column kept for the run
    (``dataframe_calls.jvm_column``)."""
    return frame(df._jdf.where(condition), df)


def parse_expression(spark: SparkSession, text: str) -> None:
    """Parse ``text`` as a SQL expression with the session's parser (no plan built); raises Spark's ``ParseException``
    (through Py4J) when it does not parse."""
    spark._jsparkSession.sessionState().sqlParser().parseExpression(text)
