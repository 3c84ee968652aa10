"""A process of a run killed by a signal is recorded as that, with the signal: not as a network fault.

`airflow-conduit run` runs a continuous pipeline with `max-retries: 0`, so the first failure ends the command
and its classification stays in recovery.json. Once the lake committed batch 0, one process of the run is
SIGKILLed: the spark-submit JVM, the Python driver (its child), or the driver wrapper above them (as a user,
the OOM killer or a kill -9 of the wrong pid would).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_conduit.hooks.backends import lease
from airflow_conduit.recovery import codes
from test_one_driver import CLI, DEADLINE, current_handle, wait_for

pytestmark = pytest.mark.integration


def _process(handle: dict, state_dir: Path, which: str):
    """The wrapper, the spark-submit JVM or the Python driver of the run ``handle`` (psutil processes)."""
    import psutil

    if which == "wrapper":
        return psutil.Process(handle["pid"])
    procs = []
    for proc in lease.run_processes(handle["pid"], lease.run_marker(state_dir, handle["run_id"])):
        try:
            procs.append((proc, proc.cmdline() or [""], proc.ppid()))
        except psutil.Error:  # ended meanwhile
            continue
    jvm = [p for p, cmdline, _ in procs if os.path.basename(cmdline[0]).startswith("java")]
    if which == "jvm":
        return jvm[0] if len(jvm) == 1 else None
    drivers = [p for p, cmdline, parent in procs if "entrypoint.py" in " ".join(cmdline) and len(jvm) == 1
               and parent == jvm[0].pid]
    return drivers[0] if len(drivers) == 1 else None


@pytest.mark.parametrize("which, process", [
    ("jvm", "the driver's JVM (spark-submit)"),
    ("python", "the Python driver"),
    ("wrapper", "the driver wrapper"),
])
def test_a_process_of_the_run_killed_by_sigkill_is_classified_as_killed_by_that_signal(orders, tmp_path, which, process):
    spec = orders / "continuous.yaml"
    spec.write_text((orders / "pipeline.yaml").read_text().replace("mode: available-now", "mode: continuous"))
    state_dir = orders / "state"
    with open(tmp_path / "cli.log", "w") as log:
        cli = subprocess.Popen([CLI, "run", str(spec), "--state-dir", str(state_dir), "--max-retries", "0",
                                "--poll-interval", "1"], stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        handle = wait_for(lambda: (h := current_handle(state_dir)) and h["run_id"].endswith("-s01") and h, "run s01", cli)
        wait_for(lambda: (state_dir / "commits" / "lake" / "0").exists(), "batch 0 in the lake", cli)
        target = wait_for(lambda: _process(handle, state_dir, which), f"the run's {which} process", cli)
        os.kill(target.pid, signal.SIGKILL)
        assert cli.wait(timeout=DEADLINE) == 3  # max-retries 0: the restart the kill asks for is not allowed
    finally:
        if cli.poll() is None:
            cli.kill()
    out = (tmp_path / "cli.log").read_text()
    assert "Traceback" not in out, out[-3000:]
    record = json.loads((state_dir / "recovery.json").read_text())
    error = record["last_event"]["error"]
    assert error["code"] == codes.KILLED_BY_SIGNAL and error["fatal"] is False, (error, out[-3000:])
    assert error["message"].startswith(f"{process} was killed by signal 9 (SIGKILL)"), error
    assert error["extra"]["process"] == which and error["extra"]["signal"] == signal.SIGKILL
    failure = [e for e in record["carry"]["recovery"]["audit"] if e["event"] == "failed"][-1]
    assert failure["details"]["classification"]["code"] == codes.KILLED_BY_SIGNAL, failure
    assert failure["message"].startswith(f"transient error: {process} was killed by signal 9 (SIGKILL)"), failure
    assert f"code {codes.KILLED_BY_SIGNAL}" in out and f"  error: {process} was killed by signal 9 (SIGKILL)" in out, out[-3000:]
