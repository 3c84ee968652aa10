"""``JobHandle``: what a backend returns for a submitted run, and every driver keeps to watch, stop and replace it.

A handle is ids and paths only, so a backend can be rebuilt from it in another process (a triggerer, an Airflow
retry's worker) without a connection lookup. It travels as the plain dict of ``to_dict()``: in trigger kwargs,
XCom (the UI plugin reads ``spark_ui`` and ``backend`` there), the task state store and ``recovery.json``.
``from_dict`` reads every form that was ever stored: handles written before the backend key was named
``backend`` carry it as ``launcher``, and a deferral or a task state saved by such a version resumes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

LEGACY_BACKEND_KEY = "launcher"  # the backend key's name in handles stored by earlier versions


class JobHandleError(ValueError):
    """A stored job handle that is not one: not a mapping, a required key missing, an unknown key."""


@dataclass(frozen=True)
class JobHandle:
    """One submitted run of a pipeline job.

    :param backend: the backend kind that submitted it (``local``, ``standalone``)
    :param run_id: the Spark job's ``--run-id``
    :param state_dir: the pipeline's state directory (absolute)
    :param report_path: ``STATE_DIR/runs/<run-id>/report.json``
    :param log_path: the driver log, when this machine can read it (local backend)
    :param submitted_at: ISO-8601 UTC
    :param spark_ui: the Spark UI (local driver) or the master's UI (standalone)
    :param conn_id: the Spark connection it was submitted through
    :param exit_path, lease_path, pid, pid_started: the local backend's driver wrapper (its exit record, the state
        dir's lease, its process and that process's start time: a reused pid is told apart)
    :param driver_id, rest_endpoint, master, rest_retry: the standalone backend's driver and how to reach it
        (``rest_retry``: the REST retry settings it was submitted with, ``RestRetry.to_dict()``)
    """

    backend: str
    run_id: str
    state_dir: str
    report_path: str
    log_path: str | None = None
    submitted_at: str | None = None
    spark_ui: str | None = None
    conn_id: str | None = None
    exit_path: str | None = None
    lease_path: str | None = None
    pid: int | None = None
    pid_started: float | None = None
    driver_id: str | None = None
    rest_endpoint: str | None = None
    master: str | None = None
    rest_retry: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("backend", "run_id"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise JobHandleError(f"job handle: {name}: expected a non-empty string, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: every key that has a value (a reader treats a missing key as None)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        if self.rest_retry is not None:
            data["rest_retry"] = dict(self.rest_retry)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> JobHandle:
        """A handle from its JSON form, of this version or an earlier one (``launcher`` for ``backend``)."""
        if isinstance(data, JobHandle):
            return data
        if not isinstance(data, Mapping):
            raise JobHandleError(f"job handle: expected a mapping, got {type(data).__name__}")
        values = dict(data)
        legacy = values.pop(LEGACY_BACKEND_KEY, None)
        if values.get("backend") is None:
            values["backend"] = legacy
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise JobHandleError(f"job handle: unknown key(s) {unknown}: a job handle has {sorted(known)}")
        missing = [f.name for f in fields(cls)[:4] if values.get(f.name) is None]
        if missing:
            raise JobHandleError(f"job handle of run {values.get('run_id')!r}: missing {', '.join(missing)}")
        return cls(**values)

    @property
    def where(self) -> str:
        """Where the driver runs, for a timeline line: the cluster's driver id, or the wrapper's pid."""
        return self.driver_id or f"pid {self.pid}"


def optional_handle(data: Any) -> JobHandle | None:
    """``JobHandle.from_dict`` of a stored value that may be absent (None or empty)."""
    return JobHandle.from_dict(data) if data else None


def backend_of(handle: JobHandle | Mapping[str, Any] | None) -> str | None:
    """The backend kind that submitted a job, from a handle or its stored dict (of any version); None without one."""
    if not handle:
        return None
    if isinstance(handle, JobHandle):
        return handle.backend
    return handle.get("backend") or handle.get(LEGACY_BACKEND_KEY)
