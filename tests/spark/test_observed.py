"""Contract of the one adapter over PySpark's private Observation API (spark/observed.py): the metrics
row is read from the JVM, small metrics as Python values, an array of structs as a DataFrame in order."""

from __future__ import annotations

import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F

from airflow_conduit.spark.columns import JvmColumns
from airflow_conduit.spark.observed import ObservedMetrics, observe

pytestmark = pytest.mark.spark


def test_observed_metrics_keep_the_heavy_array_in_the_jvm_and_in_order(spark):
    df = spark.range(0, 1000, numPartitions=4).withColumn(
        "entry", F.when(F.col("id") % 7 == 0, F.struct(F.col("id").alias("seq"), F.struct((F.col("id") * 2).alias("v")).alias("row")))
    )
    observation = Observation("contract")
    observed = df.observe(
        observation,
        F.count(F.lit(1)).alias("read"),
        F.min_by(F.col("entry"), F.when(F.col("entry").isNotNull(), F.col("id")), 100).alias("dlq"),
    )
    observed.write.format("noop").mode("overwrite").save()

    metrics = ObservedMetrics(spark, observation, heavy=("dlq",))

    assert metrics["read"] == 1000 and metrics.get("missing", "default") == "default"
    assert "dlq" not in metrics.values  # not brought into Python
    expected = [i for i in range(1000) if i % 7 == 0][:100]
    assert metrics.size("dlq") == 100
    assert metrics.field("dlq", "seq") == expected
    assert [r["v"] for r in metrics.elements("dlq", "row").collect()] == [2 * i for i in expected]


def test_observe_with_a_jvm_list_and_fields_read_with_the_counts(spark):
    """``observe`` with the metrics' JVM list built once serves two observations; the fields asked for come with
    the counts and match the array's; ``elements`` numbers the elements in order."""
    df = spark.range(0, 500, numPartitions=3).withColumn(
        "entry", F.when(F.col("id") % 5 == 0, F.struct(F.col("id").alias("seq"), (F.col("id") * 3).alias("v")))
    )
    metrics_list = JvmColumns([F.count(F.lit(1)).alias("read"), F.min_by(F.col("entry"), F.col("entry.seq"), 1000).alias("dlq")])
    for rep in range(2):
        observation = Observation(f"jvm-list-{rep}")
        observe(df, observation, metrics_list).write.format("noop").mode("overwrite").save()
        metrics = ObservedMetrics(spark, observation, heavy=("dlq",), fields=(("dlq", "seq"), ("dlq", "v")))
        expected = list(range(0, 500, 5))
        assert metrics["read"] == 500 and metrics.size("dlq") == len(expected)
        assert metrics.field("dlq", "seq") == expected
        assert metrics.fields("dlq", ("seq", "v")) == [(i, 3 * i) for i in expected]
        rows = metrics.elements("dlq", ordinal="n").collect()
        assert [(r["n"], r["seq"]) for r in rows] == list(enumerate(expected))


def test_an_observation_never_used_is_a_named_error(spark):
    with pytest.raises(RuntimeError, match="not used by an action"):
        ObservedMetrics(spark, Observation("unused"))
