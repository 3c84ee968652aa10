"""Contract of the one adapter over PySpark's private Observation API (spark/observed.py): the metrics
row is read from the JVM, small metrics as Python values, an array of structs as a DataFrame in order."""

from __future__ import annotations

import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F

from airflow_conduit.spark.observed import ObservedMetrics

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


def test_an_observation_never_used_is_a_named_error(spark):
    with pytest.raises(RuntimeError, match="not used by an action"):
        ObservedMetrics(spark, Observation("unused"))
