"""Run a command detached from its parent, holding the state dir's lease, and record its exit code.

A detached process cannot be waited on by anyone but its parent, and the
Airflow worker that started the job is gone by the time the job ends (it
deferred). So the local backend starts this tiny wrapper in a new session; the
wrapper

1. holds the driver lease on the state dir (``lease.py``) and hands it to
   spark-submit: a second driver on the same state dir refuses to start. The
   launcher takes the lease and passes its open file (``--lease-fd``), so the
   launcher knows of a refusal before the wrapper exists; with ``--lease`` the
   wrapper takes it itself;
2. starts spark-submit with ``PR_SET_PDEATHSIG``: if the wrapper is killed,
   the kernel kills spark-submit (and its JVM) at once, so no driver runs on
   unwatched;
3. is a child subreaper: when spark-submit's JVM dies, its orphaned children
   (the PySpark driver process, Python workers) become the wrapper's, and the
   wrapper stops them instead of letting them linger for minutes;
4. writes ``{"exit_code": N}`` atomically next to the driver log.

Imports no Airflow (only pure helpers), so it starts fast.

Usage: python -m airflow_conduit.hooks.backends.detached EXIT_FILE [--lease LEASE_FILE | --lease-fd FD] [--run RUN_ID] -- CMD [ARGS...]
"""

from __future__ import annotations

import signal


def _ignore(signum, frame) -> None:
    """Keep waiting for the child: it received the same signal and decides how to end."""


# First thing, before the imports below take their time: the wrapper shares its process group with the
# job, so a group-wide SIGTERM (graceful kill) reaches spark-submit directly, and the wrapper must outlive
# it to record how it ended. A handler, not SIG_IGN: ignored dispositions are inherited across exec,
# handlers are reset to default.
if __name__ == "__main__":
    for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(_sig, _ignore)

import ctypes  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from airflow_conduit.hooks.backends import lease  # noqa: E402
from airflow_conduit.runs.report import utc_now_iso, write_json_atomic  # noqa: E402
from airflow_conduit.recovery import codes  # noqa: E402

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE_SECONDS = 5.0
SIGNAL_NOTE = "signal "  # the exit record's note of a spark-submit killed by a signal: "signal 9"


def write_exit_file(path: str, exit_code: int | None, note: str = "") -> None:
    """Atomically write the exit record (temp file + os.replace: readers never see half a file)."""
    write_json_atomic(path, {"exit_code": exit_code, "ended_at": utc_now_iso(), "note": note})


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: no pdeathsig/subreaper, the lease still holds
        return False


def _die_with_parent(parent_pid: int):
    def preexec() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the wrapper died before prctl took effect
            os._exit(1)

    return preexec


def stop_leftovers(grace: float = LEFTOVER_GRACE_SECONDS) -> list[int]:
    """SIGTERM, then SIGKILL, the descendants still alive after spark-submit ended; reap them. Returns their pids."""
    import psutil

    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    for proc in left:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(left, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    while True:  # reap adopted orphans (we are their subreaper)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    return [p.pid for p in left]


def refuse(exit_file: str, message: str) -> int:
    """Print the structured error line the watcher reads, record the exit, start nothing."""
    error = {"code": codes.INFRASTRUCTURE, "fatal": False, "message": message, "stage": "launcher", "extra": {}}
    print(codes.ERROR_LINE_PREFIX + json.dumps(error), file=sys.stderr, flush=True)
    write_exit_file(exit_file, codes.EXIT_TRANSIENT, note=message)
    return codes.EXIT_TRANSIENT


def parse(argv: list[str]) -> tuple[str, dict[str, str], list[str]] | None:
    if "--" not in argv or not argv or argv[0] == "--":
        return None
    split = argv.index("--")
    head, cmd = argv[:split], argv[split + 1 :]
    exit_file, options = head[0], dict(zip(head[1::2], head[2::2]))
    if not cmd or set(options) - {"--lease", "--lease-fd", "--run"}:
        return None
    if "--lease-fd" in options and not options["--lease-fd"].isdigit():
        return None
    return exit_file, options, cmd


def main(argv: list[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        print(__doc__, file=sys.stderr)
        return 2
    exit_file, options, cmd = parsed
    holder = {"run_id": options.get("--run"), "pid": os.getpid(), "since": utc_now_iso()}
    lease_fd = None
    if "--lease-fd" in options:  # taken by the launcher: hold it from here on
        lease_fd = int(options["--lease-fd"])
        lease.write_holder(lease_fd, holder)
    elif options.get("--lease"):
        try:
            lease_fd = lease.acquire(options["--lease"], holder)
        except lease.LeaseHeld as exc:
            return refuse(exit_file, str(exc))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # (again, when main() is called directly)
        signal.signal(sig, _ignore)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        child = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent(os.getpid()),
            pass_fds=(lease_fd,) if lease_fd is not None else (),
        )
    except OSError as exc:
        print(f"cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        write_exit_file(exit_file, 127, note=str(exc))
        return 127
    rc = child.wait()
    left = stop_leftovers()
    if left:
        print(f"{time.strftime('%H:%M:%S')} stopped {len(left)} process(es) left behind by the driver: {left}",
              file=sys.stderr, flush=True)
    # Shell convention for a child killed by a signal: 128 + signal number (what a JVM reports too).
    exit_code = 128 - rc if rc < 0 else rc
    write_exit_file(exit_file, exit_code, note=f"{SIGNAL_NOTE}{-rc}" if rc < 0 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
