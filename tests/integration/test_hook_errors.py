"""The hook's Airflow conventions: one control-plane error type that the backends raise and both drivers
catch, the REST retry limits and the status-failure tolerance as arguments, the worker defaults as
``[conduit]`` options, fault injection outside the operator's signature, ``backend`` as the one name.

The masters here are real HTTP servers on loopback answering from a script (a refusing or failing
master cannot be asked for on the real standalone cluster of test_standalone.py), or a port where
nothing listens; the local backend's drivers are real detached processes (the tiny stand-in job).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import warnings
from pathlib import Path

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk.exceptions import AirflowException

from airflow_conduit.hooks import errors
from airflow_conduit.hooks.backends import lease
from airflow_conduit.hooks.backends.local import LocalBackend, free_port
from airflow_conduit.hooks.backends.retries import RestRetry
from airflow_conduit.hooks.backends.standalone import StandaloneBackend
from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook
from airflow_conduit.runs.handles import JobHandle
from conftest import run_test_dag
from scripted_master import ScriptedMaster

DEADLINE = 120
QUICK = RestRetry(limit=3, delay=0.01, max_delay=0.02)


@pytest.fixture
def master():
    masters: list[ScriptedMaster] = []

    def start(answers: list) -> ScriptedMaster:
        masters.append(ScriptedMaster(answers))
        return masters[-1]

    yield start
    for m in masters:
        m.close()


def standalone_connection(monkeypatch, conn_id: str, rest_port: int) -> dict:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077,
         "extra": {"deploy-mode": "cluster", "rest-port": str(rest_port)}}))
    return SparkPipelineHook(conn_id).connection_settings


def standalone_handle(tmp_path: Path, port: int, rest_retry: RestRetry = QUICK) -> JobHandle:
    return JobHandle("standalone", "s1", str(tmp_path), str(tmp_path / "r.json"), driver_id="driver-1",
                     rest_endpoint=f"http://127.0.0.1:{port}", rest_retry=rest_retry.to_dict())


def submit_to(monkeypatch, tmp_path: Path, tiny_job: str, rest_port: int) -> JobHandle:
    settings = standalone_connection(monkeypatch, "hook_errors_master", rest_port)
    backend = StandaloneBackend("hook_errors_master", connection=settings, application=tiny_job, py_files="",
                                rest_retry=QUICK)
    (tmp_path / "p.yaml").write_text("unused: the stand-in job reads no spec\n")
    return backend.submit(str(tmp_path / "p.yaml"), "s1", str(tmp_path / "state"))


# -- one type ------------------------------------------------------------------------------------------


def test_every_control_plane_error_is_an_airflow_exception_of_one_type():
    concrete = [errors.SparkConnectionError, errors.SparkConnectionNotFound, errors.KafkaConnectionError,
                errors.LeaseHeld, errors.PreviousRunAlive, errors.RestSubmissionError, errors.BackendUnreachable,
                errors.MasterUnavailable, errors.StatusUnavailable]
    for error in concrete:
        assert issubclass(error, errors.ConduitControlPlaneError) and issubclass(error, AirflowException), error
    assert issubclass(errors.LeaseHeld, lease.LeaseHeld)  # what the Airflow-free wrapper and `dlq replay` catch
    assert [e.__name__ for e in concrete if not e.transient] == [
        "SparkConnectionError", "SparkConnectionNotFound", "KafkaConnectionError"]  # refused, not retried


def test_a_leased_state_dir_refuses_the_hooks_submission_as_the_one_type(tmp_path, tiny_job, monkeypatch):
    from airflow_conduit.cli.run_cmd import EXIT_LEASE_HELD, not_started_exit_code
    from airflow_conduit.hooks.backends import local

    monkeypatch.setattr(local, "LEASE_WAIT_SECONDS", 1.0)
    cmd = [sys.executable, tiny_job, "--spec", "unused.yaml", "--run-id", "first", "--state-dir", str(tmp_path),
           "--faults", json.dumps({"sleep": 60})]
    first = LocalBackend().launch(cmd, "first", str(tmp_path))
    try:
        hook = SparkPipelineHook("conduit_local", backend_options={"application": tiny_job, "py_files": ""})
        with pytest.raises(errors.ConduitControlPlaneError, match=r"leased by run first") as info:
            hook.submit_job("unused.yaml", "second", str(tmp_path))
        assert isinstance(info.value, errors.LeaseHeld) and info.value.transient
        assert not_started_exit_code(info.value) == EXIT_LEASE_HELD  # the CLI's answer to the same error
        assert not (tmp_path / "runs" / "second").exists()
    finally:
        LocalBackend(graceful_stop_seconds=5).kill(first)


def test_an_unreachable_master_is_wrapped_at_the_backend_boundary(tmp_path, tiny_job, monkeypatch):
    import httpx

    port = free_port()  # nothing listens there
    with pytest.raises(errors.BackendUnreachable, match="not submitted") as info:
        submit_to(monkeypatch, tmp_path, tiny_job, port)
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    backend = StandaloneBackend()
    with pytest.raises(errors.StatusUnavailable, match="driver-1"):
        backend.status(standalone_handle(tmp_path, port))
    with pytest.raises(errors.StatusUnavailable):
        asyncio.run(backend.status_async(standalone_handle(tmp_path, port)))
    with pytest.raises(errors.BackendUnreachable, match="not killed"):
        backend.kill(standalone_handle(tmp_path, port))
    with pytest.raises(errors.PreviousRunAlive, match="cannot confirm"):
        backend.ensure_gone(standalone_handle(tmp_path, port))


def test_a_refusing_master_and_a_failing_one_are_told_apart(tmp_path, tiny_job, monkeypatch, master):
    refusing = master([{"action": "CreateSubmissionResponse", "success": False, "message": "no workers"}])
    with pytest.raises(errors.SubmissionRefused, match="refused the submission: no workers"):
        submit_to(monkeypatch, tmp_path, tiny_job, refusing.port)
    failing = master([503])
    with pytest.raises(errors.MasterUnavailable, match="HTTP 503"):  # a BackendUnreachable; create is not retried
        submit_to(monkeypatch, tmp_path, tiny_job, failing.port)
    assert len(failing.requests) == 1  # the request reached the master: a second one could start a second driver


# -- the REST retry limits and the status-failure tolerance ---------------------------------------------


def test_the_rest_retry_limit_travels_in_the_handle_and_bounds_each_status_call(tmp_path, master):
    flaky = master([500, 500, {"success": True, "driverState": "FINISHED"}])
    with pytest.raises(errors.StatusUnavailable, match="HTTP 500"):
        StandaloneBackend().status(standalone_handle(tmp_path, flaky.port, RestRetry(2, 0.01, 0.02)))
    assert len(flaky.requests) == 2
    flaky = master([500, 500, {"success": True, "driverState": "FINISHED"}])
    status = SparkPipelineHook.get_job_status(standalone_handle(tmp_path, flaky.port, RestRetry(3, 0.01, 0.02)))
    assert status.state == "succeeded" and len(flaky.requests) == 3


def test_the_hook_records_its_rest_retry_arguments_in_the_handle(tmp_path, tiny_job, monkeypatch, master):
    accepting = master([{"action": "CreateSubmissionResponse", "success": True, "submissionId": "driver-7"}])
    standalone_connection(monkeypatch, "hook_errors_master", accepting.port)
    hook = SparkPipelineHook("hook_errors_master", backend_options={"application": tiny_job, "py_files": ""},
                             rest_retry_limit=7, rest_retry_delay=0.5, rest_retry_max_delay=4)
    (tmp_path / "p.yaml").write_text("unused: the stand-in job reads no spec\n")
    handle = hook.submit_job(str(tmp_path / "p.yaml"), "s1", str(tmp_path / "state"))
    assert handle.driver_id == "driver-7"
    assert handle.rest_retry == {"limit": 7, "delay": 0.5, "max_delay": 4}
    stored_before = JobHandle.from_dict({k: v for k, v in handle.to_dict().items() if k != "rest_retry"})
    assert RestRetry.of_handle(stored_before) == RestRetry(5, 1.0, 10.0)  # a handle stored before carries the defaults


@pytest.mark.parametrize("arguments, named", [
    ({"rest_retry_limit": 0}, "rest_retry_limit"),
    ({"rest_retry_delay": -1}, "rest_retry_delay"),
    ({"rest_retry_delay": 5, "rest_retry_max_delay": 2}, "rest_retry_max_delay"),
    ({"status_failures_tolerated": -1}, "status_failures_tolerated"),
    ({"backend": "yarn"}, "backend"),
])
def test_bad_hook_and_operator_arguments_are_refused_naming_them(arguments, named):
    from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

    with pytest.raises(ValueError, match=named):
        RecoveringSparkPipelineOperator(task_id="p", spec="unused.yaml", state_dir="state", **arguments)
    hook_arguments = {k: v for k, v in arguments.items() if k != "status_failures_tolerated"}
    if hook_arguments:
        with pytest.raises(ValueError, match=named):
            SparkPipelineHook("conduit_local", **hook_arguments)


def test_the_tolerance_is_the_operators_argument_and_reaches_the_watcher(tmp_path):
    from airflow_conduit.triggers.pipeline import SparkPipelineTrigger

    handle = standalone_handle(tmp_path, free_port())  # nobody answers: every status round fails
    trigger = SparkPipelineTrigger(handle, poll_interval=0.05, status_failures_tolerated=1)
    payload = asyncio.run(asyncio.wait_for(anext(trigger.run()), DEADLINE)).payload
    assert payload["status"] == "failed" and "2 status rounds failed" in payload["error"]["message"]
    assert "StatusUnavailable" in payload["error"]["message"]
    assert trigger.serialize()[1]["status_failures_tolerated"] == 1


def test_the_operator_catches_a_backend_failure_as_a_failed_submission(airflow_db, tmp_path, monkeypatch):
    """A master nobody answers: the submission fails (BackendUnreachable), the engine decides (max-retries 0:
    degraded), the task fails once; the operator's rest_retry_* arguments reach the hook."""
    from conftest import REPO

    standalone_connection(monkeypatch, "hook_errors_dead_master", free_port())
    state_dir = tmp_path / "state"
    dr = run_test_dag("hook_errors_unreachable", spec=str(REPO / "examples" / "orders" / "pipeline.yaml"),
                      state_dir=str(state_dir), conn_id="hook_errors_dead_master", max_retries=0, poll_interval=0.5,
                      rest_retry_limit=2, rest_retry_delay=0.01, rest_retry_max_delay=0.02)
    assert dr.state == "failed"
    record = json.loads((state_dir / "recovery.json").read_text())
    assert record["pipeline_state"] == "degraded"
    failed = [e for e in record["carry"]["recovery"]["audit"] if e["event"] == "failed"]
    assert len(failed) == 1 and "not submitted: BackendUnreachable" in failed[0]["message"], failed


# -- worker defaults, fault injection, one name ----------------------------------------------------------


def test_worker_defaults_come_from_the_conduit_section_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__CONDUIT__WORKER_JARS", raising=False)
    monkeypatch.delenv("AIRFLOW__CONDUIT__SPARK_LOCAL_IP", raising=False)
    backend = SparkPipelineHook("conduit_local").backend
    assert backend.worker_jars == ["/usr/share/java/postgresql.jar"] and backend.spark_local_ip == "127.0.0.1"

    monkeypatch.setenv("AIRFLOW__CONDUIT__WORKER_JARS", "")
    monkeypatch.setenv("AIRFLOW__CONDUIT__SPARK_LOCAL_IP", "")
    backend = SparkPipelineHook("conduit_local").backend
    assert backend.worker_jars == [] and backend.spark_local_ip is None
    assert "spark.jars" not in backend._spark_conf(4050)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    assert "SPARK_LOCAL_IP" not in backend._environment("marker")

    jar = tmp_path / "driver.jar"
    jar.write_bytes(b"")
    backend = SparkPipelineHook("conduit_local", backend_options={
        "worker_jars": [str(jar), str(tmp_path / "missing.jar")], "spark_local_ip": "10.1.2.3"}).backend
    assert backend._spark_conf(4050)["spark.jars"] == str(jar)  # a jar this machine does not have is skipped
    assert backend._environment("marker")["SPARK_LOCAL_IP"] == "10.1.2.3"
    monkeypatch.setenv("SPARK_LOCAL_IP", "192.168.0.9")
    assert backend._environment("marker")["SPARK_LOCAL_IP"] == "192.168.0.9"  # the worker's own setting wins
    assert LocalBackend(worker_jars=f"{jar}, {tmp_path / 'missing.jar'}").worker_jars == [str(jar), str(tmp_path / "missing.jar")]


def test_faults_are_a_backend_option_not_an_operator_argument(tmp_path, tiny_job):
    from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

    assert "faults" not in inspect.signature(RecoveringSparkPipelineOperator.__init__).parameters
    backend = SparkPipelineHook("conduit_local", backend_options={
        "application": tiny_job, "py_files": "", "faults": '{"exit": 75}'}).backend  # JSON text, as a template renders it
    assert backend.faults == {"exit": 75}
    assert LocalBackend(faults="null").faults is None
    handle = SparkPipelineHook("conduit_local", backend_options={
        "application": tiny_job, "py_files": "", "faults": {"exit": 75}}).submit_job("unused.yaml", "r1", str(tmp_path))
    deadline = DEADLINE * 3  # a real spark-submit starts the stand-in job
    import time

    end = time.monotonic() + deadline
    while not SparkPipelineHook.get_job_status(handle).finished:
        assert time.monotonic() < end, "the job did not finish"
        time.sleep(0.5)
    assert SparkPipelineHook.get_job_status(handle).exit_code == 75  # the injected transient failure


def test_launcher_is_a_deprecated_name_of_backend():
    from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

    with pytest.warns(AirflowProviderDeprecationWarning, match="launcher is deprecated: use backend"):
        operator = RecoveringSparkPipelineOperator(task_id="p", spec="s.yaml", state_dir="state", launcher="local",
                                                   conn_id="conduit_local")
    assert operator.backend == "local" and operator.get_hook().backend_kind == "local"
    with pytest.warns(AirflowProviderDeprecationWarning, match="launcher_options is deprecated: use backend_options"):
        operator = RecoveringSparkPipelineOperator(task_id="p", spec="s.yaml", state_dir="state",
                                                   launcher_options={"env": {"A": "1"}})
    assert operator.backend_options == {"env": {"A": "1"}}
    with pytest.raises(ValueError, match="give backend only"):
        RecoveringSparkPipelineOperator(task_id="p", spec="s.yaml", state_dir="state", launcher="local", backend="local")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RecoveringSparkPipelineOperator(task_id="p", spec="s.yaml", state_dir="state", backend="standalone")
