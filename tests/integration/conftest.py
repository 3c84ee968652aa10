"""Integration tests: Airflow (SQLite metadata DB in a temp AIRFLOW_HOME) and real Spark.

AIRFLOW_HOME must be set before anything imports airflow, hence at module level.
`airflow db migrate` runs once per session (~8 s), only for tests that need the DB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).parent / "jobs"
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="conduit-airflow-home-"))

os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
bin_dir = str(Path(sys.executable).parent)
if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB in the session's AIRFLOW_HOME."""
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)
    return _AIRFLOW_HOME


@pytest.fixture
def tiny_job() -> str:
    return str(JOBS / "tiny_job.py")
