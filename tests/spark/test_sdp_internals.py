"""Contract test of spark/sdp/internals.py: the PySpark pipeline internals the SDP runner uses, as it uses them.

A PySpark upgrade that renames, moves or changes one of them fails here, before a user's run does.
No Spark session: the functions are checked by their signatures and a fake event.
"""

from __future__ import annotations

import inspect
from datetime import datetime, timezone

from pyspark.pipelines import cli, spark_connect_pipeline
from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry

from airflow_conduit.operators.declarative import SPEC_FILE_NAMES
from airflow_conduit.spark.sdp import internals


def parameters(func) -> list[str]:
    return list(inspect.signature(func).parameters)


def test_the_cli_functions_the_runner_calls_keep_their_signatures():
    assert parameters(cli.load_pipeline_spec) == ["spec_path"]
    assert parameters(cli.register_definitions) == ["spec_path", "registry", "spec", "spark", "dataflow_graph_id"]
    assert {"name", "storage", "catalog", "database", "configuration", "libraries"} <= set(cli.PipelineSpec.__dataclass_fields__)
    assert parameters(spark_connect_pipeline.create_dataflow_graph) == ["spark", "default_catalog", "default_database", "sql_conf"]
    assert parameters(spark_connect_pipeline.start_run) == [
        "spark", "dataflow_graph_id", "full_refresh", "full_refresh_all", "refresh", "dry", "storage"]


def test_the_registry_methods_the_runner_wraps_exist_with_their_arguments():
    assert parameters(SparkConnectGraphElementRegistry.__init__) == ["self", "spark", "dataflow_graph_id"]
    assert parameters(SparkConnectGraphElementRegistry.register_flow) == ["self", "flow"]
    assert parameters(SparkConnectGraphElementRegistry.register_output) == ["self", "output"]
    assert parameters(SparkConnectGraphElementRegistry.register_sql) == ["self", "sql_text", "file_path"]
    assert issubclass(internals.NamingRegistry, SparkConnectGraphElementRegistry)


def test_the_local_server_starter_keeps_its_signature():
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    assert parameters(RemoteSparkSession._start_connect_server) == ["master", "opts"]


def test_the_spec_file_names_are_sdps():
    assert tuple(cli.PIPELINE_SPEC_FILE_NAMES) == internals.SPEC_FILE_NAMES
    assert set(SPEC_FILE_NAMES) == set(internals.SPEC_FILE_NAMES)


def test_a_run_result_is_read_as_sdp_sends_it(tmp_path):
    import pyspark.sql.connect.proto as pb2

    event = pb2.PipelineEvent(message="Flow spark_catalog.default.a is RUNNING.")
    event.timestamp.FromDatetime(datetime(2026, 1, 2, 3, 4, 5))
    result = pb2.PipelineEventResult(event=event)
    message, at = internals.event_of({"pipeline_event_result": result})
    assert message == "Flow spark_catalog.default.a is RUNNING."
    assert at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert internals.event_of({"pipeline_command_result": object()}) is None


def test_a_spec_loads_through_sdps_own_reader(tmp_path):
    spec_file = tmp_path / "spark-pipeline.yml"
    spec_file.write_text("name: p\nstorage: /tmp/s\nconfiguration:\n  a: b\nlibraries:\n  - glob:\n      include: t/**\n")
    spec = internals.load_spec(spec_file)
    assert (spec.name, spec.storage, dict(spec.configuration)) == ("p", "/tmp/s", {"a": "b"})
