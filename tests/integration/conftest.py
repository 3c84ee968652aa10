"""Integration tests: Airflow (SQLite metadata DB in a temp AIRFLOW_HOME) and real Spark.

AIRFLOW_HOME must be set before anything imports airflow, hence at module level.
`airflow db migrate` runs once per session (~8 s), only for tests that need the DB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).parent / "jobs"
TEST_DAGS = Path(__file__).parent / "dag_files"
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="conduit-airflow-home-"))

os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
# Two DAG bundles: the reference DAGs (dags/) and the tests' parameterised DAG file. dag.test() needs the
# DAG it runs to be found in a bundle; keeping them apart means a test run never parses the other folder.
os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(
    [
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(REPO / "dags")}},
        {"name": "conduit-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(TEST_DAGS)}},
    ]
)
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


def run_test_dag(dag_id: str, _dag_test: dict | None = None, _plain_task: bool = False, **operator_kwargs):
    """Run the parameterised test DAG (dag_files/conduit_test_dag.py) with dag.test(); return the DagRun.

    The parameters go through an env var so that the DAG processor's parse (dag.test syncs the bundle)
    and the DAG object run here are the same DAG.
    """
    import importlib.util

    operator_kwargs.setdefault("conn_id", "conduit_local")  # Spark embedded on the worker, asked for by name
    os.environ["CONDUIT_TEST_DAG"] = json.dumps({"dag_id": dag_id, "operator": operator_kwargs, "plain_task": _plain_task})
    spec = importlib.util.spec_from_file_location(f"conduit_test_dag_{dag_id}", TEST_DAGS / "conduit_test_dag.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from datetime import datetime

    return module.dag.test(**{k: datetime.fromisoformat(v) for k, v in (_dag_test or {}).items()})


def load_reference_dag(file_name: str):
    """The DAG object of a reference DAG file in dags/ (dag.test() finds it in the dags-folder bundle)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"reference_{Path(file_name).stem}", REPO / "dags" / file_name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def xcoms(dag_id: str, run_id: str) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id).all()
        return {row.key: row.value for row in rows}


def task_instance(dag_id: str, run_id: str, task_id: str = "pipeline"):
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id).one()
        session.expunge(ti)
        return ti


@pytest.fixture
def orders(tmp_path) -> Path:
    """A private copy of examples/orders (spec + sample data with bad records); outputs land in it."""
    import shutil

    target = tmp_path / "orders"
    shutil.copytree(REPO / "examples" / "orders", target, ignore=shutil.ignore_patterns("out", "state*"))
    return target


def lake_ids(folder: Path) -> list[int]:
    import pyarrow.parquet as pq

    files = sorted(folder.rglob("*.parquet"))
    return sorted(i for f in files for i in pq.read_table(f).column("id").to_pylist())


def dlq_lines(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.rglob("*.json")) for line in f.read_text().splitlines() if line.strip()]
