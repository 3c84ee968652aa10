"""Records produced to Kafka from the driver with Spark's own Kafka writer task, on rows computed in the driver.

A Kafka DLQ's few records of a batch are computed in the driver (a local relation) and produced from there: Spark's
Kafka sink would plan and run a query of their own (a Spark job) for them. The code each task of Spark's Kafka sink
runs (``KafkaWriteTask``, on a producer of Spark's producer pool: one per configuration, kept across batches) writes
them here, so the records, headers and producer settings are Spark's own.

Touches: Spark's internal ``org.apache.spark.sql.kafka010.KafkaWriteTask(producerConfig, inputSchema, topic)`` with
``execute(Iterator[InternalRow])`` and ``close()``; Catalyst's ``UnsafeProjection.create(exprs, inputSchema)``,
``Project.projectList``, ``LogicalPlan.sameOutput``, ``QueryExecution.analyzed / optimizedPlan / executedPlan``,
``LocalTableScanExec.executeCollect``, ``scala.collection.immutable.ArraySeq.unsafeWrapArray`` (Scala 2.13); PySpark's
``DataFrame._jdf`` and ``SparkContext._jvm``. On a Spark or spark-sql-kafka upgrade check ``KafkaWriteTask``'s
constructor (its arguments by position) and those Catalyst calls. Pinned by tests/spark/test_kafka_sink.py
(``test_produce_in_driver_...``, ``test_compiled_records_...``).
"""

from __future__ import annotations

import functools
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.spark.jvm.refs import jvm_ref, some


def producer_config(spark: SparkSession, options: dict[str, str]):
    """The Java producer's configuration (a ``java.util.Map``, what Spark's Kafka sink gives its producers): the
    client options without their ``kafka.`` prefix, keys and values as bytes."""
    jvm = spark.sparkContext._jvm
    config = jvm.java.util.HashMap()
    for key, value in options.items():
        config.put(key.removeprefix("kafka."), value)
    for key in ("key.serializer", "value.serializer"):
        config.put(key, "org.apache.kafka.common.serialization.ByteArraySerializer")
    return config


def produce_in_driver(spark: SparkSession, records: DataFrame, producer_config, topic: str) -> None:
    """Produce ``records`` (``key``, ``value``, ``headers``) to ``topic`` from the driver with Spark's own Kafka
    writer task, on rows computed in the driver: for a local relation, no Spark job. Returns once every record is
    acknowledged (the task's ``close`` flushes and raises the first failed send)."""
    execution = records._jdf.queryExecution()
    rows = execution.executedPlan().executeCollect()  # a local relation's rows, without a Spark job
    iterator = jvm_ref(spark, "scala.collection.immutable.ArraySeq").unsafeWrapArray(rows).iterator()
    task = jvm_ref(spark, "org.apache.spark.sql.kafka010.KafkaWriteTask")(producer_config, execution.analyzed().output(), some(spark, topic))
    try:
        task.execute(iterator)
    finally:
        task.close()


class CompiledProjections:
    """Projections of a batch's rows (the Kafka records of ``over``, planned over the stand-in ``stand_in`` of the
    rows ``rows``), optimised once and kept as compiled projections (``UnsafeProjection``) applied to a later
    batch's computed rows by position, then produced with Spark's Kafka writer task.

    Taken when the optimised plan of ``over`` is projections over ``stand_in`` alone (else ``ValueError``); a
    later batch's rows are taken when their schema is the one compiled for and they are a local relation
    (``rows_of``)."""

    def __init__(self, spark: SparkSession, rows: DataFrame, over: DataFrame, stand_in: DataFrame):
        self.spark = spark
        self.schema = rows._jdf.queryExecution().analyzed().schema()
        node = over._jdf.queryExecution().optimizedPlan()
        self.output = node.output()  # what Spark's Kafka writer task reads (key, value, headers) by name
        lists = []
        while node.nodeName() == "Project":
            lists.insert(0, (node.projectList(), node.child().output()))
            node = node.child()
        if not lists or not node.sameOutput(stand_in._jdf.logicalPlan()) or not node.children().isEmpty():
            raise ValueError(f"the optimised records are not projections of the rows ({node.nodeName()})")
        create = jvm_ref(spark, "UnsafeProjection", lambda jvm: jvm.org.apache.spark.sql.catalyst.expressions.UnsafeProjection)
        projections = [create.create(exprs, inputs) for exprs, inputs in lists]
        self.projection = functools.reduce(lambda first, then: first.andThen(then), projections)  # one Function1
        self._local = jvm_ref(spark, "LocalTableScanExec.class", lambda jvm: jvm.java.lang.Class.forName(
            "org.apache.spark.sql.execution.LocalTableScanExec"))
        self._topics: dict[str, Any] = {}

    def rows_of(self, rows: DataFrame):
        """``rows``' computed rows (an ``InternalRow`` array) when they are a local relation of the compiled schema (no
        Spark job: the optimizer folds their projections into the relation); else None."""
        if not rows._jdf.schema().equals(self.schema):
            return None
        plan = rows._jdf.queryExecution().executedPlan()
        return plan.executeCollect() if self._local.isInstance(plan) else None

    def produce(self, rows, producer_config, topic: str) -> None:
        """Every record of ``rows`` (``rows_of``) computed (a size guard among the projections refuses one over the
        limit before any is produced), then produced with Spark's Kafka writer task; returns once every one is
        acknowledged (see ``produce_in_driver``). The projections reuse their output row: each record is read once,
        as it is computed."""
        rows = jvm_ref(self.spark, "scala.collection.immutable.ArraySeq").unsafeWrapArray(rows)
        rows.iterator().map(self.projection).toList()  # each computed (a mapped iterator's length computes none)
        if topic not in self._topics:
            self._topics[topic] = some(self.spark, topic)
        task = jvm_ref(self.spark, "org.apache.spark.sql.kafka010.KafkaWriteTask")(producer_config, self.output, self._topics[topic])
        try:
            task.execute(rows.iterator().map(self.projection))
        finally:
            task.close()
