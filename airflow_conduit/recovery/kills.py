"""A process of a run that died by a signal: which process, which signal, said so (code 1410).

A run is three processes on the local backend: the driver wrapper (``hooks/backends/detached.py``), the
spark-submit JVM it starts, and the Python driver that JVM starts. When one dies by a signal (``kill -9``, the
OOM killer, a crash), what the others see next is a consequence (a refused connection to the JVM's gateway,
an exit code): recorded as is, it would send an operator to the network. Whoever knows the signal (the dead
process's parent) names it; the restart decision is the same (transient).
"""

from __future__ import annotations

import signal

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import StructuredError

DRIVER_JVM = "jvm"
PYTHON_DRIVER = "python"
WRAPPER = "wrapper"
PROCESS_NAMES = {
    DRIVER_JVM: "the driver's JVM (spark-submit)",
    PYTHON_DRIVER: "the Python driver",
    WRAPPER: "the driver wrapper",
}
_LARGEST_SIGNAL = 64
SHELL_SIGNAL_BASE = 128  # a shell's (and Java's Process.waitFor's) exit status of a child killed by signal N: 128 + N


def signal_label(signum: int) -> str:
    """``9 (SIGKILL)``, or the number alone for a signal Python does not name."""
    try:
        return f"{signum} ({signal.Signals(signum).name})"
    except ValueError:
        return str(signum)


def signal_of_exit_code(exit_code: int | None) -> int | None:
    """The signal a process died by, from its exit code: negative (Python's ``Popen``) or 128 + N (shells, Java)."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if SHELL_SIGNAL_BASE < exit_code <= SHELL_SIGNAL_BASE + _LARGEST_SIGNAL:
        return exit_code - SHELL_SIGNAL_BASE
    return None


def killed_message(process: str, signum: int | None) -> str:
    """One line an operator acts on: which process died by which signal, and that the pipeline is not at fault."""
    name = PROCESS_NAMES.get(process, process)
    how = f"by signal {signal_label(signum)}" if signum else "by a signal (which one only its parent process could tell)"
    return (f"{name} was killed {how}: a process of the run died (a kill, the OOM killer, a crash), not a fault of "
            "the pipeline, its data or the network; the pipeline is restarted with backoff and re-runs what was not "
            "committed")


def killed_by_signal(process: str, signum: int | None, *, pid: int | None = None,
                     reported: dict | None = None) -> StructuredError:
    """The structured error of a run one of whose processes died by a signal (``reported``: the error another
    process of the run wrote after the death, a consequence of it, kept in ``extra``)."""
    extra: dict = {"process": process, "signal": signum}
    if pid is not None:
        extra["pid"] = pid
    if reported:
        extra["reported_after"] = {"code": reported.get("code"), "message": reported.get("message")}
    return StructuredError(code=codes.KILLED_BY_SIGNAL, fatal=False, message=killed_message(process, signum),
                           stage="runner", extra=extra)
