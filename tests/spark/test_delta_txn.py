"""The contract of spark/jvm/delta_txn.py with the pinned Delta release: its Scala calls exist and do what the Delta
destination relies on (a real local Delta table; Spark jobs counted, not timed)."""

from __future__ import annotations

import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark.jvm import delta_txn

pytestmark = pytest.mark.spark

APP = "airflow-conduit/contract/q1/lake"


def _jobs_started(spark) -> int:
    value = spark.sparkContext._jsc.sc().dagScheduler().nextJobId()
    return int(value if isinstance(value, int) else value.get())


def _rows(spark, start: int, n: int = 20):
    return spark.range(start, start + n).select(F.col("id"), F.concat(F.lit("n"), F.col("id").cast("string")).alias("name"))


def _table(spark, tmp_path, commits: int = 3) -> str:
    """A table with ``commits`` appends under APP (versions 0..commits-1), by Delta's own DataFrameWriter."""
    path = str(tmp_path / "lake")
    for version in range(commits):
        (_rows(spark, version * 100).write.format("delta").mode("append")
         .option("txnAppId", APP).option("txnVersion", str(version)).save(path))
    return path


def test_a_transaction_writes_in_one_job_commits_with_the_app_id_and_rebuilds_no_table_state(spark, tmp_path):
    path = _table(spark, tmp_path)
    before = _jobs_started(spark)
    txn = delta_txn.Transaction(spark, path, APP)
    assert txn.last == 2 and txn.has(2) and not txn.has(3)  # from the checksum
    observation = Observation("contract")
    staged = txn.write_files(_rows(spark, 1000).observe(observation, F.count(F.lit(1)).alias("n")), 3)
    jobs = _jobs_started(spark) - before
    assert observation.get == {"n": 20}, "an observation on the written rows is reported: the write can carry a pass"
    assert spark.read.format("delta").load(path).count() == 60, "nothing is visible before the commit"
    before = _jobs_started(spark)
    version = delta_txn.Transaction.commit(spark, staged)
    jobs += _jobs_started(spark) - before
    assert jobs == 1, "one Spark job (the files), none to rebuild the table's state"
    assert version == 3
    assert spark.read.format("delta").load(path).count() == 80
    snapshot = delta_txn.delta_log(spark, path).update(False, spark.sparkContext._jvm.scala.Option.empty(),
                                                       spark.sparkContext._jvm.scala.Option.empty())
    assert delta_txn.checksum_versions(snapshot) == {APP: 3}
    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy(F.desc("version")).first()
    assert (last["version"], last["operation"], last["operationParameters"]["mode"]) == (3, "WRITE", "Append")
    assert delta_txn.Transaction(spark, path, APP).has(3)


def test_a_transaction_without_rows_commits_nothing(spark, tmp_path):
    path = _table(spark, tmp_path, commits=1)
    txn = delta_txn.Transaction(spark, path, APP)
    staged = txn.write_files(_rows(spark, 0).where(F.lit(False)), 1)
    assert staged.empty and delta_txn.Transaction.commit(spark, staged) is None
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count() == 1


def test_a_commit_under_the_same_app_id_meanwhile_makes_the_transaction_fail(spark, tmp_path):
    path = _table(spark, tmp_path, commits=1)
    txn = delta_txn.Transaction(spark, path, APP)
    staged = txn.write_files(_rows(spark, 500), 1)
    (_rows(spark, 700).write.format("delta").mode("append")  # another writer commits the same batch first
     .option("txnAppId", APP).option("txnVersion", "1").save(path))
    with pytest.raises(Exception, match="ConcurrentTransaction|concurrent"):
        delta_txn.Transaction.commit(spark, staged)
    assert spark.read.format("delta").load(path).count() == 40  # the batch once


def test_a_transaction_creates_a_missing_table_with_its_first_commit_and_is_delta_table_tells_tables_apart(spark, tmp_path):
    """``Metadata.apply``'s default arguments by position, ``updateMetadataForNewTable`` and ``DeltaTable.isDeltaTable``."""
    path = str(tmp_path / "new")
    assert not delta_txn.is_delta_table(spark, path)
    rows = _rows(spark, 0, 5)
    txn = delta_txn.Transaction(spark, path, APP, new_table=delta_txn.nullable(rows.schema))
    assert txn.last is None
    assert delta_txn.Transaction.commit(spark, txn.write_files(rows, 0)) == 0
    assert delta_txn.is_delta_table(spark, path)
    assert int(delta_txn.latest_snapshot(spark, path).version()) == 0
    table = spark.read.format("delta").load(path)
    assert table.count() == 5 and [(f.name, f.dataType, f.nullable) for f in table.schema.fields] == [
        ("id", T.LongType(), True), ("name", T.StringType(), True)]
    assert delta_txn.Transaction(spark, path, APP).has(0)


def test_matches_needs_the_same_columns_and_types_nullability_aside_and_no_column_delta_fills():
    table = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("tags", T.ArrayType(T.StringType(), False))])
    same = T.StructType([T.StructField("id", T.LongType(), True), T.StructField("tags", T.ArrayType(T.StringType(), True))])
    assert delta_txn.matches(same, table)
    assert not delta_txn.matches(T.StructType([T.StructField("id", T.IntegerType()), same["tags"]]), table)
    assert not delta_txn.matches(T.StructType([same["tags"], same["id"]]), table)  # another order
    assert not delta_txn.matches(T.StructType([same["id"]]), table)  # a column missing
    assert not delta_txn.matches(same, None)  # no table yet
    generated = T.StructType([table["id"], T.StructField("tags", table["tags"].dataType, metadata={
        "delta.generationExpression": "array('x')"})])
    assert not delta_txn.matches(same, generated)
