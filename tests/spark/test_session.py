"""The runner's session settings (spark/session.py), and the PySpark behaviour they rely on.

``spark.python.sql.dataFrameDebugging.enabled=false`` is what keeps a Column call to one JVM round trip
or so: with PySpark's default (on), each call first sends its Python call site to the JVM (an active
session lookup, a conf read, ``PySparkCurrentOrigin.set`` and ``clear``). The contract test counts the
py4j commands of one Column call, so a PySpark upgrade that changes this shows up here.
"""

from __future__ import annotations

import pytest
from py4j.protocol import MEMORY_COMMAND_NAME, MEMORY_DEL_SUBCOMMAND_NAME
from pyspark.sql import functions as F

from airflow_conduit.spark.session import SESSION_SETTINGS

pytestmark = pytest.mark.spark

# py4j releases the JVM objects of garbage-collected Python proxies with "memory delete" commands, sent
# whenever Python's GC runs: not part of a Column call, and their number depends on what ran before.
RELEASE = MEMORY_COMMAND_NAME + MEMORY_DEL_SUBCOMMAND_NAME


def test_runner_session_has_its_settings(spark):
    for key, value in SESSION_SETTINGS.items():
        assert spark.conf.get(key) == value, key


def test_a_local_session_with_the_delta_connector_has_its_local_settings(spark):
    from airflow_conduit.spark.connector_jars import LOCAL_SETTINGS

    assert spark.sparkContext.master.startswith("local")  # the fixture's session carries the Delta connector
    for key, value in LOCAL_SETTINGS["delta"].items():
        assert spark.conf.get(key) == value, key


def test_the_local_driver_jvm_compiles_huge_generated_methods(spark):
    """build_session starts its JVM with spark/jvm.py's options: HotSpot's own switch, read back from it."""
    from airflow_conduit.spark.jvm import JIT_OPTIONS

    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(JIT_OPTIONS) <= set(arguments)
    flag = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")).getVMOption("DontCompileHugeMethods")
    assert flag.getValue() == "false"


def test_a_column_call_sends_no_call_site_to_the_jvm(spark, monkeypatch):
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def counting(command, *args, **kwargs):
        if not command.startswith(RELEASE):
            sent.append(command)
        return send(command, *args, **kwargs)

    column = F.col("amount")
    monkeypatch.setattr(client, "send_command", counting)
    aliased = column.alias("amount_eur")
    cast = column.cast("double")
    monkeypatch.undo()

    assert aliased is not None and cast is not None
    assert not [c for c in sent if "PySparkCurrentOrigin" in c], sent
    # alias and cast: one call each (plus at most one lookup); with debugging on it is ~11 per call
    assert len(sent) <= 4, sent
