"""Contract of ``spark/jvm/plans.py`` against the real JVM: a DataFrame's plans, a plan made a DataFrame again in a
given session without analysing it, the nodes ``AnalysedPlan`` builds with, and a stream's empty stand-in batch."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from airflow_conduit.spark.jvm import plans

pytestmark = pytest.mark.spark


def test_a_plan_is_put_over_another_leaf_and_made_a_dataframe_without_analysis(spark):
    leaf = spark.createDataFrame([(1,), (2,)], "id long")
    frame = leaf.select((F.col("id") * 3).alias("x"))
    root, old_leaf = plans.analysed(frame), plans.logical_plan(leaf)
    assert root.children().apply(0).equals(old_leaf)  # a projection straight over the leaf
    other = spark.createDataFrame([(5,)], "id long")
    rebuilt = root.withNewChildInternal(plans.logical_plan(other))
    rebuilt.setAnalyzed()
    again = plans.frame_of(rebuilt, other)
    assert again.sparkSession is other.sparkSession
    assert again._jdf.queryExecution().tracker().rules().isEmpty(), "an analysed node is not analysed again"
    # the leaf's attributes differ: the kept projection reads the old ones (AnalysedPlan checks sameOutput first)
    assert not old_leaf.sameOutput(plans.logical_plan(other))


def test_the_helpers_for_rebuilding_nodes_are_spark_s_own(spark):
    sc = spark.sparkContext
    nil = plans.scala_nil(sc)
    assert nil.isEmpty() and plans.scala_nil(sc) is nil
    leaf = plans.logical_plan(spark.createDataFrame([(1,)], "id long"))
    relation = plans.local_relation(sc).apply(leaf.output())
    assert relation.output().size() == 1 and relation.deterministic()
    rand = plans.analysed(spark.range(1).select(F.rand(7).alias("r"))).expressions().apply(0).children().apply(0)
    assert plans.nondeterministic_class(sc).isInstance(rand)


def test_an_empty_batch_of_a_stream_has_its_output_attributes_and_no_rows(spark, tmp_path):
    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema("id BIGINT, name STRING").json(str(tmp_path / "in"))
    stand_in = plans.empty_batch_of(spark, stream)
    assert not stand_in.isStreaming and stand_in.schema == stream.schema
    assert plans.logical_plan(stand_in).sameOutput(plans.analysed(stream))
    assert stand_in.rdd.getNumPartitions() == 0 and stand_in.count() == 0
