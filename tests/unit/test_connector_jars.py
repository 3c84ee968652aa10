"""Which connector jars and settings a pipeline's Spark session gets (spark/connector_jars.py)."""

from __future__ import annotations

import logging
import re
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec, PipelineSpec, SourceSpec
from airflow_conduit.spark import connector_jars
from airflow_conduit.spark.connector_jars import (
    Coordinate,
    ConnectorJarsMissing,
    connectors_of,
    kept_artifacts,
    pinned_packages,
    with_connectors,
)

REPO = Path(__file__).resolve().parents[2]


def _unreachable(coordinate):
    return False


def _reachable(coordinate):
    return True


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """No jars folder and a home without Ivy or Maven caches: only the network could provide a connector."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(connector_jars.JARS_DIR_ENV, str(tmp_path / "no-jars"))
    return tmp_path


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
    kafka = _install(tmp_path, "kafka", ["b.jar", "a.jar"])  # jars folder first: no network asked
    delta = _install(tmp_path, "delta", ["delta.jar"])
    conf = with_connectors({"spark.jars": "/mine.jar", "spark.sql.extensions": "mine"}, {"kafka", "delta"},
                           reachable=_unreachable)
    assert conf["spark.jars"].split(",") == ["/mine.jar", *delta, *kafka]
    assert conf["spark.sql.extensions"] == "mine"  # the user's choice is kept
    assert conf["spark.sql.catalog.spark_catalog"] == connector_jars.CONNECTOR_SETTINGS["delta"]["spark.sql.catalog.spark_catalog"]
    assert with_connectors({}, set()) == {}


def test_a_connector_named_in_packages_is_not_added_again(tmp_path, monkeypatch):
    monkeypatch.setenv(connector_jars.JARS_DIR_ENV, str(tmp_path))
    _install(tmp_path, "kafka", ["k.jar"])
    named = str(pinned_packages("kafka")[0])
    conf = with_connectors({"spark.jars.packages": named}, {"kafka"}, reachable=_unreachable)
    assert "spark.jars" not in conf and conf["spark.jars.packages"] == named


def test_without_a_jars_folder_the_pinned_coordinates_go_to_spark_jars_packages(empty_caches):
    conf = with_connectors({"spark.jars.packages": "com.example:mine:1.0"}, {"kafka", "delta"}, reachable=_reachable)
    assert "spark.jars" not in conf
    assert conf["spark.jars.packages"].split(",") == [
        "com.example:mine:1.0", *(str(c) for c in pinned_packages("delta")), *(str(c) for c in pinned_packages("kafka"))]


def test_a_jars_folder_takes_precedence_over_the_network(empty_caches, monkeypatch):
    kafka = _install(empty_caches / "no-jars", "kafka", ["k.jar"])
    conf = with_connectors({}, {"kafka"}, reachable=_unreachable)
    assert conf["spark.jars"].split(",") == kafka and "spark.jars.packages" not in conf


def test_no_jars_and_no_network_is_one_line_naming_the_connector_and_the_three_ways(empty_caches):
    with pytest.raises(ConnectorJarsMissing) as caught:
        with_connectors({}, {"delta"}, reachable=_unreachable)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the delta connector's jars are not available")
    assert "repo1.maven.org" in message  # 1: network
    assert connector_jars.JARS_DIR_ENV in message and "airflow-conduit jars fetch" in message  # 2: a jars folder
    assert "spark.jars.packages" in message and str(pinned_packages("delta")[0]) in message  # 3: the user's packages


def test_a_launcher_refuses_a_missing_connector_in_one_line_before_starting_anything(empty_caches, monkeypatch):
    from airflow_conduit.hooks.backends.local import LocalBackend
    from airflow_conduit.hooks.errors import ConnectorJarsUnavailable

    monkeypatch.setattr(connector_jars, "maven_central_reachable", _unreachable)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    example = empty_caches / "kafka_delta"
    shutil.copytree(REPO / "examples" / "kafka_delta", example, ignore=shutil.ignore_patterns("out", "state*"))
    state_dir = empty_caches / "state"
    with pytest.raises(ConnectorJarsUnavailable) as caught:
        LocalBackend(master="local[2]").submit(str(example / "pipeline.yaml"), "r1", str(state_dir))
    assert "\n" not in str(caught.value) and "connector's jars are not available" in str(caught.value)
    assert not list(state_dir.glob("runs/*/driver.log"))  # no spark-submit was started


def test_the_unreachable_network_is_not_asked_when_the_ivy_cache_has_the_jars(empty_caches):
    ivy = empty_caches / "ivy"
    (ivy / "jars").mkdir(parents=True)
    for c in pinned_packages("kafka"):
        (ivy / "jars" / f"{c.group}_{c.jar_name()}").write_bytes(b"jar")
    conf = with_connectors({"spark.jars.ivy": str(ivy)}, {"kafka"}, reachable=_unreachable)
    assert str(pinned_packages("kafka")[0]) in conf["spark.jars.packages"]


def test_a_users_other_version_of_a_connector_is_kept_with_a_warning_naming_both(empty_caches, caplog):
    pinned = pinned_packages("kafka")[0]
    other = str(Coordinate(pinned.group, pinned.artifact, "4.1.0"))
    with caplog.at_level(logging.WARNING, logger=connector_jars.__name__):
        conf = with_connectors({"spark.jars.packages": other}, {"kafka"}, reachable=_unreachable)
    assert conf["spark.jars.packages"] == other
    assert [r for r in caplog.records if other in r.getMessage() and str(pinned) in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=connector_jars.__name__):
        with_connectors({"spark.jars.packages": str(pinned)}, {"kafka"}, reachable=_unreachable)
    assert not caplog.records  # the pinned version: nothing to say


def test_the_pinned_coordinates_are_read_from_the_poms_the_package_ships():
    kafka = pinned_packages("kafka")
    assert [c.artifact for c in kafka] == ["spark-sql-kafka-0-10_2.13"]
    assert kafka[0].version == version("pyspark")  # Spark's connector of the Spark the package runs on
    assert [c.artifact for c in pinned_packages("delta")][0].startswith("delta-spark_4.2_")
    assert "kafka-clients" in kept_artifacts("kafka") and "delta-storage" in kept_artifacts("delta")
    assert [c.artifact for c in pinned_packages("openlineage")] == ["openlineage-spark_2.13"]  # lineage's listener
    assert kept_artifacts("openlineage") == ("openlineage-spark_2.13",)  # a shaded jar: nothing else


def test_pyspark_and_pyspark_client_are_the_same_version():
    """Both write the pyspark/ folder: the constraints keep them on one version."""
    assert version("pyspark") == version("pyspark-client")


def test_no_connector_version_is_written_outside_its_pom():
    """One source of truth: the Makefile fetches from the package's poms, and no code or doc repeats a
    connector's coordinates with a version."""
    makefile = (REPO / "Makefile").read_text()
    assert "airflow_conduit/spark/connectors/$(1)/pom.xml" in makefile
    assert not list((REPO / "jars").glob("kafka/pom.xml")) and not list((REPO / "jars").glob("delta/pom.xml"))
    for connector in ("kafka", "delta", "openlineage"):
        for c in pinned_packages(connector):
            pattern = re.compile(rf"{re.escape(c.artifact)}:\d")
            for path in [*REPO.glob("airflow_conduit/**/*.py"), *REPO.glob("docs/*.md"), *REPO.glob("bench/*.py"),
                         REPO / "Makefile", REPO / "README.md"]:
                assert not pattern.search(path.read_text()), f"{path} repeats the version of {c.artifact}"


def test_make_install_fetched_the_pinned_jars_into_their_own_folders():
    """The folders `make install` fills in a checkout: Spark's connectors apart from the broker (different Kafka
    versions), only the artifacts the poms keep."""
    root = REPO / "jars"
    names = {c: sorted(p.name for p in (root / c / "lib").glob("*.jar")) for c in ("kafka", "delta", "broker", "openlineage")}
    assert f"{pinned_packages('kafka')[0].jar_name()}" in names["kafka"]
    assert any(n.startswith("kafka-clients-3.") for n in names["kafka"])
    assert f"{pinned_packages('delta')[0].jar_name()}" in names["delta"]
    assert any(n.startswith("kafka_2.13-4.") for n in names["broker"])
    assert names["openlineage"] == [pinned_packages("openlineage")[0].jar_name()]
    assert not any(n.startswith("kafka_2.13") for n in names["kafka"] + names["delta"])
    for connector in ("kafka", "delta"):
        assert {n.rsplit("-", 1)[0] for n in names[connector]} <= set(kept_artifacts(connector))


def test_a_spec_that_does_not_load_needs_no_connector_the_job_refuses_it_itself(tmp_path):
    from airflow_conduit.spark.connector_jars import connectors_of_spec_file

    (tmp_path / "bad.yaml").write_text("version: 1\npipelines: [\n")
    assert connectors_of_spec_file(tmp_path / "missing.yaml") == set()
    assert connectors_of_spec_file(tmp_path / "bad.yaml") == set()


def test_jars_fetch_keeps_each_connectors_own_jars_under_their_maven_names():
    """Spark's Ivy names a jar group_artifact-version.jar and retrieves what PySpark ships already too: a fetched
    folder keeps the pom's artifacts only, named as Maven names them."""
    from airflow_conduit.cli.jars_cmd import _kept

    kafka = kept_artifacts("kafka")
    assert _kept(Path("org.apache.spark_spark-sql-kafka-0-10_2.13-4.2.0.jar"), kafka) == "spark-sql-kafka-0-10_2.13-4.2.0.jar"
    assert _kept(Path("org.apache.kafka_kafka-clients-3.9.2.jar"), kafka) == "kafka-clients-3.9.2.jar"
    assert _kept(Path("org.apache.hadoop_hadoop-client-runtime-3.5.0.jar"), kafka) is None  # PySpark's own
    assert _kept(Path("io.delta_delta-storage-4.4.0.jar"), kept_artifacts("delta")) == "delta-storage-4.4.0.jar"
    assert _kept(Path("io.delta_delta-storage-s3-dynamodb-4.4.0.jar"), kept_artifacts("delta")) is None
