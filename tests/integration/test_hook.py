"""SparkPipelineHook: the connection (named errors, no silent fallback), its backends, one driver per state dir.

The drivers here are real detached processes under the real wrapper (``hooks/backends/detached.py``),
running the tiny stand-in job (tests/integration/jobs/tiny_job.py); the processes, signals, locks and
the process table are real. One test runs real spark-submit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_conduit.hooks.backends import lease
from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.hooks.spark_pipeline import SparkConnectionNotFound, SparkPipelineHook
from airflow_conduit.runs.handles import JobHandle

DEADLINE = 120  # seconds: generous, the machine is shared


def tiny(tiny_job: str, state_dir: Path, run_id: str, faults: dict) -> JobHandle:
    cmd = [sys.executable, tiny_job, "--spec", "unused.yaml", "--run-id", run_id, "--state-dir", str(state_dir),
           "--faults", json.dumps(faults)]
    return LocalBackend().launch(cmd, run_id, str(state_dir))


def wait_for(condition, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def job_pid(handle: JobHandle) -> int:
    """The wrapper's child: spark-submit in production, the tiny job here."""
    return wait_for(lambda: (psutil.Process(handle.pid).children() or [None])[0], "the job to start").pid


# -- the connection ------------------------------------------------------------------------------


def test_a_missing_connection_is_a_named_error_not_local_spark(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_TYPO", raising=False)
    with pytest.raises(SparkConnectionNotFound, match=r"'spark_typo' does not exist.*conduit_local"):
        SparkPipelineHook("spark_typo").get_conn()


def test_the_operator_fails_on_a_missing_connection_before_submitting(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

    operator = RecoveringSparkPipelineOperator(task_id="p", spec="unused.yaml", state_dir=str(tmp_path), conn_id="spark_typo")
    with pytest.raises(AirflowFailException, match=r"'spark_typo' does not exist.*nothing was submitted"):
        operator.get_hook()


def test_embedded_local_spark_only_by_name():
    hook = SparkPipelineHook("conduit_local")
    assert hook.connection_settings["master"] == "local[*]" and hook.backend_kind == "local"
    assert (hook.get_conn().conn_id, hook.get_conn().conn_type, hook.get_conn().host) == ("conduit_local", "spark", "local[*]")


def test_get_conn_is_the_airflow_connection_and_the_spark_reading_of_it_is_named(monkeypatch):
    from airflow.sdk import Connection

    monkeypatch.setenv("AIRFLOW_CONN_HOOK_STORED", json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077, "extra": {"deploy-mode": "cluster", "rest-port": "6067"}}))
    hook = SparkPipelineHook("hook_stored")
    conn = hook.get_conn()
    assert isinstance(conn, Connection) and conn.conn_id == "hook_stored" and conn.port == 7077
    assert conn.extra_dejson["deploy-mode"] == "cluster"
    settings = hook.connection_settings  # the Spark provider's reading of that connection
    assert settings["master"] == "spark://127.0.0.1:7077" and settings["deploy_mode"] == "cluster"
    assert hook.backend_kind == "standalone" and hook.backend.rest_endpoint == "http://127.0.0.1:6067"


@pytest.mark.parametrize(
    "connection, kind",
    [
        ({"conn_type": "spark", "host": "local[2]"}, "local"),
        ({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077}, "local"),  # client mode: spark-submit here
        ({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077, "extra": {"deploy-mode": "cluster"}}, "standalone"),
        ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}, "local"),
    ],
)
def test_backend_follows_the_connection(monkeypatch, connection, kind):
    monkeypatch.setenv("AIRFLOW_CONN_HOOK_BACKEND", json.dumps(connection))
    assert SparkPipelineHook("hook_backend").backend_kind == kind


def test_provider_info_declares_the_hook():
    from airflow_conduit.get_provider_info import get_provider_info

    [group] = get_provider_info()["hooks"]
    assert group["python-modules"] == ["airflow_conduit.hooks.spark_pipeline"]
    assert SparkPipelineHook.conn_name_attr == "conn_id" and SparkPipelineHook.default_conn_name == "spark_default"


# -- one driver per state dir --------------------------------------------------------------------


def test_a_second_driver_on_a_leased_state_dir_refuses_to_start(tmp_path, tiny_job, monkeypatch):
    from airflow_conduit.hooks.backends import local

    monkeypatch.setattr(local, "LEASE_WAIT_SECONDS", 1.0)
    first = tiny(tiny_job, tmp_path, "first", {"sleep": 60})
    wait_for(lambda: lease.is_held(lease.lease_path(tmp_path)), "the first driver to take the lease")
    with pytest.raises(lease.LeaseHeld, match=r"leased by run first .*still running"):
        tiny(tiny_job, tmp_path, "second", {})
    assert not (tmp_path / "runs" / "second" / "exit.json").exists()
    LocalBackend(graceful_stop_seconds=5).kill(first)


def test_two_submissions_at_the_same_moment_one_starts_the_other_is_refused_before_anything_starts(
        tmp_path, tiny_job, monkeypatch):
    """The launcher takes the lease itself: the refusal is the submission's answer, not a failed run to watch."""
    import threading

    from airflow_conduit.hooks.backends import local

    monkeypatch.setattr(local, "LEASE_WAIT_SECONDS", 1.0)
    start = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def submit(run_id: str) -> None:
        start.wait()
        try:
            outcomes[run_id] = tiny(tiny_job, tmp_path, run_id, {"sleep": 60})
        except lease.LeaseHeld as exc:
            outcomes[run_id] = exc

    threads = [threading.Thread(target=submit, args=(run_id,)) for run_id in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE)
    [winner] = [run for run, outcome in outcomes.items() if isinstance(outcome, JobHandle)]
    [loser] = [run for run, outcome in outcomes.items() if isinstance(outcome, lease.LeaseHeld)]
    assert f"leased by run {winner} " in str(outcomes[loser])
    assert not (tmp_path / "runs" / loser / "exit.json").exists()  # nothing of it started, nothing to watch
    handle = outcomes[winner]
    assert LocalBackend().status(handle).state == "running"
    wait_for(lambda: lease.read_holder(lease.lease_path(tmp_path)).get("pid") == handle.pid, "the wrapper to hold the lease")
    assert lease.read_holder(lease.lease_path(tmp_path))["run_id"] == winner and lease.is_held(lease.lease_path(tmp_path))
    LocalBackend(graceful_stop_seconds=5).kill(handle)
    wait_for(lambda: not lease.is_held(lease.lease_path(tmp_path)), "the lease to be released")


def test_killing_the_wrapper_kills_the_driver_and_frees_the_lease(tmp_path, tiny_job):
    handle = tiny(tiny_job, tmp_path, "r1", {"sleep": 300})
    driver = job_pid(handle)
    wait_for(lambda: lease.is_held(lease.lease_path(tmp_path)), "the lease to be taken")
    os.kill(handle.pid, signal.SIGKILL)  # kill -9 the wrapper
    wait_for(lambda: not pid_alive(driver), "the driver to die with its wrapper")
    wait_for(lambda: not lease.is_held(lease.lease_path(tmp_path)), "the lease to be released")
    status = LocalBackend().status(handle)
    assert status.state == "failed" and status.exit_code is None  # no exit record: the wrapper was killed
    assert status.killed == "wrapper" and status.signal == signal.SIGKILL  # this process started it: it saw the signal
    second = tiny(tiny_job, tmp_path, "r2", {})  # the next run starts: nobody holds the state dir
    wait_for(lambda: LocalBackend().status(second).finished, "the second run to finish")
    assert LocalBackend().status(second).state == "succeeded"


def test_processes_left_by_the_driver_do_not_outlive_it(tmp_path, tiny_job):
    """The JVM starts the Python driver; if the JVM dies, the wrapper stops what it left behind."""
    pidfile = tmp_path / "orphan.pid"
    handle = tiny(tiny_job, tmp_path, "r1", {"sleep": 300, "orphan": str(pidfile)})
    orphan = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the driver's child"))
    os.kill(job_pid(handle), signal.SIGKILL)  # the "JVM" dies; its child is orphaned
    wait_for(lambda: LocalBackend().status(handle).finished, "the wrapper to record the exit")
    assert not pid_alive(orphan)
    assert LocalBackend().status(handle).exit_code == 137


def test_before_the_next_run_the_previous_one_is_made_gone(tmp_path, tiny_job):
    """Wrapper killed: its child dies with it, but a grandchild (the Python driver) is orphaned outside it."""
    pidfile = tmp_path / "orphan.pid"
    previous = tiny(tiny_job, tmp_path, "r1", {"sleep": 300, "orphan": str(pidfile)})
    orphan = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the driver's child"))
    os.kill(previous.pid, signal.SIGKILL)
    time.sleep(1.0)
    assert pid_alive(orphan)  # reparented away from the dead wrapper: only the run's marker finds it now
    LocalBackend().ensure_gone(JobHandle.from_dict(json.loads(json.dumps(previous.to_dict()))))
    assert not pid_alive(orphan)
    assert not lease.is_held(lease.lease_path(tmp_path))


def test_the_hook_submits_through_spark_submit_and_confirms_the_previous_run_gone(tmp_path, tiny_job):
    """Real spark-submit (local[*]) of the tiny job, twice on one state dir: the second waits for the first."""
    hook = SparkPipelineHook("conduit_local", backend_options={"application": tiny_job, "py_files": ""})
    first = hook.submit_job("unused.yaml", "s01", str(tmp_path), {"sleep": 600})
    wait_for(lambda: lease.is_held(lease.lease_path(tmp_path)), "spark-submit to hold the lease")
    processes = wait_for(lambda: lease.run_processes(first.pid, lease.run_marker(tmp_path, "s01"))[2:] and
                         lease.run_processes(first.pid, lease.run_marker(tmp_path, "s01")), "spark-submit and its job")
    second = hook.submit_job("unused.yaml", "s02", str(tmp_path), {}, previous=first)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes)
    wait_for(lambda: SparkPipelineHook.get_job_status(second).finished, "the second run to finish", timeout=300)
    assert SparkPipelineHook.is_job_succeeded(SparkPipelineHook.get_job_status(second))


# -- no silent fallbacks in the CLI and the recovery Variable ------------------------------------


def test_cli_with_a_missing_connection_names_it_and_starts_nothing(tmp_path):
    from conftest import REPO

    cli = str(Path(sys.executable).parent / "airflow-conduit")
    result = subprocess.run([cli, "run", str(REPO / "examples" / "orders" / "pipeline.yaml"), "--state-dir",
                             str(tmp_path / "state"), "--conn-id", "spark_typo"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "Spark connection 'spark_typo' does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "runs").exists()


def test_an_unreadable_recovery_variable_fails_a_start_and_is_warned_about_later(tmp_path, monkeypatch, capsys, caplog):
    """Variable.get raising stands in for an unreachable API server or secrets backend."""
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowException

    from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
    from airflow_conduit.utils.recovery_config import RecoveryVariableUnreadable, resolve_recovery_options

    def unreachable(*args, **kwargs):
        raise ConnectionError("secrets backend unreachable")

    monkeypatch.setattr(Variable, "get", unreachable)
    with pytest.raises(RecoveryVariableUnreadable, match=r"Variable 'conduit_recovery'.*ConnectionError"):
        resolve_recovery_options({})
    operator = RecoveringSparkPipelineOperator(task_id="p", spec="unused.yaml", state_dir=str(tmp_path), min_delay="3s")
    with pytest.raises(AirflowException, match=r"'conduit_recovery'.*nothing was submitted"):
        operator._recovery_options()  # the pipeline starts: fail, naming the Variable
    carried = {"min-delay": "7s", "max-retries": 4}
    options = operator._recovery_options(carried=carried)  # the pipeline runs: keep what it started with
    assert (options.min_delay, options.max_retries) == (7.0, 4)
    captured = capsys.readouterr()
    logged = captured.out + captured.err + caplog.text  # structlog or stdlib logging, as configured
    assert "warning" in logged.lower() and "'conduit_recovery'" in logged and "keeping the recovery options" in logged
