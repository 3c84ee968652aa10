"""Spark's logical plans of a DataFrame: read, put over another leaf, and a batch's empty stand-in.

What ``analysed_plan.AnalysedPlan`` keeps of a batch's plan and puts over later batches' leaves, and what the runner
plans the first batch on while the query starts (``empty_batch_of``). Everything here is Spark's developer API,
reached through Py4J: ``Dataset.logicalPlan``, ``QueryExecution.analyzed``, ``classic.Dataset.ofRows``,
``LogicalRDD``'s constructor (as ``ForeachBatchSink`` builds a batch), ``LocalRelation``, the ``Nondeterministic``
trait and Scala's ``Nil``; ``TreeNode``'s methods (``withNewChildren``, ``withNewChildInternal``, ``setAnalyzed``,
``sameOutput``, ``deterministic``) are called on the nodes these return.

Touches: PySpark's ``DataFrame._jdf``, ``SparkSession._jsparkSession``, ``SparkContext._jsc`` and ``_jvm``, and
``pyspark.sql.classic.dataframe.DataFrame(jdf, session)``. On a Spark upgrade check ``LogicalRDD``'s constructor
(its parameters and their defaults), that ``Analyzer.executeAndCheck`` still returns a plan marked analysed as it is,
and ``TreeNode.withNewChildInternal``'s name. Pinned by tests/spark/test_jvm_plans.py, and the reuse itself by
tests/spark/test_analysed_plan.py and tests/spark/test_first_batch.py.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.spark.jvm.refs import jvm_member

_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."


def logical_plan(df: DataFrame) -> Any:
    """``df``'s logical plan as built (for a batch of ``foreachBatch``: its ``LogicalRDD`` leaf)."""
    return df._jdf.logicalPlan()


def analysed(df: DataFrame) -> Any:
    """``df``'s analysed logical plan."""
    return df._jdf.queryExecution().analyzed()


def frame_of(node: Any, session_of: DataFrame) -> DataFrame:
    """A DataFrame of the logical plan ``node`` in the session of ``session_of`` (``classic.Dataset.ofRows``: an
    analysed node is not analysed again)."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    sc = session_of.sparkSession.sparkContext
    of_rows = jvm_member(sc, "classic.Dataset.ofRows", lambda jvm: getattr(jvm, "org.apache.spark.sql.classic.Dataset").ofRows)
    return ClassicDataFrame(of_rows(session_of.sparkSession._jsparkSession, node), session_of.sparkSession)


def scala_nil(sc) -> Any:
    """Scala's empty ``List`` (``Nil``), what a list of children is built on by prepending (``::``)."""
    return jvm_member(sc, "scala.Nil", lambda jvm: getattr(getattr(jvm, "scala.collection.immutable.Nil$"), "MODULE$"))


def local_relation(sc) -> Any:
    """``LocalRelation``'s companion: ``apply(output)`` is a relation of those attributes, without rows."""
    return jvm_member(sc, "LocalRelation", lambda jvm: getattr(
        getattr(jvm, "org.apache.spark.sql.catalyst.plans.logical.LocalRelation$"), "MODULE$"))


def nondeterministic_class(sc) -> Any:
    """The ``Nondeterministic`` trait's class: an expression that is one has state fixed when it is initialised."""
    return jvm_member(sc, "Nondeterministic", lambda jvm: jvm.java.lang.Class.forName(_EXPRESSIONS + "Nondeterministic"))


def empty_batch_of(spark: SparkSession, stream: DataFrame) -> DataFrame:
    """An empty batch of ``stream`` as ``foreachBatch`` hands one over: a ``LogicalRDD`` with the stream's own output
    attributes (Spark keeps them for every batch of the query), over an RDD without partitions.

    With the same attributes, a plan analysed over it is put over the first batch's rows (``AnalysedPlan.over``)
    instead of being analysed again while the executors wait. Its rows are Spark's ``EmptyRDD``: a frame of the
    stream's schema made to get them would be optimised, planned and compiled, a projection per field, while the
    first batch waits for the plan built on the stand-in.
    """
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    jvm = spark.sparkContext._jvm
    rows = spark.sparkContext._jsc.emptyRDD().rdd()  # no rows, no partitions: nothing to plan or compile for it
    logical_rdd = getattr(jvm, "org.apache.spark.sql.execution.LogicalRDD")
    none = jvm.scala.Option.empty()
    node = logical_rdd(analysed(stream).output(), rows, getattr(logical_rdd, "$lessinit$greater$default$3")(),
                       getattr(logical_rdd, "$lessinit$greater$default$4")(), False, none, spark._jsparkSession, none, none)
    of_rows = getattr(jvm, "org.apache.spark.sql.classic.Dataset").ofRows
    return ClassicDataFrame(of_rows(spark._jsparkSession, node), spark)
