"""Run a command detached from its parent and record its exit code in a file.

A detached process cannot be waited on by anyone but its parent, and the
Airflow worker that started the job is gone by the time the job ends (it
deferred). So the launcher starts this tiny wrapper in a new session; the
wrapper runs spark-submit, waits for it and writes ``{"exit_code": N}``
atomically next to the driver log. Imports no Airflow (only the pure
``pipeline.report`` helpers), so it starts fast.

Usage: python -m airflow_conduit.launchers.detached EXIT_FILE -- CMD [ARGS...]
"""

from __future__ import annotations

import signal
import subprocess
import sys

from airflow_conduit.pipeline.report import utc_now_iso, write_json_atomic


def write_exit_file(path: str, exit_code: int | None, note: str = "") -> None:
    """Atomically write the exit record (temp file + os.replace: readers never see half a file)."""
    write_json_atomic(path, {"exit_code": exit_code, "ended_at": utc_now_iso(), "note": note})


def _ignore(signum, frame) -> None:
    """Keep waiting for the child: it received the same signal and decides how to end."""


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    exit_file, cmd = argv[0], argv[2:]
    # The wrapper shares its process group with the job: a group-wide SIGTERM (graceful kill) reaches
    # spark-submit directly, and the wrapper must outlive it to record how it ended.
    # A handler, not SIG_IGN: ignored dispositions are inherited across exec, handlers are reset to default.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        write_exit_file(exit_file, 127, note=str(exc))
        return 127
    rc = child.wait()
    # Shell convention for a child killed by a signal: 128 + signal number (what a JVM reports too).
    exit_code = 128 - rc if rc < 0 else rc
    write_exit_file(exit_file, exit_code, note=f"signal {-rc}" if rc < 0 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
