"""Spark standalone cluster launcher: the master's REST submission API (create, status, kill).

A PySpark driver is submitted with ``mainClass``
``org.apache.spark.deploy.SparkSubmit``: the worker starts a driver JVM that
runs spark-submit in client mode inside the cluster (``appArgs`` = a
spark-submit command line with ``--master``, ``--py-files`` and the ``.py``
file), which then runs the Python entry point with executors on the cluster.
The connection follows the Spark provider's conventions: host
``spark://HOST:PORT``, extras ``deploy-mode: cluster``, ``rest-scheme``,
``rest-port`` (6066), plus ``master-ui-port`` (8080) for the extra link.

The spec, the ``--py-files`` zip and the state directory must be on storage
the workers see at the same path (loopback here; a shared file system on a
real cluster).
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlparse

import httpx

from airflow_conduit.launchers.base import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    JobHandle,
    JobStatus,
    Launcher,
    entrypoint_arguments,
    job_files,
    run_dir,
)
from airflow_conduit.launchers.local import POSTGRESQL_JAR
from airflow_conduit.pipeline.report import utc_now_iso

SPARK_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
FINISHED_OK = ("FINISHED",)
FINISHED_BAD = ("FAILED", "ERROR", "KILLED")
HTTP_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


class RestSubmissionError(RuntimeError):
    """The master refused or could not answer a REST submission request."""


def rest_endpoint_from_master(master: str, scheme: str = "http", port: int = 6066) -> str:
    """spark://host:7077 -> http://host:6066 (what SparkSubmitHook derives for standalone cluster mode)."""
    host = urlparse(master).hostname or "127.0.0.1"
    return f"{scheme}://{host}:{port}"


class StandaloneLauncher(Launcher):
    """Submit the pipeline's driver to a standalone master over REST; poll and kill it there."""

    kind = "standalone"

    def __init__(
        self,
        conn_id: str = "spark_default",
        *,
        conf: dict[str, Any] | None = None,
        application: str | None = None,
        py_files: str | None = None,
        python: str | None = None,
    ):
        self.conn_id = conn_id  # read at submit time only: status and kill use the handle
        self.conf = dict(conf or {})
        self.application = application
        self.py_files = py_files
        self.python = python or sys.executable

    def _resolve_connection(self) -> None:
        """Master URL, REST endpoint and master UI from the connection, read the Spark provider's way."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
        from airflow.sdk import BaseHook

        connection = SparkSubmitHook(conn_id=self.conn_id)._connection
        self.master = connection["master"]
        self.rest_endpoint = connection["rest_endpoint"] or rest_endpoint_from_master(
            self.master, connection["rest_scheme"], connection["rest_port"]
        )
        extra = BaseHook.get_connection(self.conn_id).extra_dejson
        self.master_ui = f"http://{urlparse(self.master).hostname}:{int(extra.get('master-ui-port', 8080))}"

    def create_request(self, application: str, py_files: str, args: list[str], name: str) -> dict[str, Any]:
        """The CreateSubmissionRequest body (Spark's RestSubmissionClient format).

        ``appArgs`` is a spark-submit command line (built by the Spark provider's hook, client deploy
        mode, without the binary): the driver JVM runs SparkSubmit with it. Without an explicit
        ``--master`` there, SparkSubmit falls back to local[*] and the cluster's executors sit idle.
        """
        import pyspark
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        conf: dict[str, Any] = {
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
        }
        if os.path.exists(POSTGRESQL_JAR):
            conf["spark.jars"] = POSTGRESQL_JAR
        conf.update({k: str(v) for k, v in self.conf.items()})
        hook = SparkSubmitHook(
            conn_id=self.conn_id, conf=conf, py_files=py_files or None, name=name, application_args=args,
            deploy_mode="client",  # inside the cluster: the driver is already where it should be
        )
        inner = hook._build_spark_submit_command(application)[1:]
        properties = {
            "spark.master": self.master,
            "spark.app.name": name,
            "spark.submit.deployMode": "cluster",
            "spark.driver.supervise": "false",
            **conf,
        }
        return {
            "action": "CreateSubmissionRequest",
            "appResource": f"file:{application}",
            "mainClass": SPARK_SUBMIT_CLASS,
            "appArgs": inner,
            "clientSparkVersion": pyspark.__version__,
            "environmentVariables": {"PYSPARK_PYTHON": self.python, "PYSPARK_DRIVER_PYTHON": self.python},
            "sparkProperties": properties,
        }

    def submit(self, spec_path: str, run_id: str, state_dir: str, faults: dict | None = None) -> JobHandle:
        self._resolve_connection()
        folder = run_dir(state_dir, run_id)
        folder.mkdir(parents=True, exist_ok=True)
        application, py_files = job_files(self.application, self.py_files, folder)
        args = entrypoint_arguments(os.path.abspath(spec_path), run_id, os.path.abspath(state_dir), faults)
        body = self.create_request(os.path.abspath(application), py_files, args, f"conduit-{run_id}")
        response = httpx.post(f"{self.rest_endpoint}/v1/submissions/create", json=body, timeout=HTTP_TIMEOUT)
        answer = _json(response)
        if not answer.get("success") or not answer.get("submissionId"):
            raise RestSubmissionError(f"master {self.rest_endpoint} refused the submission: {answer.get('message') or answer}")
        return {
            "launcher": self.kind,
            "run_id": run_id,
            "state_dir": os.path.abspath(state_dir),
            "report_path": str((folder / "report.json").absolute()),
            "log_path": None,  # the driver log stays in the worker's work dir
            "driver_id": answer["submissionId"],
            "rest_endpoint": self.rest_endpoint,
            "master": self.master,
            "submitted_at": utc_now_iso(),
            "spark_ui": self.master_ui,
            "conn_id": self.conn_id,
        }

    # -- status ----------------------------------------------------------------------------------

    def status(self, handle: JobHandle) -> JobStatus:
        response = httpx.get(_status_url(handle), timeout=HTTP_TIMEOUT)
        return status_from_answer(_json(response))

    async def status_async(self, handle: JobHandle) -> JobStatus:
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as client:
            response = await client.get(_status_url(handle))
        return status_from_answer(_json(response))

    def kill(self, handle: JobHandle, graceful: bool = True) -> None:
        """Ask the master to kill the driver (the worker stops the driver process; there is no softer way)."""
        url = f"{handle['rest_endpoint']}/v1/submissions/kill/{handle['driver_id']}"
        httpx.post(url, timeout=HTTP_TIMEOUT)


def _status_url(handle: JobHandle) -> str:
    return f"{handle['rest_endpoint']}/v1/submissions/status/{handle['driver_id']}"


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        return response.json()
    except ValueError as exc:
        raise RestSubmissionError(f"{response.request.url}: HTTP {response.status_code}: {response.text[:500]}") from exc


def status_from_answer(answer: dict[str, Any]) -> JobStatus:
    """Map a SubmissionStatusResponse to a JobStatus (FINISHED = the driver exited 0)."""
    state = answer.get("driverState")
    if not answer.get("success", False) and state in (None, "UNKNOWN", "NOT_FOUND"):
        return JobStatus(FAILED, driver_state=state, message=answer.get("message") or "driver unknown to the master")
    if state in FINISHED_OK:
        return JobStatus(SUCCEEDED, exit_code=0, driver_state=state)
    if state in FINISHED_BAD:
        message = answer.get("message") or ""
        return JobStatus(FAILED, driver_state=state, message=message)
    return JobStatus(RUNNING, driver_state=state)
