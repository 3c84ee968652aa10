"""Which process of a run died by which signal (recovery/kills.py), as the local backend reads it from the
wrapper's exit record and as the watcher's error then says it."""

from __future__ import annotations

import pytest

from airflow_conduit.hooks.backends.base import FAILED, JobStatus, structured_failure
from airflow_conduit.hooks.backends.local import _killed
from airflow_conduit.recovery import codes, kills
from airflow_conduit.recovery.classify import classify


@pytest.mark.parametrize("exit_code, signal", [(-9, 9), (137, 9), (143, 15), (139, 11), (0, None), (1, None), (75, None),
                                               (128, None), (None, None)])
def test_the_signal_of_an_exit_code(exit_code, signal):
    assert kills.signal_of_exit_code(exit_code) == signal


@pytest.mark.parametrize("exit_code, note, killed", [
    (137, "signal 9", {"killed": "jvm", "signal": 9}),  # the wrapper saw spark-submit's JVM die by the signal
    (134, "signal 6", {"killed": "jvm", "signal": 6}),  # a JVM that aborted
    (137, "", {"killed": "python", "signal": 9}),  # the JVM exited 137 on its own: PySpark passes on its driver's end
    (137, "killed by the launcher", {}),  # a stop: the launcher's own kill, not a death to report
    (75, "", {}), (0, "", {}),
])
def test_which_process_died_is_read_from_the_wrappers_exit_record(exit_code, note, killed):
    assert _killed(exit_code, note) == killed


def test_a_kill_wins_over_what_the_python_driver_wrote_after_its_jvm_was_gone():
    refused = {"code": codes.CONNECTION, "fatal": False, "message": "ConnectionRefusedError: [Errno 111] Connection refused"}
    status = JobStatus(FAILED, exit_code=137, message="signal 9", killed=kills.DRIVER_JVM, signal=9)
    error = structured_failure(status, refused, "")
    assert error["code"] == codes.KILLED_BY_SIGNAL and error["fatal"] is False
    assert error["message"].startswith("the driver's JVM (spark-submit) was killed by signal 9 (SIGKILL): ")
    assert error["extra"] == {"process": "jvm", "signal": 9,
                              "reported_after": {"code": codes.CONNECTION, "message": refused["message"]}}
    verdict = classify(error)
    assert verdict.code == codes.KILLED_BY_SIGNAL and verdict.transient


def test_a_wrapper_whose_signal_nobody_saw_says_so():
    status = JobStatus(FAILED, killed=kills.WRAPPER, signal=None)
    error = structured_failure(status, None, "")
    assert error["message"].startswith("the driver wrapper was killed by a signal (which one only its parent process could tell)")
    assert error["extra"] == {"process": "wrapper", "signal": None}
