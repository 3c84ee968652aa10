"""Which way `airflow-conduit run` submits: without Airflow for a plain --master, through the hook otherwise."""

from __future__ import annotations

import argparse

import pytest

from airflow_conduit.cli import run_cmd
from airflow_conduit.hooks.backends.local import LocalBackend


def _args(master: str = "local[*]", conn_id: str | None = None, spark_ui: bool = False) -> argparse.Namespace:
    return argparse.Namespace(master=master, conn_id=conn_id, spark_ui=spark_ui)


@pytest.fixture(autouse=True)
def no_airflow_config(monkeypatch, tmp_path):
    for key in [k for k in __import__("os").environ if k.startswith("AIRFLOW__CONDUIT__")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    monkeypatch.delenv("AIRFLOW_CONFIG", raising=False)


def test_a_plain_master_gets_the_local_backend_with_the_worker_defaults():
    backend = run_cmd._backend_without_airflow(_args("local[2]"))
    assert isinstance(backend, LocalBackend) and backend.master == "local[2]" and backend.conn_id is None
    assert backend.worker_jars == ["/usr/share/java/postgresql.jar"] and backend.spark_local_ip == "127.0.0.1"
    assert backend.conf == {"spark.ui.enabled": "false"}
    assert run_cmd._backend_without_airflow(_args(spark_ui=True)).conf == {}


@pytest.mark.parametrize("args", [_args("yarn"), _args("k8s://https://k8s:6443"), _args(conn_id="spark_default")])
def test_a_connection_or_another_master_goes_through_the_hook(args):
    assert run_cmd._backend_without_airflow(args) is None


def test_a_conduit_option_in_the_environment_goes_through_the_hook(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CONDUIT__WORKER_JARS", "/opt/jars/a.jar")
    assert run_cmd._backend_without_airflow(_args()) is None


def test_a_conduit_section_in_airflow_cfg_goes_through_the_hook(tmp_path):
    home = tmp_path / "airflow-home"
    home.mkdir()
    (home / "airflow.cfg").write_text("[core]\nload_examples = False\n")
    assert run_cmd._backend_without_airflow(_args()) is not None
    (home / "airflow.cfg").write_text("[core]\nload_examples = False\n\n[conduit]\nspark_local_ip =\n")
    assert run_cmd._backend_without_airflow(_args()) is None
