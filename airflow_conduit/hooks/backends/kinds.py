"""The backends by kind: one for a submission, or one rebuilt from a job handle alone (status, stop, confirm gone).

Imports no Airflow (each backend is imported when asked for): ``airflow-conduit run`` submits, watches and
stops its local runs through it without loading Airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_conduit.hooks.backends.base import JobBackend, JobHandle
from airflow_conduit.hooks.backends.retries import RestRetry

BACKEND_KINDS = ("local", "standalone")


def make_backend(kind: str, conn_id: str | None = None, connection: dict | None = None, extra: dict | None = None,
                 rest_retry: RestRetry | None = None, **options: Any) -> JobBackend:
    if kind == "local":
        from airflow_conduit.hooks.backends.local import LocalBackend

        return LocalBackend(conn_id, **options)
    if kind == "standalone":
        from airflow_conduit.hooks.backends.standalone import StandaloneBackend

        ui_port = int((extra or {}).get("master-ui-port", 8080))
        return StandaloneBackend(conn_id, connection=connection, master_ui_port=ui_port, rest_retry=rest_retry, **options)
    raise ValueError(f"unknown backend {kind!r}: expected one of {', '.join(BACKEND_KINDS)}")


def backend_for_handle(handle: JobHandle) -> JobBackend:
    """A backend able to poll, stop and confirm the end of an existing job: from the handle alone, no connection
    (a standalone handle carries its REST retry settings)."""
    return make_backend(handle.backend)


def submit_run(backend: JobBackend, spec_path: str, run_id: str, state_dir: str, faults: dict | None = None, *,
               previous: JobHandle | None = None, replay: str | None = None) -> JobHandle:
    """Start one run on ``backend``; first make sure the ``previous`` run of this pipeline is gone (one driver per
    state dir), and hand the driver the Kafka connections its spec names (``hooks/kafka_connections.py``)."""
    from airflow_conduit.hooks.kafka_connections import hand_over_connections

    if previous:
        backend_for_handle(previous).ensure_gone(previous)
    hand_over_connections(backend, spec_path)
    if replay is not None:
        return backend.submit(spec_path, run_id, state_dir, faults, replay=replay)
    return backend.submit(spec_path, run_id, state_dir, faults)
