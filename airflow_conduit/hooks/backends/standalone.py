"""Spark standalone cluster backend: the master's REST submission API (create, status, kill).

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

Every REST call is retried with tenacity (bounded, exponential backoff:
``retries.RestRetry``) on transport errors and 5xx answers: a master that blips
does not fail the pipeline. ``create`` is retried only when the request never
reached the master (connect errors), so a lost answer cannot submit a second
driver. What still fails is raised as a control-plane error (hooks/errors.py).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Sequence
from urllib.parse import urlparse

import httpx
import tenacity

from airflow_conduit.hooks.backends.base import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    JobBackend,
    JobHandle,
    JobStatus,
    entrypoint_arguments,
    fault_injection,
    jar_list,
    job_files,
    present_jars,
    run_dir,
)
from airflow_conduit.hooks.backends.retries import RestRetry
from airflow_conduit.hooks.errors import (
    BackendUnreachable,
    ConduitControlPlaneError,
    ConnectorJarsUnavailable,
    MasterUnavailable,
    PreviousRunAlive,
    RestSubmissionError,
    StatusUnavailable,
)
from airflow_conduit.spark.connector_jars import ConnectorJarsMissing, connectors_of_spec_file, with_connectors
from airflow_conduit.runs.report import utc_now_iso
from airflow_conduit.spark.jvm.options import with_jit_options

SPARK_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
FINISHED_OK = ("FINISHED",)
FINISHED_BAD = ("FAILED", "ERROR", "KILLED")
# Read as still running, as the Spark provider's SparkSubmitOperator does (is_job_active):
# RELAUNCHING = the driver is being restarted; UNKNOWN = the master is recovering its state.
STILL_RUNNING = ("SUBMITTED", "RUNNING", "RELAUNCHING", "UNKNOWN")
HTTP_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
GONE_WAIT_SECONDS = 120.0  # a loaded worker can take a while to stop a driver


def _retryable(exc: BaseException) -> bool:
    """A transport error or a 5xx answer: the master may answer the next attempt."""
    return isinstance(exc, (httpx.TransportError, MasterUnavailable))


def _not_sent(exc: BaseException) -> bool:
    """The request never reached the master: the only errors a ``create`` is retried on."""
    return isinstance(exc, httpx.ConnectError)


def rest_endpoint_from_master(master: str, scheme: str = "http", port: int = 6066) -> str:
    """spark://host:7077 -> http://host:6066 (what SparkSubmitHook derives for standalone cluster mode)."""
    host = urlparse(master).hostname or "127.0.0.1"
    return f"{scheme}://{host}:{port}"


class StandaloneBackend(JobBackend):
    """Submit the pipeline's driver to a standalone master over REST; poll and kill it there."""

    kind = "standalone"

    def __init__(
        self,
        conn_id: str | None = None,
        *,
        connection: dict[str, Any] | None = None,
        master_ui_port: int = 8080,
        conf: dict[str, Any] | None = None,
        application: str | None = None,
        py_files: str | None = None,
        python: str | None = None,
        env: dict[str, str] | None = None,
        rest_retry: RestRetry | None = None,
        worker_jars: str | Sequence[str] = (),
        faults: dict | str | None = None,
    ):
        """``connection``: the Spark provider's reading of ``conn_id`` (needed to submit; status and kill use the handle).

        ``env``: environment variables of the driver, sent in the submission's body (never in its argv).
        ``rest_retry``: how each REST call is retried (recorded in the handle for the status calls and the stop).
        ``worker_jars``: added to ``spark.jars`` when present (the hook's ``[conduit] worker_jars``); ``faults``:
        fault injection for tests and demos.
        """
        self.worker_jars = jar_list(worker_jars)
        self.faults = fault_injection(faults)
        self.conn_id = conn_id
        self.rest_retry = rest_retry or RestRetry()
        self.env = dict(env or {})
        self.conf = dict(conf or {})
        self.application = application
        self.py_files = py_files
        self.python = python or sys.executable
        if connection is not None:
            self.master = connection["master"]
            self.rest_endpoint = connection["rest_endpoint"] or rest_endpoint_from_master(
                self.master, connection["rest_scheme"], connection["rest_port"]
            )
            self.master_ui = f"http://{urlparse(self.master).hostname}:{int(master_ui_port)}"

    def create_request(self, application: str, py_files: str, args: list[str], name: str,
                       connectors: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        """The CreateSubmissionRequest body (Spark's RestSubmissionClient format).

        ``appArgs`` is a spark-submit command line (built by the Spark provider's hook, client deploy
        mode, without the binary): the driver JVM runs SparkSubmit with it. Without an explicit
        ``--master`` there, SparkSubmit falls back to local[*] and the cluster's executors sit idle.
        """
        import pyspark

        from airflow_conduit.hooks.spark_submit_adapter import spark_submit_argv

        conf: dict[str, Any] = {
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
        }
        jars = present_jars(self.worker_jars)
        if jars:
            conf["spark.jars"] = ",".join(jars)
        conf.update({k: str(v) for k, v in self.conf.items()})
        conf = with_jit_options(with_connectors(conf, connectors))
        inner = spark_submit_argv(
            self.conn_id, application, application_args=args, conf=conf, py_files=py_files, name=name,
            deploy_mode="client",  # inside the cluster: the driver is already where it should be
        )[1:]
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
            "environmentVariables": {"PYSPARK_PYTHON": self.python, "PYSPARK_DRIVER_PYTHON": self.python, **self.env},
            "sparkProperties": properties,
        }

    def submit(self, spec_path: str, run_id: str, state_dir: str, faults: dict | None = None,
               replay: str | None = None) -> JobHandle:
        try:
            return self._submit(spec_path, run_id, state_dir, faults, replay)
        except ConnectorJarsMissing as exc:
            raise ConnectorJarsUnavailable(str(exc)) from None
        except (httpx.HTTPError, OSError) as exc:
            raise BackendUnreachable(
                f"run {run_id} not submitted to {self.rest_endpoint}: {type(exc).__name__}: {exc}") from exc

    def _submit(self, spec_path: str, run_id: str, state_dir: str, faults: dict | None,
                replay: str | None) -> JobHandle:
        folder = run_dir(state_dir, run_id)
        folder.mkdir(parents=True, exist_ok=True)
        application, py_files = job_files(self.application, self.py_files, folder)
        args = entrypoint_arguments(os.path.abspath(spec_path), run_id, os.path.abspath(state_dir),
                                    faults or self.faults, replay)
        body = self.create_request(os.path.abspath(application), py_files, args, f"conduit-{run_id}",
                                   connectors_of_spec_file(spec_path))
        answer = tenacity.Retrying(**self.rest_retry.tenacity_args(_not_sent))(
            _post, f"{self.rest_endpoint}/v1/submissions/create", body
        )
        if not answer.get("success") or not answer.get("submissionId"):
            raise RestSubmissionError(f"master {self.rest_endpoint} refused the submission: {answer.get('message') or answer}")
        return JobHandle(
            backend=self.kind,
            run_id=run_id,
            state_dir=os.path.abspath(state_dir),
            report_path=str((folder / "report.json").absolute()),
            log_path=None,  # the driver log stays in the worker's work dir
            driver_id=answer["submissionId"],
            rest_endpoint=self.rest_endpoint,
            master=self.master,
            submitted_at=utc_now_iso(),
            spark_ui=self.master_ui,
            conn_id=self.conn_id,
            rest_retry=self.rest_retry.to_dict(),
        )

    # -- status ----------------------------------------------------------------------------------

    def status(self, handle: JobHandle) -> JobStatus:
        try:
            answer = tenacity.Retrying(**RestRetry.of_handle(handle).tenacity_args(_retryable))(_get, _status_url(handle))
        except (httpx.HTTPError, ConduitControlPlaneError) as exc:
            raise _status_unavailable(handle, exc) from exc
        return status_from_answer(answer)

    async def status_async(self, handle: JobHandle) -> JobStatus:
        try:
            async for attempt in tenacity.AsyncRetrying(**RestRetry.of_handle(handle).tenacity_args(_retryable)):
                with attempt:
                    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as client:
                        response = await client.get(_status_url(handle))
                    answer = _checked_json(response)
        except (httpx.HTTPError, ConduitControlPlaneError) as exc:
            raise _status_unavailable(handle, exc) from exc
        return status_from_answer(answer)

    def kill(self, handle: JobHandle, graceful: bool = True) -> None:
        """Ask the master to kill the driver (the worker stops the driver process; there is no softer way)."""
        url = f"{handle.rest_endpoint}/v1/submissions/kill/{handle.driver_id}"
        try:
            tenacity.Retrying(**RestRetry.of_handle(handle).tenacity_args(_retryable))(_post, url, None)
        except httpx.HTTPError as exc:
            raise BackendUnreachable(f"driver {handle.driver_id} not killed: {type(exc).__name__}: {exc}") from exc

    def ensure_gone(self, handle: JobHandle) -> None:
        """The previous driver is finished on the master, or killed there and seen finished."""
        deadline = time.monotonic() + GONE_WAIT_SECONDS
        killed = False
        while True:
            try:
                if self.status(handle).finished:
                    return
                if not killed:
                    self.kill(handle)
                    killed = True
            except ConduitControlPlaneError as exc:
                raise PreviousRunAlive(
                    f"cannot confirm that driver {handle.driver_id} (run {handle.run_id}) is gone: {exc}"
                ) from exc
            if time.monotonic() > deadline:
                raise PreviousRunAlive(f"driver {handle.driver_id} (run {handle.run_id}) still runs after a kill")
            time.sleep(1.0)


def _status_unavailable(handle: JobHandle, exc: BaseException) -> StatusUnavailable:
    return StatusUnavailable(f"driver {handle.driver_id} (run {handle.run_id}): {type(exc).__name__}: {exc}")


def _get(url: str) -> dict[str, Any]:
    return _checked_json(httpx.get(url, timeout=HTTP_TIMEOUT))


def _post(url: str, body: dict | None) -> dict[str, Any]:
    return _checked_json(httpx.post(url, json=body, timeout=HTTP_TIMEOUT))


def _checked_json(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 500:
        raise MasterUnavailable(f"{response.request.url}: HTTP {response.status_code}: {response.text[:300]}")
    return _json(response)


def _status_url(handle: JobHandle) -> str:
    return f"{handle.rest_endpoint}/v1/submissions/status/{handle.driver_id}"


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        return response.json()
    except ValueError as exc:
        raise RestSubmissionError(f"{response.request.url}: HTTP {response.status_code}: {response.text[:500]}") from exc


def status_from_answer(answer: dict[str, Any]) -> JobStatus:
    """Map a SubmissionStatusResponse to a JobStatus (FINISHED = the driver exited 0; UNKNOWN is still running)."""
    state = answer.get("driverState")
    if state == "NOT_FOUND" or (state is None and not answer.get("success", False)):
        return JobStatus(FAILED, driver_state=state, message=answer.get("message") or "driver unknown to the master")
    if state in FINISHED_OK:
        return JobStatus(SUCCEEDED, exit_code=0, driver_state=state)
    if state in FINISHED_BAD:
        message = answer.get("message") or ""
        return JobStatus(FAILED, driver_state=state, message=message)
    return JobStatus(RUNNING, driver_state=state)  # STILL_RUNNING, or a state this version does not know
