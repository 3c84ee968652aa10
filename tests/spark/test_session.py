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
    """build_session starts its JVM with spark/jvm/options.py's options: HotSpot's own switch, read back from it."""
    from airflow_conduit.spark.jvm.options import JIT_OPTIONS

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


def test_numpy_values_still_reach_the_jvm_converted(spark):
    """PySpark's NumPy converters, asked only about NumPy values (pyspark_internals.ask_numpy_converters_only_about_numpy),
    still convert them: a scalar to its Python value, a one-dimensional array to a Java array."""
    import numpy as np

    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.Math.abs(np.int64(-3)) == 3
    assert jvm.java.lang.Math.abs(np.float64(-1.5)) == 1.5
    assert jvm.java.util.Arrays.toString(np.array([1, 2], dtype=np.int32)) == "[1, 2]"
    assert spark.range(1).select(F.lit(np.float64(2.5)).alias("x")).first()["x"] == 2.5


PROBES_SCRIPT = """
import sys
from airflow_conduit.spark import session
from airflow_conduit.spark.session import PYSPARK_PROBES, import_probes_while_the_jvm_works
session.import_probes_while_the_jvm_works = lambda: None  # the session's own JVM calls only
spark = session.build_session("probes")
spark.range(3).selectExpr("id + 1").collect()
imported_by_jvm_calls = PYSPARK_PROBES in sys.modules
imported_by_thread = False
thread = import_probes_while_the_jvm_works()
if thread is not None:
    thread.join(600)
    imported_by_thread = PYSPARK_PROBES in sys.modules
spark.stop()
print("RESULT", imported_by_jvm_calls, imported_by_thread, "pandas" in sys.modules)
"""


def test_jvm_calls_import_no_pandas_probes_and_the_session_imports_them_on_a_thread(tmp_path):
    """Building a session and running a job import no ``pyspark.testing.utils`` (pandas, PyArrow, gRPC) from
    Py4J's converters; ``import_probes_while_the_jvm_works`` imports it on its own thread. A fresh Python
    (this process imported it long ago)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROBES_SCRIPT], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    assert lines[-1] == "RESULT False True True", lines
