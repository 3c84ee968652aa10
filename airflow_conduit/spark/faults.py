"""Fault injection for tests and demos (``--faults JSON``); counters live in STATE_DIR/faults/.

- ``{"transient_first_runs": N}``: the first N runs of this state directory fail with a transient
  error (code 1500) before Spark starts; run N+1 proceeds.
- ``{"fatal": true}``: the run fails with a fatal error (code 2900) before Spark starts.
- ``{"crash_after_destination": {"destination": ID, "batch": B}}``: the driver kills itself with
  SIGKILL (no cleanup, no report, spark-submit exits 137) right after destination ID committed batch B and before the
  destinations after it (and the batch commit) ran. It fires once per state directory.
- ``{"crash_before_commit": {"destination": ID, "batch": B}}``: the same, right after destination ID
  wrote batch B and before its commit marker (the re-run finds the write done and the marker missing).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Callable

from airflow_conduit.runs.report import read_json, write_json_atomic
from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError, TransientError

CRASH_EXIT_CODE = 137  # what a shell reports for SIGKILL


class InjectedTransient(TransientError):
    code = codes.INJECTED_TRANSIENT


class InjectedFatal(FatalError):
    code = codes.INJECTED_FATAL


def parse_faults(text: str | None) -> dict[str, Any]:
    """Every key and value checked (pipeline/faults_option.py, shared with the CLI): a bad value is refused once, not per run."""
    from airflow_conduit.pipeline.faults_option import FaultsError
    from airflow_conduit.pipeline.faults_option import parse_faults as checked

    try:
        return checked(text)
    except FaultsError as exc:
        raise ValueError(exc.problem) from None


def _faults_dir(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "faults"


def check_start_faults(state_dir: str | os.PathLike[str], faults: dict[str, Any]) -> None:
    """Raise the injected start-of-run failure, if any (counting runs for transient_first_runs)."""
    if faults.get("fatal"):
        raise InjectedFatal("injected fatal failure (--faults fatal)")
    limit = int(faults.get("transient_first_runs") or 0)
    if limit > 0:
        counter = _faults_dir(state_dir) / "runs.json"
        runs = (read_json(counter) or {}).get("runs", 0)
        write_json_atomic(counter, {"runs": runs + 1})
        if runs < limit:
            raise InjectedTransient(f"injected transient failure {runs + 1} of {limit} (--faults transient_first_runs)")


def os_exit_crash() -> None:
    """Die as a killed driver does: SIGKILL to ourselves (os._exit only if the signal could not be sent)."""
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(CRASH_EXIT_CODE)


CRASH_POINTS = {"crash_after_destination": "after", "crash_before_commit": "before-commit"}


def crash_point(
    state_dir: str | os.PathLike[str],
    faults: dict[str, Any],
    crash: Callable[[], None] | None = None,
    key: str = "crash_after_destination",
) -> Callable[[str, int], None]:
    """A hook the runner calls at the crash point ``key`` of each destination; it crashes where --faults says, once."""
    spec = faults.get(key)
    if not spec:
        return lambda destination, batch: None
    target, batch_target = str(spec["destination"]), int(spec["batch"])
    done = _faults_dir(state_dir) / f"crashed-{CRASH_POINTS[key]}-{target}-{batch_target}"

    def hook(destination: str, batch: int) -> None:
        if destination == target and batch == batch_target and not done.exists():
            done.parent.mkdir(parents=True, exist_ok=True)
            done.write_text("crashed\n")
            (crash or os_exit_crash)()

    return hook


class SimulatedCrash(BaseException):
    """In-process stand-in for a killed driver (tests): stops the query like a crash, writes no failed report.

    A BaseException so that no ``except Exception`` on the way turns it into a pipeline error.
    """
