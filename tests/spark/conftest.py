"""Shared fixtures for the Spark runner tests: ONE local SparkSession, a real PostgreSQL server, spec builders.

The SparkSession is built by the runner's own ``build_session`` (local[2],
PostgreSQL JDBC jar) once per test session. PostgreSQL 15 runs from Debian's
binaries as user ``postgres`` (initdb refuses root) in a temp dir it owns, on
a free loopback port.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


PG_BIN = Path("/usr/lib/postgresql/15/bin")
pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark():
    from airflow_conduit.spark.session import build_session

    session = build_session("airflow-conduit-tests", master="local[2]")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL 15 server on a free port; yields connection facts; stopped at the end."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip("PostgreSQL 15 server binaries not installed (Debian package postgresql)")
    root = Path(tempfile.mkdtemp(prefix="conduit-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    port = free_port()
    _as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"], cwd=root)
    _as_postgres(
        [
            str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60",
            "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start",
        ],
        cwd=root,
    )
    try:
        yield {"host": "127.0.0.1", "port": port, "user": "postgres", "dbname": "postgres",
               "url": f"jdbc:postgresql://127.0.0.1:{port}/postgres"}
    finally:
        _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], cwd=root)
        shutil.rmtree(root, ignore_errors=True)


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


