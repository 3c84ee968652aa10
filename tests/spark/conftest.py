"""Shared fixtures for the Spark runner tests: ONE local SparkSession, a real PostgreSQL server, spec builders.

The SparkSession is built by the runner's own ``build_session`` (local[2],
PostgreSQL JDBC jar, the Kafka and Delta connectors) once per test session. PostgreSQL 15 runs from Debian's
binaries as user ``postgres`` (initdb refuses root) in a temp dir it owns, on
a free loopback port.
"""

from __future__ import annotations

import os
import sys

import pytest

import postgres_server as postgres_server_module  # tests/postgres_server.py (shared with tests/deployment)
from postgres_server import free_port  # noqa: F401 - tests import it from here

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark():
    from airflow_conduit.spark.session import build_session

    # One JVM per test process: it carries every connector (Kafka, Delta) so any test module can use them.
    session = build_session("airflow-conduit-tests", master="local[2]", connectors={"kafka", "delta"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL 15 server on a free port (tests/postgres_server.py); yields connection facts; stopped at the end."""
    if not postgres_server_module.installed():
        pytest.skip("PostgreSQL 15 server binaries not installed (Debian package postgresql)")
    with postgres_server_module.postgres_server() as facts:
        yield facts


@pytest.fixture
def pg_query(postgres):
    import psycopg2

    def run(sql: str, params: tuple = ()) -> list[tuple]:
        conn = psycopg2.connect(host=postgres["host"], port=postgres["port"], user="postgres", dbname="postgres")
        try:
            with conn, conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    return run


