"""Local backend: spark-submit on this machine, the driver detached from the Airflow worker.

The command line is built by the Spark provider (through ``hooks.spark_submit_adapter``)
from a ``spark`` connection (host = master, extras ``deploy-mode``, ``spark-binary``),
so the same path serves ``local[*]``, a standalone master in client mode, and YARN or
Kubernetes masters (documented; their argv is pinned by the adapter's contract test).
The driver runs in its own session under ``detached.py``, which holds the state
dir's driver lease and records the exit code: the worker defers and the job lives
on without it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from airflow_conduit.hooks.backends import detached, lease
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
from airflow_conduit.recovery import kills
from airflow_conduit.runs.report import read_json, utc_now_iso
from airflow_conduit.spark.connector_jars import ConnectorJarsMissing, connectors_of_spec_file, with_connectors
from airflow_conduit.spark.jvm.options import with_class_archive, with_jit_options

GRACEFUL_STOP_SECONDS = 30.0
LEASE_WAIT_SECONDS = 15.0  # a wrapper that just recorded its exit lets go of the lease a moment later
GONE_WAIT_SECONDS = 60.0

# Children this process started: polled so that a finished wrapper is reaped instead of lingering as a zombie.
_children: dict[int, subprocess.Popen] = {}
_ended_wrappers: dict[int, int] = {}  # their exit codes once reaped (negative: the signal that killed one)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _resolve_binary(binary: str) -> str:
    """spark-submit from PATH, else the one installed next to this Python (the pyspark wheel's)."""
    found = shutil.which(binary)
    if found:
        return found
    beside = Path(sys.executable).parent / binary
    return str(beside) if beside.exists() else binary


class LocalBackend(JobBackend):
    """spark-submit on this machine; status from the wrapper's exit file and the process table.

    ``conn_id`` is only read at submit time (by the Spark provider, to build the command line):
    status, kill and ensure_gone work from the handle alone. ``worker_jars`` (added to ``spark.jars`` when
    present) and ``spark_local_ip`` (``SPARK_LOCAL_IP`` unless the environment sets it) are the hook's
    ``[conduit]`` worker defaults; ``faults``: fault injection for tests and demos. Without ``conn_id``, ``master``
    (a plain ``local[*]`` or ``spark://host:port``) is submitted to as a connection of only that master would be.
    """

    kind = "local"

    def __init__(
        self,
        conn_id: str | None = None,
        *,
        conf: dict[str, Any] | None = None,
        application: str | None = None,
        py_files: str | None = None,
        driver_memory: str | None = None,
        env: dict[str, str] | None = None,
        graceful_stop_seconds: float = GRACEFUL_STOP_SECONDS,
        worker_jars: str | Sequence[str] = (),
        spark_local_ip: str | None = None,
        faults: dict | str | None = None,
        master: str | None = None,
    ):
        self.conn_id = conn_id
        self.master = master
        self.worker_jars = jar_list(worker_jars)
        self.spark_local_ip = spark_local_ip
        self.faults = fault_injection(faults)
        self.conf = dict(conf or {})
        self.application = application  # default: airflow_conduit.spark.packaging.entrypoint_path()
        self.py_files = py_files  # default: a zip built by build_py_files_archive()
        self.driver_memory = driver_memory
        self.env = dict(env or {})
        self.graceful_stop_seconds = graceful_stop_seconds

    # -- submit ----------------------------------------------------------------------------------

    def _spark_conf(self, ui_port: int, connectors: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        conf: dict[str, Any] = {"spark.ui.port": str(ui_port)}
        jars = present_jars(self.worker_jars)
        if jars:
            conf["spark.jars"] = ",".join(jars)
        conf.update(self.conf)
        return with_class_archive(with_jit_options(with_connectors(conf, connectors)))

    def build_command(self, application: str, py_files: str, args: list[str], conf: dict, name: str) -> list[str]:
        """The spark-submit command line, built by the Spark provider from the connection (for a plain ``master``
        without one, the same argv built here: ``spark_submit_adapter.plain_master_argv``)."""
        from airflow_conduit.hooks.spark_submit_adapter import plain_master_argv, spark_submit_argv

        if self.conn_id is None and self.master is not None:
            cmd = plain_master_argv(self.master, application, application_args=args, conf=conf, py_files=py_files,
                                    name=name, driver_memory=self.driver_memory)
            cmd[0] = _resolve_binary(cmd[0])
            return cmd
        if self.conn_id is None:
            raise ValueError("the local backend needs a Spark connection or a master to submit (status and kill do not)")
        cmd = spark_submit_argv(
            self.conn_id, application, application_args=args, conf=conf, py_files=py_files, name=name,
            driver_memory=self.driver_memory,
        )
        cmd[0] = _resolve_binary(cmd[0])
        return cmd

    def _environment(self, marker: str) -> dict[str, str]:
        env = dict(os.environ)
        if self.spark_local_ip:
            env.setdefault("SPARK_LOCAL_IP", self.spark_local_ip)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
        bin_dir = str(Path(sys.executable).parent)
        if bin_dir not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env.update(self.env)
        env[lease.RUN_MARKER_ENV] = marker  # inherited by spark-submit, the JVM and the Python driver
        return env

    def submit(self, spec_path: str, run_id: str, state_dir: str, faults: dict | None = None,
               replay: str | None = None) -> JobHandle:
        try:
            return self._submit(spec_path, run_id, state_dir, faults, replay)
        except ConnectorJarsMissing as exc:
            raise _errors().ConnectorJarsUnavailable(str(exc)) from None
        except OSError as exc:  # a state dir, a zip or a process this machine cannot create
            if exc.filename is None:  # a full disk says no path (runs.no_space names it): the run's files are here
                exc.filename = str(run_dir(state_dir, run_id))
            raise _errors().BackendUnreachable(f"run {run_id} could not be started on this machine: {type(exc).__name__}: {exc}") from exc

    def _submit(self, spec_path: str, run_id: str, state_dir: str, faults: dict | None,
                replay: str | None) -> JobHandle:
        folder = run_dir(state_dir, run_id)
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        application, py_files = job_files(self.application, self.py_files, folder)
        ui_port = free_port()
        args = entrypoint_arguments(os.path.abspath(spec_path), run_id, os.path.abspath(state_dir),
                                    faults or self.faults, replay)
        application = os.path.abspath(application)
        conf = self._spark_conf(ui_port, connectors_of_spec_file(spec_path))
        cmd = self.build_command(application, py_files, args, conf, f"conduit-{run_id}")
        spark_ui = f"http://127.0.0.1:{ui_port}" if str(conf.get("spark.ui.enabled", "true")).lower() != "false" else None
        try:
            return self.launch(cmd, run_id, state_dir, spark_ui=spark_ui)
        except lease.LeaseHeld:
            if created:  # a run that never started leaves no folder (the UI lists the runs/ folders)
                shutil.rmtree(folder, ignore_errors=True)
            raise

    def launch(self, cmd: list[str], run_id: str, state_dir: str, spark_ui: str | None = None) -> JobHandle:
        """Start ``cmd`` detached (new session) under the lease-holding wrapper; output to driver.log.

        Refuses (``LeaseHeld``) while another driver holds the state dir's lease.
        """
        folder = run_dir(state_dir, run_id)
        folder.mkdir(parents=True, exist_ok=True)
        log_path, exit_path = folder / "driver.log", folder / "exit.json"
        if exit_path.exists():  # its exit record would be read as this job's: never reuse a run id
            raise ValueError(f"run {run_id} already ran in {state_dir}: a run id is used once")
        lease_file = lease.lease_path(state_dir)
        # Taken here and handed to the wrapper: of two submissions at the same moment, one is refused now,
        # before anything of it starts (no exit file, no driver, nothing for its caller to watch).
        try:
            lease_fd = lease.acquire_within(lease_file, {"run_id": run_id, "pid": os.getpid(), "since": utc_now_iso()},
                                            LEASE_WAIT_SECONDS)
        except lease.LeaseHeld as exc:
            raise _errors().LeaseHeld(str(exc)) from None
        marker = lease.run_marker(state_dir, run_id)
        wrapper = [
            sys.executable, "-m", "airflow_conduit.hooks.backends.detached", str(exit_path),
            "--lease-fd", str(lease_fd), "--run", run_id, "--", *cmd,
        ]
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    wrapper,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # own session and process group: survives the worker, killable as a group
                    env=self._environment(marker),
                    cwd=folder,
                    pass_fds=(lease_fd,),
                )
        finally:
            lease.release(lease_fd)  # the wrapper holds it now (or, when it could not start, nobody)
        _children[proc.pid] = proc
        return JobHandle(
            backend=self.kind,
            run_id=run_id,
            state_dir=os.path.abspath(state_dir),
            report_path=str((folder / "report.json").absolute()),
            log_path=str(log_path.absolute()),
            exit_path=str(exit_path.absolute()),
            lease_path=str(lease_file.absolute()),
            pid=proc.pid,
            pid_started=_process_start_time(proc.pid),
            submitted_at=utc_now_iso(),
            spark_ui=spark_ui,
            conn_id=self.conn_id,
        )

    # -- status ----------------------------------------------------------------------------------

    def status(self, handle: JobHandle) -> JobStatus:
        try:
            return self._status(handle)
        except OSError as exc:  # the exit record or the process table unreadable
            raise _errors().StatusUnavailable(f"run {handle.run_id}: {type(exc).__name__}: {exc}") from exc

    def _status(self, handle: JobHandle) -> JobStatus:
        child = _children.get(handle.pid)
        if child is not None and child.poll() is not None:
            _children.pop(handle.pid, None)
            _ended_wrappers[handle.pid] = child.returncode
        record = _read_exit(handle.exit_path)
        if record is None and _alive(handle):
            return JobStatus(RUNNING)
        record = record or _read_exit(handle.exit_path)  # it may have exited between the two looks
        if record is None:  # the wrapper records every way spark-submit ends: it was killed itself
            return JobStatus(FAILED, exit_code=None, message="the driver wrapper ended without recording an exit code",
                             killed=kills.WRAPPER, signal=kills.signal_of_exit_code(_ended_wrappers.get(handle.pid)))
        code = record.get("exit_code")
        note = record.get("note") or ""
        return JobStatus(SUCCEEDED if code == 0 else FAILED, exit_code=code, message=note, **_killed(code, note))

    # -- kill ------------------------------------------------------------------------------------

    def kill(self, handle: JobHandle, graceful: bool = True) -> None:
        """SIGTERM the run's process group (Spark stops gracefully), SIGKILL what is left after the grace period."""
        pgid, marker = handle.pid, _marker(handle)
        if not lease.run_processes(pgid, marker):
            return
        if graceful:
            _ask_driver_to_stop(pgid, marker)
            deadline = time.monotonic() + self.graceful_stop_seconds
            while time.monotonic() < deadline:
                if _read_exit(handle.exit_path) is not None or not _alive(handle):
                    break
                time.sleep(0.5)
        lease.kill_run(pgid, marker)
        if _read_exit(handle.exit_path) is None:
            detached.write_exit_file(handle.exit_path, 128 + signal.SIGKILL, note="killed by the launcher")
        child = _children.pop(pgid, None)
        if child is not None:
            child.wait(timeout=10)

    def ensure_gone(self, handle: JobHandle) -> None:
        """Kill whatever is left of the run (wrapper, spark-submit, Python driver) and wait for the lease."""
        if not lease.kill_run(handle.pid, _marker(handle), timeout=GONE_WAIT_SECONDS):
            raise _errors().PreviousRunAlive(f"run {handle.run_id} still has processes after SIGKILL; not submitting another")
        child = _children.pop(handle.pid, None)
        if child is not None:
            child.wait(timeout=10)
        lease_file = handle.lease_path
        if lease_file and not lease.wait_released(lease_file, GONE_WAIT_SECONDS):
            raise _errors().PreviousRunAlive(lease.held_message(lease_file))


def _killed(exit_code: int | None, note: str) -> dict[str, Any]:
    """Which process of the run died by which signal, from the wrapper's exit record (``detached.main``).

    spark-submit execs its JVM, so the wrapper sees the JVM's own end: ``signal N`` when a signal killed it. A JVM
    that exits with 128 + N on its own passes on its Python driver's end (PySpark's ``PythonRunner``; Java reports
    a child killed by signal N so): the Python driver died by signal N.
    """
    if note.startswith(detached.SIGNAL_NOTE):
        signum = note.removeprefix(detached.SIGNAL_NOTE).strip()
        return {"killed": kills.DRIVER_JVM, "signal": int(signum) if signum.isdigit() else None}
    signum = kills.signal_of_exit_code(exit_code) if not note else None
    return {"killed": kills.PYTHON_DRIVER, "signal": signum} if signum else {}


def _errors():
    """The control-plane errors (``hooks/errors.py``), loaded when one is raised: they are ``AirflowException``s,
    and a run that starts and ends well imports no Airflow (``airflow-conduit run``)."""
    from airflow_conduit.hooks import errors

    return errors


def _marker(handle: JobHandle) -> str:
    return lease.run_marker(handle.state_dir, handle.run_id)


def _read_exit(path: str) -> dict | None:
    try:
        return read_json(path)
    except ValueError:
        return None


def _process_start_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _alive(handle: JobHandle) -> bool:
    """The wrapper process of this handle is still running (same pid *and* same start time, not a zombie)."""
    import psutil

    try:
        proc = psutil.Process(handle.pid)
        if handle.pid_started is not None and abs(proc.create_time() - handle.pid_started) > 1.0:
            return False  # the pid was reused by another process
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ask_driver_to_stop(pgid: int, marker: str) -> None:
    """SIGTERM the run's Python driver, and not its JVM: the driver finishes its batch, stops the query
    and exits, and spark-submit's JVM ends with it. A SIGTERM to the JVM would run its shutdown hooks,
    which stop the SparkContext under the running batch (a batch written but not committed).

    Every other process of the run gets it too (the lease-holding wrapper ignores it), except JVMs
    and PySpark's worker daemons, whose tasks belong to the batch being finished."""
    import psutil

    for proc in lease.run_processes(pgid, marker):
        try:
            cmdline = proc.cmdline()
            if not (_is_jvm(cmdline) or _is_pyspark_worker(cmdline)):
                proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            continue


def _is_jvm(cmdline: Sequence[str]) -> bool:
    return bool(cmdline) and os.path.basename(cmdline[0]).startswith("java")


def _is_pyspark_worker(cmdline: Sequence[str]) -> bool:
    return any(arg in ("pyspark.daemon", "pyspark.worker") for arg in cmdline)
