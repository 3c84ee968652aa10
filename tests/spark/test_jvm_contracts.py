"""Contracts of the modules of airflow_conduit/spark/jvm/ with the installed PySpark, Spark, Kafka client and Hadoop: each
test calls one module's functions against the real JVM, so an upgrade that renames or changes what a module touches
fails here first, by the module's name (docs/architecture.md, upgrade checklist).

The modules pinned elsewhere: delta_txn (test_delta_txn.py), kafka_producer and local_relations (test_kafka_sink.py),
observations (test_observed.py), pyspark_internals (test_session.py, test_first_batch.py), options (test_session.py,
test_class_archive.py).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyspark.sql import functions as F

from airflow_conduit.spark.jvm import dataframe_calls, files, kafka_admin, local_relations, refs
from airflow_conduit.spark.jvm import session as jvm_session
from airflow_conduit.spark.jvm.file_scan import listed_lengths

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]


def test_refs_keep_one_jvm_member_per_spark_context_and_make_scala_options(spark):
    built = []

    def build(jvm):
        built.append(jvm)
        return jvm.java.lang.Math.abs

    first = refs.jvm_ref(spark, "contract: Math.abs", build)
    assert refs.jvm_ref(spark, "contract: Math.abs", build) is first and len(built) == 1
    assert first(-3) == 3
    assert refs.jvm_member(spark.sparkContext, "java.lang.Integer").valueOf("7") == 7  # a class by its full name
    assert refs.none(spark).isEmpty()
    assert refs.some(spark, "x").get() == "x"


def test_files_stat_read_in_pieces_read_whole_and_delete_through_hadoop(spark, tmp_path):
    data = bytes(range(256)) * 5
    path = tmp_path / "folder" / "data.bin"
    path.parent.mkdir()
    path.write_bytes(data)
    uri = path.as_uri()
    size, modified_ms = files.stat(spark, uri)
    assert size == len(data) and abs(modified_ms - path.stat().st_mtime * 1000) < 2000
    assert files.stat(spark, (tmp_path / "missing").as_uri()) is None
    assert list(files.pieces(spark, uri, 500)) == [data[:500], data[500:1000], data[1000:]]
    assert list(files.pieces(spark, uri, 500, at_least=len(data) + 1)) == []  # smaller than asked: not read
    assert list(files.pieces(spark, (tmp_path / "missing").as_uri(), 500)) == []
    assert files.read_whole(spark, uri) == data
    files.delete_tree(spark, path.parent.as_uri())
    assert not path.parent.exists()
    files.delete_tree(spark, path.parent.as_uri())  # nothing there: nothing done


def test_file_scan_lists_the_bytes_a_micro_batch_reads_of_each_file(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.json").write_text('{"id": 1}\n{"id": 2}\n')
    (folder / "b.json").write_text('{"id": 3}\n')
    seen: list[dict[str, int]] = []
    query = (spark.readStream.schema("id long").json(str(folder)).writeStream
             .foreachBatch(lambda batch, _batch_id: seen.append(listed_lengths(batch)))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(600), "the query did not end"
    finally:
        query.stop()
    assert len(seen) == 1
    assert {Path(urlparse(uri).path).name: n for uri, n in seen[0].items()} == {"a.json": 20, "b.json": 10}


def test_session_adds_a_jar_to_the_drivers_class_loader_only_when_the_class_is_missing(spark, tmp_path):
    jars = sorted((REPO / "jars" / "broker" / "lib").glob("argparse4j-*.jar"))  # a small library Spark does not ship
    assert jars, "jars/broker/lib has no argparse4j jar: run `make install`"
    name = "net.sourceforge.argparse4j.ArgumentParsers"
    loader = spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader()
    with pytest.raises(Exception, match="ArgumentParsers"):
        loader.loadClass(name)
    listed: list[int] = []
    jvm_session.ensure_loadable(spark, "java.lang.String", lambda: listed.append(1) or [])
    assert not listed, "a loadable class: the jars are not even listed"
    with pytest.raises(Exception, match="ArgumentParsers"):
        jvm_session.ensure_loadable(spark, name, lambda: [str(tmp_path / "missing.jar")])
    jvm_session.ensure_loadable(spark, name, lambda: [f"file:{jars[-1]}"])
    assert loader.loadClass(name).getName() == name


def test_session_connects_through_the_jdbc_driver_of_sparks_class_loader(spark, postgres):
    url = f"jdbc:postgresql://{postgres['host']}:{postgres['port']}/postgres"
    conn = jvm_session.jdbc_connect(spark, "org.postgresql.Driver", url, {"user": "postgres"})
    try:
        result = conn.createStatement().executeQuery("SELECT 41 + 1")
        assert result.next() and result.getInt(1) == 42
    finally:
        conn.close()
    assert jvm_session.jdbc_connect(spark, "org.postgresql.Driver", "jdbc:other://x/y", {}) is None  # not its URL


def test_kafka_admin_reads_end_and_earliest_offsets_topic_ids_and_the_size_limit(spark, kafka):
    topic = kafka.create_topic(partitions=2, config={"max.message.bytes": "123456"})
    kafka.produce(topic, [b"a", b"b", b"c"], partition=1)
    admin = kafka_admin.KafkaAdmin(spark, {"kafka.bootstrap.servers": kafka.bootstrap}, 120)
    try:
        assert admin.end_offsets(topic) == {0: 0, 1: 3}
        assert admin.max_message_bytes(topic) == 123456
        client = admin.client()
        unknown = lambda exc: "UnknownTopicOrPartition" in str(exc)  # noqa: E731
        ids = kafka_admin.topic_ids(spark, client, names=[topic, f"{topic}-none"], pattern=None, timeout_ms=10_000,
                                    wait_ms=15_000, unknown_topic=unknown)
        assert ids[f"{topic}-none"] is None and isinstance(ids[topic], str) and len(ids[topic]) >= 16
        by_pattern = kafka_admin.topic_ids(spark, client, names=None, pattern=f"{topic}|{topic}-none", timeout_ms=10_000,
                                           wait_ms=15_000, unknown_topic=unknown)
        assert by_pattern == {topic: ids[topic]}  # only topics that exist match a pattern
        assert kafka_admin.earliest_offsets(spark, client, topic, 15_000) == {0: 0, 1: 0}
    finally:
        admin.close()
    assert admin._admin is None


def test_dataframe_calls_add_and_drop_columns_with_jvm_arguments(spark):
    df = spark.createDataFrame([(1, '{"a": "x"}')], "id int, text string")
    added = dataframe_calls.with_column(df, "twice", F.col("id") * 2)
    from_json = getattr(spark.sparkContext._jvm, "org.apache.spark.sql.functions").from_json
    parsed = from_json(dataframe_calls.jvm_column(F.col("text")), "struct<a:string>", dataframe_calls.java_map({"mode": "FAILFAST"}))
    with_parsed = dataframe_calls.with_jvm_column(added, "parsed", parsed)
    dropped = dataframe_calls.drop(with_parsed, dataframe_calls.string_seq(["text", "id"]))
    assert dropped.columns == ["twice", "parsed"]
    row = dropped.first()
    assert row["twice"] == 2 and row["parsed"]["a"] == "x"
    assert dataframe_calls.frame(df._jdf, df).collect() == df.collect()


def test_local_relations_keep_rows_in_the_driver(spark):
    spread = spark.createDataFrame([(i,) for i in range(5)], "id long").repartition(2)
    assert not local_relations.is_local(spread)
    kept = local_relations.in_driver(spread)
    assert local_relations.is_local(kept) and local_relations.is_local(kept.where("id > 2").select("id"))
    assert sorted(r["id"] for r in kept.collect()) == [0, 1, 2, 3, 4]
