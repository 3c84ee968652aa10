"""Contract of ``spark/jvm/columns.py`` against the real JVM: select lists as JVM ``Seq``s, SQL text split by the JVM,
Spark's functions looked up once, and Spark's SQL parser asked about an expression."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from airflow_conduit.spark.jvm import columns as jc
from airflow_conduit.spark.jvm.columns import jvm_column

pytestmark = pytest.mark.spark


def test_jvm_columns_select_and_add_columns_in_one_call_each(spark):
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
    selected = jc.select(df, jc.JvmColumns([F.col("id") * 10, F.upper("name").alias("shout")]))
    assert [tuple(r) for r in selected.collect()] == [(10, "A"), (20, "B")]
    added = jc.with_columns(df, jc.JvmColumns([F.col("id") + 1, F.lit("x")], ["next", "tag"]))
    assert added.columns == ["id", "name", "next", "tag"] and added.first()["next"] == 2
    assert not jc.JvmColumns([])
    wide = jc.JvmColumns([F.lit(i).alias(f"c{i}") for i in range(25)])  # over ten: List.of in pieces
    assert jc.select(df, wide).columns == [f"c{i}" for i in range(25)]


def test_jvm_strings_are_split_by_the_jvm_into_a_select_list(spark):
    df = spark.createDataFrame([(1, "it's")], "id long, `odd name` string")
    texts = ["`odd name` AS n", "id * 2 AS twice", "'a,b' AS comma"]
    row = jc.select_expr(df, jc.jvm_strings(texts)).first()
    assert tuple(row) == ("it's", 2, "a,b")
    assert jc.select_expr(df, jc.jvm_strings(["id", ""][:1])).columns == ["id"]  # converted the usual way too


def test_a_function_is_looked_up_once_and_a_kept_condition_filters(spark):
    df = spark.createDataFrame([(i,) for i in range(4)], "id long")
    assert jc.jvm_function("monotonically_increasing_id") is jc.jvm_function("monotonically_increasing_id")
    odd = jvm_column(F.col("id") % 2 == 1)
    assert [r["id"] for r in jc.where(df, odd).collect()] == [1, 3]


def test_the_sql_parser_takes_an_expression_and_refuses_a_broken_one(spark):
    from pyspark.errors import ParseException

    jc.parse_expression(spark, "(amount > 0 AND name IS NOT NULL)")  # no columns resolved: none exist here
    with pytest.raises(ParseException):
        jc.parse_expression(spark, "(amount >)")
