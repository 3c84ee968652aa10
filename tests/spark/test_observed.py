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


def test_fields_come_in_one_json_text_and_keep_their_values(spark, monkeypatch):
    """The wanted fields of JSON-exact types come with the counts as one string (not one Python object per
    element from the JVM's pickles), and give back the same values: any text, NULL elements, the longs' extremes,
    an empty array; a field of another type (a double) comes as an array, as before."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    texts = ['plain', 'quote " and \\ backslash', "tab\tnew\nline\r\x00\x1f", "é ü 中文 😀", "", None, "</script>"]
    n = 3000
    df = spark.range(0, n, numPartitions=3).select(
        F.col("id"),
        F.struct(
            F.col("id").alias("seq"),
            F.element_at(F.array(*[F.lit(t) for t in texts]), (F.col("id") % len(texts) + 1).cast("int")).alias("text"),
            F.when(F.col("id") % 2 == 0, F.lit(9223372036854775807)).otherwise(F.lit(-9223372036854775808)).alias("big"),
            (F.col("id") % 3 == 0).alias("flag"),
            (F.col("id") % 5).cast("int").alias("small"),
            (F.col("id") / 8).alias("ratio"),
        ).alias("entry"),
    )
    observation = Observation("packed")
    df.observe(observation, F.count(F.lit(1)).alias("read"), F.max("id").alias("top"),
               F.min_by(F.col("entry"), F.col("id"), n).alias("dlq"),
               F.min_by(F.when(F.lit(False), F.col("entry")), F.col("id"), 10).alias("nulls"),
               F.min_by(F.col("entry"), F.lit(None).cast("long"), 10).alias("none")).write.format("noop").mode("overwrite").save()

    collected = []
    collect = ClassicDataFrame.collect
    monkeypatch.setattr(ClassicDataFrame, "collect", lambda self: collected.append(collect(self)) or collected[-1])
    keys = ("seq", "text", "big", "flag", "small", "ratio")
    metrics = ObservedMetrics(spark, observation, heavy=("dlq", "nulls", "none"),
                              fields=(*(("dlq", k) for k in keys), ("nulls", "seq"), ("none", "seq")))

    assert metrics["read"] == n and metrics["top"] == n - 1
    [row] = collected[0]
    lists = {name: len(value) for name, value in row.asDict().items() if isinstance(value, list)}
    assert lists == {"__field_5": n}  # only the double's array came as Python objects; the rest as one string
    assert metrics.size("dlq") == n and metrics.size("nulls") == 10 and metrics.size("none") == 0
    assert metrics.field("nulls", "seq") == [None] * 10 and metrics.field("none", "seq") == []
    assert metrics.fields("dlq", keys) == [
        (i, texts[i % len(texts)], 9223372036854775807 if i % 2 == 0 else -9223372036854775808, i % 3 == 0, i % 5, i / 8)
        for i in range(n)
    ]


def test_an_observation_filled_in_no_session_is_a_bounded_wait_with_a_named_error(spark):
    """Spark fills an observation from a listener of the session whose action ran it: the plan run in another session
    (as a kept plan put over a batch in a session of its own was) never fills it. The wait ends with
    ``ObservationTimeout`` (code 1220, transient: the run is restarted), not never."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    from airflow_conduit.recovery import codes
    from airflow_conduit.spark.observed import ObservationTimeout

    other = spark.newSession()
    observation = Observation("elsewhere")
    observed = observe(spark.range(10), observation, JvmColumns([F.count(F.lit(1)).alias("read")]))
    of_rows = getattr(spark.sparkContext._jvm, "org.apache.spark.sql.classic.Dataset").ofRows
    ClassicDataFrame(of_rows(other._jsparkSession, observed._jdf.logicalPlan()), other).write.format("noop").mode("overwrite").save()

    with pytest.raises(ObservationTimeout, match="did not arrive within 2s") as raised:
        ObservedMetrics(spark, observation, wait_seconds=2)
    assert raised.value.code == codes.BATCH_DEADLINE

    filled = Observation("here")  # the same plan run in its own session is read as before
    observe(spark.range(10), filled, JvmColumns([F.count(F.lit(1)).alias("read")])).write.format("noop").mode("overwrite").save()
    assert ObservedMetrics(spark, filled, wait_seconds=60)["read"] == 10
