"""Which connector jars and settings a pipeline's Spark session gets (spark/connector_jars.py)."""

from __future__ import annotations

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec, PipelineSpec, SourceSpec
from airflow_conduit.spark import connector_jars
from airflow_conduit.spark.connector_jars import ConnectorJarsMissing, connectors_of, with_connectors


def _spec(source="file", destination="file", dlq="log") -> PipelineSpec:
    return PipelineSpec(
        id="p", sources=(SourceSpec(id="in", plugin=source),), destinations=(DestinationSpec(id="out", plugin=destination),),
        dead_letter_queue=DeadLetterQueueSpec(plugin=dlq),
    )


def _install(tmp_path, connector, names):
    lib = tmp_path / connector / "lib"
    lib.mkdir(parents=True)
    for name in names:
        (lib / name).write_bytes(b"jar")
    return [str(lib / name) for name in sorted(names)]


def test_only_the_connectors_a_pipeline_uses():
    assert connectors_of(_spec()) == set()
    assert connectors_of(_spec(source="kafka")) == {"kafka"}
    assert connectors_of(_spec(destination="delta", dlq="kafka")) == {"delta", "kafka"}


def test_jars_added_after_the_users_own_with_the_connectors_settings(tmp_path, monkeypatch):
    monkeypatch.setenv(connector_jars.JARS_DIR_ENV, str(tmp_path))
    kafka = _install(tmp_path, "kafka", ["b.jar", "a.jar"])
    delta = _install(tmp_path, "delta", ["delta.jar"])
    conf = with_connectors({"spark.jars": "/mine.jar", "spark.sql.extensions": "mine"}, {"kafka", "delta"})
    assert conf["spark.jars"].split(",") == ["/mine.jar", *delta, *kafka]
    assert conf["spark.sql.extensions"] == "mine"  # the user's choice is kept
    assert conf["spark.sql.catalog.spark_catalog"] == connector_jars.CONNECTOR_SETTINGS["delta"]["spark.sql.catalog.spark_catalog"]
    assert with_connectors({}, set()) == {}


def test_a_connector_named_in_packages_is_not_added_from_the_local_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(connector_jars.JARS_DIR_ENV, str(tmp_path))  # nothing installed there
    conf = with_connectors({"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"}, {"kafka"})
    assert "spark.jars" not in conf


def test_missing_jars_are_refused_naming_the_folder_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(connector_jars.JARS_DIR_ENV, str(tmp_path))
    with pytest.raises(ConnectorJarsMissing) as caught:
        with_connectors({}, {"delta"})
    message = str(caught.value)
    assert str(tmp_path / "delta" / "lib") in message and "make install" in message and "spark.jars.packages" in message


def test_make_install_fetched_the_pinned_jars_into_their_own_folders():
    """The folders `make install` fills: Spark's connectors apart from the broker (different Kafka versions)."""
    root = connector_jars.DEFAULT_JARS_DIR
    names = {c: sorted(p.name for p in (root / c / "lib").glob("*.jar")) for c in ("kafka", "delta", "broker")}
    assert any(n.startswith("spark-sql-kafka-0-10_2.13-") for n in names["kafka"])
    assert any(n.startswith("kafka-clients-3.") for n in names["kafka"])
    assert any(n.startswith("delta-spark_4.2_2.13-") for n in names["delta"])
    assert any(n.startswith("kafka_2.13-4.") for n in names["broker"])
    assert not any(n.startswith("kafka_2.13") for n in names["kafka"] + names["delta"])


def test_a_spec_that_does_not_load_needs_no_connector_the_job_refuses_it_itself(tmp_path):
    from airflow_conduit.spark.connector_jars import connectors_of_spec_file

    (tmp_path / "bad.yaml").write_text("version: 1\npipelines: [\n")
    assert connectors_of_spec_file(tmp_path / "missing.yaml") == set()
    assert connectors_of_spec_file(tmp_path / "bad.yaml") == set()
