"""The backend interface (a strategy of ``SparkPipelineHook``) and the job status; the job handle is ``runs.handles.JobHandle``."""

from __future__ import annotations

import asyncio
import json
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import StructuredError
from airflow_conduit.recovery.kills import killed_by_signal
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.runs.status import JobState

# Job states as the backends report them (the Spark job's own view is in its run report).
RUNNING = JobState.RUNNING
SUCCEEDED = JobState.SUCCEEDED
FAILED = JobState.FAILED
JOB_STATES = (RUNNING, SUCCEEDED, FAILED)



@dataclass
class JobStatus:
    """What a backend knows about a job: its state, and how it ended when it did."""

    state: JobState
    exit_code: int | None = None  # process exit code (local backend), None when unknown
    driver_state: str | None = None  # the cluster manager's word (standalone: RUNNING, FINISHED, FAILED, KILLED...)
    message: str = ""
    # a process of the run that died by a signal (recovery.kills: jvm | python | wrapper) and the signal, when known
    killed: str | None = None
    signal: int | None = None

    @property
    def finished(self) -> bool:
        return self.state != RUNNING

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class JobBackend(ABC):
    """Submit a pipeline job, report its status, stop it. Implementations keep no state outside the handle."""

    kind: str = ""

    @abstractmethod
    def submit(self, spec_path: str, run_id: str, state_dir: str, faults: dict | None = None,
               replay: str | None = None) -> JobHandle:
        """Start one run of the pipeline (or, with ``replay``, a DLQ replay) and return its handle (the job runs on).

        Raises a ``SubmissionRefused`` or a ``BackendUnreachable`` (hooks/errors.py) when the run did not start.
        """

    @abstractmethod
    def status(self, handle: JobHandle) -> JobStatus:
        """The job's current status. Never blocks for long; never starts anything.

        Raises ``StatusUnavailable`` (hooks/errors.py) when it cannot be read.
        """

    async def status_async(self, handle: JobHandle) -> JobStatus:
        """Non-blocking status for triggers: by default the blocking call runs in a worker thread."""
        return await asyncio.to_thread(self.status, handle)

    @abstractmethod
    def kill(self, handle: JobHandle, graceful: bool = True) -> None:
        """Stop the job: gracefully (let Spark stop) where the backend can, forcefully otherwise."""

    @abstractmethod
    def ensure_gone(self, handle: JobHandle) -> None:
        """Make sure the job of ``handle`` runs no more (stop it if it does): called before the next submission.

        Raises ``PreviousRunAlive`` when that cannot be confirmed: two drivers must never share a state dir.
        """


def jar_list(jars: str | Sequence[str]) -> list[str]:
    """The ``worker_jars`` option as a list: a list, or comma-separated text."""
    items = jars.split(",") if isinstance(jars, str) else jars
    return [str(jar).strip() for jar in items if str(jar).strip()]


def present_jars(jars: Sequence[str]) -> list[str]:
    """The worker jars (``[conduit] worker_jars``) that exist on this machine: a missing one is skipped."""
    return [jar for jar in jars if os.path.exists(jar)]


def fault_injection(faults: dict | str | None) -> dict | None:
    """The ``faults`` backend option (tests and demos): a dict, or JSON text (templated: ``null``/empty = none)."""
    if isinstance(faults, str):
        faults = json.loads(faults) if faults.strip() else None
    return faults or None


def run_dir(state_dir: str | os.PathLike[str], run_id: str) -> Path:
    """STATE_DIR/runs/<run-id> (docs/architecture.md, state directory), absolute: spark-submit runs in it."""
    return Path(os.path.abspath(state_dir)) / "runs" / run_id


def entrypoint_arguments(spec_path: str, run_id: str, state_dir: str, faults: dict | None,
                         replay: str | None = None) -> list[str]:
    """The Spark job's command line after the .py file (docs/architecture.md, entry point).

    ``replay``: a ``ReplayRequest`` as JSON (pipeline/replay_request.py): the job replays the DLQ instead.
    """
    args = ["--spec", str(spec_path), "--run-id", run_id, "--state-dir", str(state_dir)]
    if faults:
        args += ["--faults", json.dumps(faults, sort_keys=True)]
    if replay is not None:
        args += ["--replay", replay]
    return args


def job_files(application: str | None, py_files: str | None, folder: Path) -> tuple[str, str]:
    """The .py file and the ``--py-files`` zip to submit: the given ones, else the installed package's (zip in ``folder``)."""
    if application is None or py_files is None:
        from airflow_conduit.spark import packaging

        application = application or packaging.entrypoint_path()
        py_files = py_files or packaging.build_py_files_archive(str(folder))
    return application, py_files


def tail_text(path: str | os.PathLike[str] | None, max_bytes: int = 16_000) -> str:
    """The end of a log file ('' when there is none): enough to find the error marker and stack trace."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            return fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def error_from_log(text: str) -> dict | None:
    """The last ``AIRFLOW_CONDUIT_ERROR {json}`` line the job printed on stderr, parsed; None if absent."""
    error = StructuredError.from_stderr(text or "")
    return error.to_dict() if error is not None else None


FULL_BELOW_BYTES = 64 * 1024  # a file system with less room than this left is full for a run's writes


def file_system_full(folder: str | os.PathLike[str] | None) -> bool:
    """Whether ``folder``'s file system has (almost) no room left; False when it cannot be told."""
    try:
        stats = os.statvfs(folder) if folder else None
    except (OSError, AttributeError):
        return False
    return stats is not None and stats.f_bavail * stats.f_frsize < FULL_BELOW_BYTES


def structured_failure(status: JobStatus, report_error: dict | None, log_text: str,
                       run_folder: str | os.PathLike[str] | None = None) -> dict | None:
    """The structured error of a failed job, from the best source there is.

    0. a process of the run that died by a signal (``status.killed``, the backend saw it end): what the others
       wrote after it (a refused connection to the dead JVM) is a consequence, kept in the error's ``extra``;
    1. the run report's ``error`` (the job wrote it before exiting);
    2. the ``AIRFLOW_CONDUIT_ERROR {json}`` line in the driver log;
    3. a driver that ended with no exit code known (standalone FAILED/KILLED/lost) and no error: an
       infrastructure error (code 1400, docs/architecture.md), since nobody lived to write one;
    4. None: the caller hands the exit code and the log text to the recovery engine's classifier
       (which knows that 137/143 or a negative exit code is a signal kill).
    """
    if status.killed:
        return killed_by_signal(status.killed, status.signal, reported=report_error or error_from_log(log_text)).to_dict()
    if report_error:
        return report_error
    from_log = error_from_log(log_text)
    if from_log:
        return from_log
    if status.state == FAILED and status.exit_code is None and file_system_full(run_folder):
        return StructuredError(  # its log, report and exit record had no room: the full disk is the cause to name
            code=codes.NO_SPACE_LEFT,
            fatal=True,
            message=f"the Spark driver ended without reporting an error and the file system of {run_folder} is full: "
                    f"no space left on device; free space there, then run the pipeline again: it goes on where it stopped",
            stage="runner",
            extra={"driver_state": status.driver_state},
        ).to_dict()
    if status.state == FAILED and status.exit_code is None:
        how = status.driver_state or "lost"
        return StructuredError(
            code=codes.INFRASTRUCTURE,
            fatal=False,
            message=f"the Spark driver ended without reporting an error ({how}): killed or lost",
            stage="runner",
            extra={"exit_code": status.exit_code, "driver_state": status.driver_state, "message": status.message},
        ).to_dict()
    return None
