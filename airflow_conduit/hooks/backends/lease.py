"""The driver lease on a state directory, and the processes of one run.

At most one live driver per pipeline: the local backend's wrapper takes an
exclusive ``flock`` on ``STATE_DIR/driver.lease`` before it starts
spark-submit and hands the open file to it, so the lease is held as long as
the wrapper *or* the spark-submit JVM lives, and the kernel releases it when
both are gone (whatever killed them). A second run on the same state dir finds
the lease taken and refuses to start (``LeaseHeld``). The launcher takes the
lease itself and hands it to the wrapper (``--lease-fd``), so a refusal is
known before anything starts, also for two submissions at the same moment.
A DLQ replay run by the CLI holds the same lease in its own process for its
whole run: one writer per state dir, pipeline or replay.

Every process of a run (wrapper, spark-submit JVM, Python driver, Python
workers) carries ``CONDUIT_RUN=<state dir>::<run id>`` in its environment and
shares the wrapper's process group: that is how a run's processes are found
(and only those) when they must be stopped, even after the wrapper died.

Pure Python (fcntl, psutil): the wrapper imports it without Airflow.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

LEASE_FILE = "driver.lease"
RUN_MARKER_ENV = "CONDUIT_RUN"


class LeaseHeld(RuntimeError):
    """Another driver of this pipeline holds the state dir's lease."""


def lease_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / LEASE_FILE


def run_marker(state_dir: str | os.PathLike[str], run_id: str) -> str:
    return f"{os.path.abspath(state_dir)}::{run_id}"


def read_holder(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What the last holder wrote in the lease file (run id, pid); {} when unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def _holder_written(path: str | os.PathLike[str], wait_seconds: float = 1.0) -> dict[str, Any]:
    """The holder's record. A holder takes the lock a moment before it writes its record (``acquire``), so an
    empty lease file is read again for up to ``wait_seconds``."""
    deadline = time.monotonic() + wait_seconds
    while True:
        holder = read_holder(path)
        if holder or time.monotonic() >= deadline:
            return holder
        time.sleep(0.05)


def held_message(path: str | os.PathLike[str]) -> str:
    holder = _holder_written(path)
    if holder:
        kind = holder.get("kind", "run")
        process = "pid" if kind != "run" else "wrapper pid"
        who = f"{kind} {holder.get('run_id', '?')} ({process} {holder.get('pid', '?')})"
    else:
        who = "another driver"
    return (
        f"the state dir {Path(path).parent} is leased by {who}, which is still running: "
        "one driver per pipeline (a DLQ replay is one too); stop that run first"
    )


def acquire(path: str | os.PathLike[str], holder: dict[str, Any], *, inheritable: bool = True) -> int:
    """Take the lease (non-blocking) and write ``holder`` in it; return the open fd.

    The lease lasts while any process holding this fd (or a copy: fork, ``pass_fds``) lives.
    ``inheritable``: children this process starts later (a JVM) hold it too.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LeaseHeld(held_message(path)) from None
    write_holder(fd, holder)
    os.set_inheritable(fd, inheritable)
    return fd


def acquire_within(path: str | os.PathLike[str], holder: dict[str, Any], timeout: float) -> int:
    """``acquire``, trying again for up to ``timeout`` seconds (a run that just ended lets go a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return acquire(path, holder, inheritable=False)
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def write_holder(fd: int, holder: dict[str, Any]) -> None:
    """Record who holds the lease (read by ``held_message``) in the lease file of the held ``fd``."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode("utf-8"), 0)


def release(fd: int) -> None:
    """Let go of a lease this process took (its children that inherited the fd keep holding it)."""
    os.close(fd)


def is_held(path: str | os.PathLike[str]) -> bool:
    """True while some process holds the lease (tested by trying to take it, and letting go at once)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def wait_released(path: str | os.PathLike[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_held(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def run_processes(pgid: int, marker: str) -> list:
    """The live processes of one run: in its process group *and* carrying its marker (pids get reused)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != pgid or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(RUN_MARKER_ENV) == marker:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def kill_run(pgid: int, marker: str, timeout: float = 30.0) -> bool:
    """SIGKILL every process of the run and wait for them; True when none is left."""
    import psutil

    procs = run_processes(pgid, marker)
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=timeout)
    return not run_processes(pgid, marker)
