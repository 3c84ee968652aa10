"""The SparkSession of a pipeline run.

Under spark-submit the master and jars come from the command line; run
directly (tests, ``python entrypoint.py``) the session is local. The
PostgreSQL JDBC driver from Debian's libpostgresql-jdbc-java is added when
present, and ``ensure_driver_class`` makes it visible to the driver's class
loader when spark-submit did not put it there (a jar in ``spark.jars`` set
after launch only reaches the executors).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading

from pyspark.sql import SparkSession

from airflow_conduit.spark.connector_jars import local_settings, with_connectors
from airflow_conduit.spark.jvm import session as jvm_session
from airflow_conduit.spark.jvm.options import with_class_archive, with_jit_options
from airflow_conduit.spark.jvm.pyspark_internals import ask_numpy_converters_only_about_numpy

POSTGRESQL_JAR = "/usr/share/java/postgresql.jar"
PYSPARK_PROBES = "pyspark.testing.utils"  # imported by functions.lit: it probes pandas, PyArrow and gRPC

# Settings of every session the runner builds (local or under spark-submit).
# - PySpark's DataFrame debugging (on by default) wraps each Column call to send its Python call site to
#   the JVM first, several extra JVM round trips per call; a batch's plan is thousands of Column calls. The
#   call sites it records are the runner's own lines, which tell a user nothing: an error names the
#   component (stage, id, plugin) instead.
# - Catalyst's constraint propagation (``PruneFilters``, ``InferFiltersFromConstraints``) derives the
#   constraints of every column of the batch's projections; with the per-field error and reason columns its
#   planning time grows exponentially with the number of schema fields (a wide schema runs the driver out
#   of heap). It has little to work on in the runner's plans (processors mark records instead of dropping
#   them; the only filter is a fate flag before each write), so it is off.
SESSION_SETTINGS = {
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.sql.constraintPropagation.enabled": "false",
}


def import_probes_while_the_jvm_works() -> threading.Thread | None:
    """Import ``PYSPARK_PROBES`` on a thread while the JVM creates the session (the caller waits on it there).

    ``functions.lit`` imports it at its first call, which every pipeline makes, right after the session is
    built: done here, that half second of Python overlaps the JVM's start instead of following it. A
    failure is left to that first call, which imports it again and raises where it happens.
    """
    if PYSPARK_PROBES in sys.modules:
        return None

    def probe() -> None:
        try:
            importlib.import_module(PYSPARK_PROBES)
        except Exception:  # noqa: BLE001 - see the docstring
            pass

    thread = threading.Thread(target=probe, name="import-pyspark-probes", daemon=True)
    thread.start()
    return thread


def under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(app_name: str, *, master: str | None = None, connectors: frozenset[str] | set[str] = frozenset()) -> SparkSession:
    """The run's session; ``connectors`` (``connector_jars.connectors_of(spec)``) adds their jars and settings when
    this process starts the JVM itself (under spark-submit the launcher put them on the command line)."""
    ask_numpy_converters_only_about_numpy()
    import_probes_while_the_jvm_works()
    builder = SparkSession.builder.appName(app_name)
    if not under_spark_submit():
        builder = builder.master(master or os.environ.get("AIRFLOW_CONDUIT_SPARK_MASTER", "local[2]"))
        builder = builder.config("spark.ui.enabled", "false")
        builder = builder.config("spark.sql.shuffle.partitions", "4")
    if not under_spark_submit():
        jars = {"spark.jars": POSTGRESQL_JAR} if os.path.exists(POSTGRESQL_JAR) else {}
        for key, value in with_connectors(jars, connectors).items():
            builder = builder.config(key, value)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in SESSION_SETTINGS.items():
        builder = builder.config(key, value)
    if not under_spark_submit():  # under spark-submit the launcher put them on the command line
        for key, value in with_class_archive(with_jit_options({})).items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if spark.sparkContext.master.startswith("local"):
        launched = spark.sparkContext.getConf()
        for key, value in local_settings(connectors).items():
            if not launched.contains(key):
                spark.conf.set(key, value)
    if under_spark_submit() and spark.conf.get("spark.sql.shuffle.partitions") == "200":
        spark.conf.set("spark.sql.shuffle.partitions", "4")  # micro-batches are small; 200 tasks per shuffle is waste
    return spark


def ensure_driver_class(spark: SparkSession, class_name: str) -> None:
    """Make ``class_name`` loadable by the driver, adding the jars of ``spark.jars`` to its class loader if needed."""

    def jars() -> list[str]:
        listed = [j for j in (spark.conf.get("spark.jars", "") or "").split(",") if j]
        if os.path.exists(POSTGRESQL_JAR) and POSTGRESQL_JAR not in listed:
            listed.append(POSTGRESQL_JAR)
        return listed

    jvm_session.ensure_loadable(spark, class_name, jars)
