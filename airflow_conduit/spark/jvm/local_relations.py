"""Rows computed once and kept in the driver's JVM as a local relation: read again without a Spark job.

Touches: PySpark's ``DataFrame._jdf``, ``SparkSession._jsparkSession`` and
``pyspark.sql.classic.dataframe.DataFrame(jdf, session)``; Spark's ``Dataset.collectAsList``,
``SparkSession.createDataFrame(java.util.List<Row>, StructType)`` and the physical plan's class name
``LocalTableScanExec`` (what Spark folds projections and filters of a local relation into). On a Spark upgrade
check that a projection of a local relation still plans as a ``LocalTableScanExec``. Pinned by
tests/spark/test_kafka_sink.py (``test_produce_in_driver_...``) and tests/spark/test_jvm_contracts.py.
"""

from __future__ import annotations

from pyspark.sql import DataFrame


def in_driver(df: DataFrame) -> DataFrame:
    """``df`` computed once (one Spark job) and kept in the driver's JVM as a local relation, for few rows: what is
    then read of it without an aggregate (a projection, a filter) runs no Spark job, and a write of it one job.
    (``persist`` would cost three: the cache is filled under adaptive execution as query stages of their own.)"""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    rows = df._jdf.collectAsList()
    return ClassicDataFrame(df.sparkSession._jsparkSession.createDataFrame(rows, df._jdf.schema()), df.sparkSession)


def is_local(df: DataFrame) -> bool:
    """Whether ``df`` is computed in the driver without a Spark job: its physical plan is a local relation's scan
    (Spark folds projections and filters of a local relation into it)."""
    plan = df._jdf.queryExecution().executedPlan()
    return plan.getClass().getSimpleName() == "LocalTableScanExec"
