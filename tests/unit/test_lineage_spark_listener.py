"""lineage.spark_listener: the Spark settings lineage adds, and that it adds none when it is off."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
from airflow_conduit.lineage.spark_listener import (
    FILTER_SETTINGS,
    LISTENER_OFF,
    LISTENER_CLASS,
    file_transport_settings,
    lineage_enabled,
    lineage_spark_conf,
    listener_classpath,
    with_listener,
)


needs_provider = pytest.mark.skipif(importlib.util.find_spec("airflow.providers.openlineage") is None,
                                    reason="lineage is on only with Airflow's OpenLineage provider (the `openlineage` extra)")


def test_a_file_transport_becomes_the_listeners_own_file_beside_the_tasks(tmp_path):
    assert file_transport_settings({"type": "file", "log_file_path": str(tmp_path / "ol.json")}) == {
        "spark.openlineage.transport.type": "file", "spark.openlineage.transport.location": str(tmp_path / "ol.json") + ".spark"}
    assert file_transport_settings({"type": "http", "url": "http://x"}) == {}


def test_the_listeners_jar_goes_after_the_users_classpath_or_to_packages(tmp_path, monkeypatch):
    lib = tmp_path / "openlineage" / "lib"
    lib.mkdir(parents=True)
    (lib / "openlineage-spark_2.13-9.9.9.jar").write_bytes(b"")
    monkeypatch.setenv("AIRFLOW_CONDUIT_JARS_DIR", str(tmp_path))
    assert listener_classpath({"spark.driver.extraClassPath": "/mine.jar"}) == {
        "spark.driver.extraClassPath": os.pathsep.join(["/mine.jar", str(lib / "openlineage-spark_2.13-9.9.9.jar")])}
    assert listener_classpath({"spark.jars.packages": "io.openlineage:openlineage-spark_2.13:1.0.0"}) == {}  # the user's
    monkeypatch.setenv("AIRFLOW_CONDUIT_JARS_DIR", str(tmp_path / "none"))
    packages = listener_classpath({"spark.jars.packages": "com.example:mine:1"})["spark.jars.packages"].split(",")
    assert packages[0] == "com.example:mine:1" and packages[1].startswith("io.openlineage:openlineage-spark_2.13:")


def test_the_listener_is_added_after_the_users_and_the_users_names_are_kept():
    conf = with_listener({"spark.extraListeners": "com.example.Mine", "spark.openlineage.appName": "mine"}, app_name="conduit.p")
    assert conf["spark.extraListeners"] == f"com.example.Mine,{LISTENER_CLASS}"
    assert conf["spark.openlineage.appName"] == "mine"
    assert with_listener(conf)["spark.extraListeners"] == conf["spark.extraListeners"]  # not twice


@needs_provider
def test_off_means_the_settings_themselves_and_on_without_a_transport_for_spark_too(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__OPENLINEAGE__", "OPENLINEAGE")):
            monkeypatch.delenv(name)
    conf = {"spark.sql.shuffle.partitions": "2"}
    assert not lineage_enabled() and lineage_spark_conf(conf, None) is conf  # no transport: the provider is off
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "console"}))
    assert lineage_enabled()
    assert lineage_spark_conf(conf, None) is conf  # on, but the Spark application would have no transport: no listener
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "true")
    assert not lineage_enabled()


def test_the_filter_settings_use_openlineage_sparks_list_format():
    nodes = FILTER_SETTINGS["spark.openlineage.filter.deniedSparkNodes"]
    assert nodes.startswith("[") and nodes.endswith("]") and ";" in nodes and "," not in nodes
    assert FILTER_SETTINGS["spark.openlineage.filter.rddEventsDisabled"] == "true"


@needs_provider
def test_a_task_that_turns_the_listener_off_gets_none(monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "file", "log_file_path": "/tmp/ol.json"}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO", "true")
    monkeypatch.delenv("AIRFLOW__OPENLINEAGE__DISABLED", raising=False)
    assert LISTENER_CLASS in lineage_spark_conf({}, None)["spark.extraListeners"]
    off = {LISTENER_OFF: "true"}
    assert lineage_spark_conf(off, None) is off
