"""SparkPipelineHook: the Spark connection of a pipeline, and its job (submit, status, kill).

It reads a ``spark`` connection the Spark provider's way (host = master, extras
``deploy-mode``, ``spark-binary``, ``rest-port``...) and picks a backend
strategy from it (``backends/``):

- ``standalone``: ``spark://HOST:PORT`` with ``deploy-mode: cluster``: REST submission to the master;
- ``local``: everything else: spark-submit on this machine (``local[*]``, a standalone master in
  client mode, YARN, Kubernetes).

Method names follow Airflow 3.3's ``ResumableJobMixin`` vocabulary (``submit_job``,
``get_job_status``, ``is_job_active``); docs/architecture.md says why the operator does not
use the mixin itself. No silent fallbacks: a connection that does not exist or cannot be read
fails with ``SparkConnectionError`` naming it; the Spark embedded on the worker (``local[*]``)
runs only when asked for with ``conn_id="conduit_local"``. Whatever fails between Airflow and Spark
raises a ``ConduitControlPlaneError`` (hooks/errors.py).

What every job gets on this worker beyond its connection (the JDBC driver jar, ``SPARK_LOCAL_IP``)
comes from ``[conduit] worker_jars`` and ``[conduit] spark_local_ip``, overridable per task through
``backend_options`` (docs/configuration.md, worker defaults).
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.sdk import BaseHook, Connection

from airflow_conduit.get_provider_info import WORKER_CONFIG_OPTIONS
from airflow_conduit.hooks.backends.base import JobBackend, JobHandle, JobStatus
from airflow_conduit.hooks.backends.kinds import BACKEND_KINDS, backend_for_handle, make_backend, submit_run
from airflow_conduit.hooks.backends.retries import REST_RETRY_DELAY, REST_RETRY_LIMIT, REST_RETRY_MAX_DELAY, RestRetry
from airflow_conduit.hooks.errors import SparkConnectionError, SparkConnectionNotFound
from airflow_conduit.hooks.spark_submit_adapter import resolved_connection

# The Spark embedded on the worker, when asked for by name (a built-in id: it is not a stored connection,
# so `airflow connections list` does not show it; a stored connection of that id wins over it).
EMBEDDED_LOCAL_CONN_ID = "conduit_local"
EMBEDDED_LOCAL_CONNECTION = {"conn_type": "spark", "host": "local[*]"}


def _read_connection(conn_id: str) -> Connection:
    """The stored connection; raises SparkConnectionError naming it when it is missing or unreadable."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise SparkConnectionNotFound(
            f"Spark connection {conn_id!r} does not exist: define it (airflow connections add, AIRFLOW_CONN_"
            f"{conn_id.upper()}, or a secrets backend), or use conn_id={EMBEDDED_LOCAL_CONN_ID!r} to run on "
            "Spark embedded on the worker (local[*])"
        ) from None
    except Exception as exc:  # metadata DB / API server / secrets backend unreachable
        raise SparkConnectionError(f"Spark connection {conn_id!r} could not be read: {type(exc).__name__}: {exc}") from exc


def register_embedded_local() -> None:
    """Make ``conduit_local`` readable by the Spark provider (an env var connection of this process and its children)."""
    os.environ.setdefault(f"AIRFLOW_CONN_{EMBEDDED_LOCAL_CONN_ID.upper()}", json.dumps(EMBEDDED_LOCAL_CONNECTION))


def worker_defaults(kind: str) -> dict[str, Any]:
    """The ``[conduit]`` worker defaults as backend options: ``worker_jars`` for both backends (each jar added
    when the file exists), ``spark_local_ip`` for the local one (empty = leave it to Spark)."""
    from airflow.sdk import conf

    def option(name: str) -> str:
        return (conf.get("conduit", name, fallback=WORKER_CONFIG_OPTIONS[name][1]) or "").strip()

    defaults: dict[str, Any] = {"worker_jars": [jar.strip() for jar in option("worker_jars").split(",") if jar.strip()]}
    if kind == "local":
        defaults["spark_local_ip"] = option("spark_local_ip") or None
    return defaults


def backend_kind_for(connection: dict[str, Any]) -> str:
    """``standalone`` for spark://host:port in cluster deploy mode (REST submission); ``local`` otherwise."""
    if connection["master"].startswith("spark://") and connection["deploy_mode"] == "cluster":
        return "standalone"
    return "local"


class SparkPipelineHook(BaseHook):
    """Submit a pipeline's Spark job through a ``spark`` connection, watch it, stop it.

    :param conn_id: the Spark connection (``spark_default``); ``conduit_local`` = Spark embedded on the worker
    :param backend: force ``local`` or ``standalone`` instead of deriving it from the connection
    :param backend_options: passed to the backend (``conf``, ``application``, ``py_files``, ``env``,
        ``worker_jars``, ``spark_local_ip``; ``faults`` for tests and demos)
    :param rest_retry_limit: attempts per REST call to a standalone master (tenacity ``stop_after_attempt``)
    :param rest_retry_delay: seconds before the second attempt, doubling after each one ...
    :param rest_retry_max_delay: ... up to this many seconds
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"  # the Spark provider's connection type and form: no fields of our own
    hook_name = "Conduit pipeline on Spark"

    def __init__(self, conn_id: str = default_conn_name, *, backend: str | None = None,
                 backend_options: dict[str, Any] | None = None, rest_retry_limit: int = REST_RETRY_LIMIT,
                 rest_retry_delay: float = REST_RETRY_DELAY, rest_retry_max_delay: float = REST_RETRY_MAX_DELAY):
        super().__init__()
        if backend is not None and backend not in BACKEND_KINDS:
            raise ValueError(f"backend: expected one of {', '.join(BACKEND_KINDS)}, got {backend!r}")
        self.conn_id = conn_id
        self.requested_backend = backend
        self.backend_options = dict(backend_options or {})
        self.rest_retry = RestRetry(rest_retry_limit, rest_retry_delay, rest_retry_max_delay)
        self._conn: Connection | None = None
        self._settings: dict[str, Any] | None = None
        self._backend: JobBackend | None = None

    # -- the connection ------------------------------------------------------------------------

    def get_conn(self) -> Connection:
        """The Airflow ``Connection`` of ``conn_id``, checked to exist (``conduit_local`` needs no stored one)."""
        if self._conn is None:
            try:
                self._conn = _read_connection(self.conn_id)
            except SparkConnectionNotFound:
                if self.conn_id != EMBEDDED_LOCAL_CONN_ID:
                    raise
                register_embedded_local()
                self._conn = Connection(conn_id=EMBEDDED_LOCAL_CONN_ID, **EMBEDDED_LOCAL_CONNECTION)
        return self._conn

    @property
    def connection_settings(self) -> dict[str, Any]:
        """The connection as the Spark provider reads it: ``master``, ``deploy_mode``, ``rest_endpoint``...
        (``spark_submit_adapter.resolved_connection``)."""
        if self._settings is None:
            self.get_conn()
            self._settings = resolved_connection(self.conn_id)
        return self._settings

    def check_connection(self) -> None:
        """Read the connection and the Spark provider's view of it now: a missing or unusable one raises a
        ``SparkConnectionError`` here, before anything is submitted."""
        self.connection_settings  # noqa: B018 - read for its check

    @property
    def backend_kind(self) -> str:
        return self.requested_backend or backend_kind_for(self.connection_settings)

    @property
    def backend(self) -> JobBackend:
        if self._backend is None:
            kind = self.backend_kind
            options = {**worker_defaults(kind), **self.backend_options}
            self._backend = make_backend(kind, self.conn_id, self.connection_settings, self.get_conn().extra_dejson,
                                         rest_retry=self.rest_retry, **options)
        return self._backend

    @classmethod
    def backend_for_handle(cls, handle: JobHandle) -> JobBackend:
        """A backend able to poll, stop and confirm the end of an existing job: from the handle alone, no connection
        (a standalone handle carries its REST retry settings)."""
        return backend_for_handle(handle)

    # -- the job (ResumableJobMixin vocabulary) -------------------------------------------------

    def submit_job(self, spec_path: str, run_id: str, state_dir: str, faults: dict | None = None, *,
                   previous: JobHandle | None = None, replay: str | None = None) -> JobHandle:
        """Start one run; first make sure the ``previous`` run of this pipeline is gone (one driver per state dir).

        ``faults``: fault injection for tests and demos (else the backend's ``faults`` option).
        ``replay``: a ``ReplayRequest`` as JSON: the run replays the pipeline's DLQ instead of running it.
        Raises a ``ConduitControlPlaneError`` when the run was not started.
        """
        return submit_run(self.backend, spec_path, run_id, state_dir, faults, previous=previous, replay=replay)

    @classmethod
    def get_job_status(cls, handle: JobHandle) -> JobStatus:
        return cls.backend_for_handle(handle).status(handle)

    @classmethod
    async def aget_job_status(cls, handle: JobHandle) -> JobStatus:
        return await cls.backend_for_handle(handle).status_async(handle)

    @staticmethod
    def is_job_active(status: JobStatus) -> bool:
        return not status.finished

    @staticmethod
    def is_job_succeeded(status: JobStatus) -> bool:
        return status.state == "succeeded"

    @classmethod
    def kill_job(cls, handle: JobHandle, graceful: bool = True) -> None:
        cls.backend_for_handle(handle).kill(handle, graceful)
