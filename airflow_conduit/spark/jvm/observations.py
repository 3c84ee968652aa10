"""An observation's metrics row kept in the JVM, and DataFrames over it, through PySpark's private Observation API.

PySpark's ``Observation.get`` pickles the whole metrics row into Python; the pass's row holds up to
``DLQ_COLLECT_LIMIT`` DLQ rows, which would then go back to the JVM for the DLQ write. Here the row stays in the
JVM (``observed_row``) and becomes a one-row local relation (``row_frame``) or one of its array's elements
(``array_frame``): reading them runs no Spark job. ``observed.py`` builds what a batch reads of them.

Touches: PySpark's ``Observation._jo`` / ``_jvm`` / ``_name`` (``observe`` sets them as ``Observation._on``
does), ``DataFrame._jdf``, ``Column._jc``, ``SparkSession._jsparkSession``, ``SparkContext._jvm`` and
``_active_spark_context``; Spark's JVM ``Observation.future``, ``Dataset.observe(Observation, Column, Seq)``,
``SparkSession.createDataFrame(java.util.List<Row>, StructType)`` and ``SparkThreadUtils.awaitResult``. On a
PySpark upgrade check ``Observation._on`` (what it sets) and those signatures. Pinned by
tests/spark/test_observed.py.
"""

from __future__ import annotations

from typing import Any

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, Observation, SparkSession

from airflow_conduit.spark.jvm.refs import jvm_member


def _frame(jdf: Any, spark: SparkSession) -> DataFrame:
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    return ClassicDataFrame(jdf, spark)


def name_of(observation: Observation) -> str:
    """The name an ``Observation`` was given (PySpark keeps it private)."""
    return str(observation._name)


def observe(df: DataFrame, observation: Observation, first: Column, rest: Any) -> DataFrame:
    """``df.observe(observation, first, *rest)``, ``rest`` a JVM ``Seq`` of columns built once per run (one round
    trip); sets what ``Observation.get`` and ``observed_row`` read, as ``Observation._on`` does."""
    observation._conduit_context = df.sparkSession.sparkContext  # where observed_row keeps its JVM members
    observation._jvm = df.sparkSession.sparkContext._jvm
    observation._jo = getattr(observation._jvm, "org.apache.spark.sql.Observation")(observation._name)
    return _frame(df._jdf.observe(observation._jo, first._jc, rest), df.sparkSession)


def observed_row(observation: Observation, wait_seconds: float) -> Any | None:
    """The observed row as a JVM ``Row``: waits, like ``Observation.get``, for the observed action to finish, but at
    most ``wait_seconds``; None when it did not finish by then. Two JVM round trips (its future, the wait); the
    wait's duration is made once per run and value."""
    jo = getattr(observation, "_jo", None)
    if jo is None:
        raise RuntimeError("the observation was not used by an action (PySpark's Observation._jo is unset)")
    sc = getattr(observation, "_conduit_context", None) or SparkContext._active_spark_context  # set by observe
    millis = max(1, int(wait_seconds * 1000))
    await_result = jvm_member(sc, "SparkThreadUtils.awaitResult", lambda jvm: jvm.org.apache.spark.util.SparkThreadUtils.awaitResult)
    duration = jvm_member(sc, f"FiniteDuration {millis} ms", lambda jvm: jvm.scala.concurrent.duration.FiniteDuration(
        millis, jvm.java.util.concurrent.TimeUnit.MILLISECONDS))
    try:
        return await_result(jo.future(), duration)
    except Exception as exc:  # noqa: BLE001 - only a timeout is an answer
        if "java.util.concurrent.TimeoutException" not in str(exc):
            raise
    return None


def row_frame(spark: SparkSession, jrow: Any, kept: dict) -> DataFrame:
    """The JVM ``Row`` ``jrow`` as a one-row local relation; ``kept``: where the run keeps what it looks up once."""
    if "singletonList" not in kept:  # looked up once per run: each step of the lookup is a JVM round trip
        kept["singletonList"] = spark.sparkContext._jvm.java.util.Collections.singletonList
    rows = kept["singletonList"](jrow)
    return _frame(spark._jsparkSession.createDataFrame(rows, jrow.schema()), spark)


def array_element_type(jrow: Any, index: int) -> Any:
    """The JVM element type of the array at ``index`` of ``jrow`` (for ``array_frame``)."""
    return jrow.schema().fields()[index].dataType().elementType()


def array_frame(spark: SparkSession, jrow: Any, index: int, element: Any) -> DataFrame:
    """The elements (rows of type ``element``: ``array_element_type``) of the array at ``index`` of ``jrow``, as
    rows of a local relation of their own."""
    return _frame(spark._jsparkSession.createDataFrame(jrow.getList(index), element), spark)
