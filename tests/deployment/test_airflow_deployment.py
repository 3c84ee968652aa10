"""The reference DAGs through a real Airflow deployment (tests/deployment/conftest.py): api-server,
scheduler with LocalExecutor, dag-processor and two triggerers on PostgreSQL, real local Spark.

1. The bounded DAG (conduit_orders_available_now) runs as the scheduler schedules it: every good
   order in the lake once, every bad record in the DLQ once, one submission. The alert DAG
   (conduit_dlq_alert) then alerts on that run's DLQ, its sensors deferred on the triggerers.
2. The continuous DAG (conduit_events_continuous) starts and commits batches; the triggerer that
   watches it is SIGKILLed and the other one takes the trigger over without the Spark job noticing
   (same driver processes, no second submission, batches keep coming); then the task is marked
   success through the REST API: the driver stops and the state dir says ``stopped``. In between, a
   trigger is taken from a live (frozen) triggerer: when it resumes it cancels its copy, and on_kill
   tells the move from a user stop (the task is still deferred) and leaves the job running.
3. The scheduler is SIGKILLed while the bounded DAG's task is deferred on a real Spark run (after a
   transient failure and one restart) and started again: one submission per restart decision,
   the audit log continues where it was, nothing lost or duplicated.

Waits are on conditions with deadlines of minutes (a loaded 2-core machine), never on elapsed time.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from airflow_conduit.hooks.backends import lease
from airflow_conduit.recovery.clock import parse_iso
from airflow_conduit.runs.supervisor import safe_run_id
from conftest import wait_for

pytestmark = pytest.mark.deployment

ORDERS_DAG, ORDERS_TASK = "conduit_orders_available_now", "orders_pipeline"
EVENTS_DAG, EVENTS_TASK = "conduit_events_continuous", "events_pipeline"
ALERT_DAG = "conduit_dlq_alert"
RUN_DEADLINE = 900  # seconds for a DAG run with Spark (several Spark starts on a loaded machine)
STEP_DEADLINE = 420  # seconds for one step (a Spark start, a batch, a trigger to move)
FINISHED = ("success", "failed")


# -- reading a pipeline's state dir and outputs -------------------------------------------------------


def recovery(state_dir: Path) -> dict:
    try:
        return json.loads((state_dir / "recovery.json").read_text())
    except (OSError, ValueError):
        return {}


def audit_log(state_dir: Path) -> list[dict]:
    return ((recovery(state_dir).get("carry") or {}).get("recovery") or {}).get("audit") or []


def run_folders(state_dir: Path, prefix: str) -> list[str]:
    runs = state_dir / "runs"
    return sorted(p.name for p in runs.iterdir() if p.name.startswith(prefix)) if runs.exists() else []


def run_prefix(ti: dict) -> str:
    """The operator's run id prefix of a task try (RecoveringSparkPipelineOperator.execute)."""
    return safe_run_id(f"{ti['dag_run_id']}-{ti['task_id']}-t{ti['try_number']}")


def submissions_of_one_session(state_dir: Path, ti: dict) -> list[str]:
    """The ``sNN`` submissions of a task try's run folders (``<prefix>-<8 hex>-sNN``), checked to belong to one
    run supervisor (one hex token: runs.supervisor.unique_run_prefix)."""
    pattern = re.compile(re.escape(run_prefix(ti)) + r"-([0-9a-f]{8})-(s\d\d)$")
    matches = [pattern.match(name) for name in run_folders(state_dir, run_prefix(ti))]
    assert all(matches), run_folders(state_dir, run_prefix(ti))
    assert len({m.group(1) for m in matches}) <= 1, "run folders of more than one session"
    return [m.group(2) for m in matches]


def data_files(folder: Path, suffix: str) -> list[Path]:
    """Committed output files (paths under ``_temporary`` or ``_spark_metadata`` are not data)."""
    return sorted(f for f in folder.rglob(f"*{suffix}") if not any(p.startswith("_") for p in f.relative_to(folder).parts))


def lake_ids(folder: Path) -> list[int]:
    import pyarrow.parquet as pq

    return sorted(i for f in data_files(folder, ".parquet") for i in pq.read_table(f).column("id").to_pylist())


def json_lines(folder: Path) -> list[dict]:
    return [json.loads(line) for f in data_files(folder, ".json") for line in f.read_text().splitlines() if line.strip()]


def committed_batches(state_dir: Path, destination: str) -> list[int]:
    folder = state_dir / "commits" / destination
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def assert_orders_exactly_once(orders: Path) -> None:
    """Every good order in the lake once, every bad record in the DLQ once (examples/orders/expected.json)."""
    expected = json.loads((orders / "expected.json").read_text())
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
    dlq = json_lines(orders / "out" / "dlq")
    assert len(dlq) == len(expected["dlq"])
    positions = sorted((Path(r["source_file"]).name, r["source_position"]) for r in dlq)
    assert positions == sorted((r["file"], r["line"]) for r in expected["dlq"])


def assert_audit_log_continuous(events: list[dict], *, earlier: list[dict] = ()) -> None:
    """One story with no gap and no repeat: started first, in time order, no event twice, every restart
    planned before it happened, and what was seen earlier still there as its beginning."""
    assert events and events[0]["event"] == "started"
    assert [e["event"] for e in events].count("started") == 1
    times = [parse_iso(e["at"]) for e in events]
    assert times == sorted(times), "audit log out of time order"
    keys = [json.dumps(e, sort_keys=True) for e in events]
    assert len(set(keys)) == len(keys), "an audit event recorded twice"
    pending = 0
    for event in events:
        if event["event"] == "restart-scheduled":
            pending += 1
        elif event["event"] == "restarted":
            assert pending == 1, "a restart without its restart-scheduled decision"
            pending -= 1
    earlier = list(earlier)
    assert events[: len(earlier)] == earlier, "the audit log lost or rewrote events it had"


DRIVER_PROCESS_KINDS = {  # the long-lived processes of a local run, by what their command line runs
    "airflow_conduit.hooks.backends.detached": "wrapper",
    "org.apache.spark.deploy.SparkSubmit": "spark-submit JVM",
    "airflow_conduit/spark/entrypoint.py": "Python driver",
}


def driver_processes(handle: dict) -> set[tuple[str, int, float]]:
    """(kind, pid, start time) of the run's wrapper, spark-submit JVM and Python driver while they live
    (Spark's short-lived Python workers are left out: they come and go with the batches)."""
    marker = lease.run_marker(handle["state_dir"], handle["run_id"])
    found = set()
    for proc in lease.run_processes(handle["pid"], marker):
        try:
            command = " ".join(proc.cmdline())
            kind = next((k for needle, k in DRIVER_PROCESS_KINDS.items() if needle in command), None)
            if kind:
                found.add((kind, proc.pid, proc.create_time()))
        except psutil.Error:
            continue
    return found


def copy_orders(deployment, name: str) -> Path:
    target = deployment.root / name
    shutil.copytree(deployment.root / "examples" / "orders", target, ignore=shutil.ignore_patterns("out", "state*"))
    return target


def wait_run_finished(deployment, dag_id: str, run_id: str, timeout: float = RUN_DEADLINE) -> dict:
    return wait_for(lambda: (run := deployment.api.dag_run(dag_id, run_id))["state"] in FINISHED and run,
                    f"DAG run {dag_id}/{run_id} to finish", timeout, interval=2,
                    check=lambda: deployment.check_running("api-server", "scheduler"))


# -- 1. the bounded reference DAG as the scheduler runs it ---------------------------------------------


@pytest.fixture(scope="module")
def bounded_run(deployment):
    """Unpaused, the hourly DAG gets its scheduled run (defaults: the orders copy, STATE_ROOT/orders); it ends."""
    api = deployment.api
    api.unpause(ORDERS_DAG)
    [run] = wait_for(lambda: api.dag_runs(ORDERS_DAG), "the scheduled run", STEP_DEADLINE, interval=2)
    assert run["run_type"] == "scheduled"
    return wait_run_finished(deployment, ORDERS_DAG, run["dag_run_id"])


def test_the_bounded_reference_dag_runs_on_its_schedule_exactly_once(deployment, bounded_run):
    api = deployment.api
    run = bounded_run
    assert run["state"] == "success"

    ti = api.task_instance(ORDERS_DAG, run["dag_run_id"], ORDERS_TASK)
    summary = api.xcom(ORDERS_DAG, run["dag_run_id"], ORDERS_TASK, "return_value")
    state_dir = deployment.state_root / "orders"
    assert summary["status"] == "succeeded" and summary["submissions"] == 1
    assert summary["state_dir"] == str(state_dir)
    assert submissions_of_one_session(state_dir, ti) == ["s01"]
    assert_audit_log_continuous(summary["audit_log"])
    assert [e["event"] for e in summary["audit_log"]] == ["started", "stopped"]  # available-now: done
    assert not lease.is_held(lease.lease_path(state_dir))  # the driver is gone
    assert_orders_exactly_once(deployment.root / "examples" / "orders")


def test_the_alert_dag_sensors_defer_on_the_triggerers_and_alert_on_the_real_dlq(deployment, bounded_run):
    """conduit_dlq_alert, triggered by hand (no logical date: it counts the hour before the run) with
    threshold 3 on the bounded run's state dir: its 7 DLQ records fire the DLQ alert; the pipeline is not
    degraded, so that sensor stays deferred on a triggerer (no worker slot held)."""
    api = deployment.api
    expected_dlq = len(json.loads((deployment.root / "examples" / "orders" / "expected.json").read_text())["dlq"])
    api.unpause(ALERT_DAG)
    run = api.post(f"/dags/{ALERT_DAG}/dagRuns", {
        "logical_date": None, "conf": {"state_dir": str(deployment.state_root / "orders"), "threshold": 3}})
    run_id = run["dag_run_id"]
    wait_for(lambda: api.task_state(ALERT_DAG, run_id, "alert_dlq") in ("success", "failed"), "the DLQ alert",
             STEP_DEADLINE, interval=2, check=lambda: deployment.check_running("scheduler"))
    assert api.task_state(ALERT_DAG, run_id, "alert_dlq") == "success"
    assert api.xcom(ALERT_DAG, run_id, "dlq_over_threshold", "return_value") == expected_dlq
    assert f"{expected_dlq} records went to the dead letter queue" in api.xcom(ALERT_DAG, run_id, "alert_dlq", "return_value")
    wait_for(lambda: api.task_state(ALERT_DAG, run_id, "pipeline_degraded") == "deferred",
             "the degraded sensor deferred", STEP_DEADLINE, interval=2)
    wait_for(lambda: deployment.triggerer_of(ALERT_DAG, run_id, "pipeline_degraded"), "a triggerer to run the sensor's trigger",
             STEP_DEADLINE, interval=2)
    api.unpause(ALERT_DAG, paused=True)


# -- 2. the continuous reference DAG: a trigger move, then a stop by marking the task ------------------


@pytest.fixture(scope="module")
def continuous_run(deployment):
    """The continuous DAG, unpaused: its run's task deferred on a driver that has committed a batch."""
    api = deployment.api
    state_dir = deployment.state_root / "events"
    api.unpause(EVENTS_DAG)
    [run] = wait_for(lambda: api.dag_runs(EVENTS_DAG), "the continuous run", STEP_DEADLINE, interval=2)
    run_id = run["dag_run_id"]
    wait_for(lambda: api.task_state(EVENTS_DAG, run_id, EVENTS_TASK) == "deferred", "the task deferred",
             STEP_DEADLINE, interval=2, check=deployment.check_running)
    wait_for(lambda: committed_batches(state_dir, "events-out"), "a committed batch", STEP_DEADLINE, interval=2,
             check=deployment.check_running)
    return {"run_id": run_id, "state_dir": state_dir}


def test_a_triggerer_killed_mid_watch_hands_the_trigger_over_without_touching_the_spark_job(deployment, continuous_run):
    run_id, state_dir = continuous_run["run_id"], continuous_run["state_dir"]
    record = recovery(state_dir)
    handle = record["current"]
    assert record["pipeline_state"] == "running" and record["submissions"] == 1
    drivers = driver_processes(handle)
    assert sorted(kind for kind, _, _ in drivers) == sorted(DRIVER_PROCESS_KINDS.values())  # one of each

    holder, holder_job = wait_for(lambda: deployment.triggerer_of(EVENTS_DAG, run_id, EVENTS_TASK),
                                  "a triggerer to run the trigger", STEP_DEADLINE, interval=2)
    other = {"triggerer-a": "triggerer-b", "triggerer-b": "triggerer-a"}[holder]
    audit_before = audit_log(state_dir)
    deployment.components[holder].kill()  # SIGKILL, the whole process group

    def moved():
        found = deployment.triggerer_of(EVENTS_DAG, run_id, EVENTS_TASK)
        assert driver_processes(handle) >= drivers, "a driver process ended while the trigger moved"
        return found if found and found[0] == other else None

    wait_for(moved, f"{other} to take the trigger over", STEP_DEADLINE, interval=2,
             check=lambda: deployment.check_running(other, "scheduler"))
    batches_at_move = committed_batches(state_dir, "events-out")
    wait_for(lambda: len(committed_batches(state_dir, "events-out")) > len(batches_at_move),
             "a batch committed after the move", STEP_DEADLINE, interval=2)

    after = recovery(state_dir)
    assert after["current"]["run_id"] == handle["run_id"] and after["submissions"] == 1  # no second submission
    assert run_folders(state_dir, "") == [handle["run_id"]]
    assert driver_processes(handle) >= drivers  # the same processes (pid and start time) still run
    assert not Path(handle["exit_path"]).exists()
    assert api_state(deployment, run_id) == "deferred"
    assert_audit_log_continuous(audit_log(state_dir), earlier=audit_before)
    assert [e["event"] for e in audit_log(state_dir)] == ["started"]  # nothing failed, nothing restarted

    deployment.components[holder].start()  # back to two triggerers for what follows
    wait_for(lambda: deployment.query("SELECT 1 FROM job WHERE job_type = 'TriggererJob' AND hostname = %s "
                                      "AND state = 'running' AND id > %s", (holder, holder_job)),
             f"{holder} running again", STEP_DEADLINE, interval=2, check=lambda: deployment.check_running(holder))


def trigger_log_lines(deployment, dag_id: str, text: str) -> list[str]:
    """Lines of the task's trigger logs (written by the triggerers) that contain ``text``."""
    folder = deployment.root / "airflow-home" / "logs" / f"dag_id={dag_id}"
    return [line for f in sorted(folder.rglob("*.log.trigger.*.log")) for line in f.read_text(errors="replace").splitlines()
            if text in line]


def test_a_trigger_taken_from_a_live_triggerer_is_cancelled_there_without_stopping_the_job(deployment, continuous_run):
    """The move Airflow cancels like a user action (apache/airflow#73454): the triggerer holding the trigger
    freezes (SIGSTOP) past the health check threshold, the other takes the trigger over; when the frozen one
    resumes (SIGCONT) it cancels its copy and calls on_kill, which reads the task state (deferred) through
    the Execution API and leaves the job alone."""
    run_id, state_dir = continuous_run["run_id"], continuous_run["state_dir"]
    handle = recovery(state_dir)["current"]
    drivers = driver_processes(handle)
    assert drivers
    holder, _ = wait_for(lambda: deployment.triggerer_of(EVENTS_DAG, run_id, EVENTS_TASK),
                         "a triggerer to run the trigger", STEP_DEADLINE, interval=2)
    other = {"triggerer-a": "triggerer-b", "triggerer-b": "triggerer-a"}[holder]
    moved_before = len(trigger_log_lines(deployment, EVENTS_DAG, "trigger moved to another triggerer"))
    frozen = deployment.components[holder]
    frozen.kill(signal.SIGSTOP)
    try:
        wait_for(lambda: (found := deployment.triggerer_of(EVENTS_DAG, run_id, EVENTS_TASK)) and found[0] == other,
                 f"{other} to take the trigger from the frozen {holder}", STEP_DEADLINE, interval=2,
                 check=lambda: deployment.check_running(other))
    finally:
        frozen.kill(signal.SIGCONT)
    wait_for(lambda: len(trigger_log_lines(deployment, EVENTS_DAG, "trigger moved to another triggerer")) > moved_before,
             f"{holder} to cancel its copy (on_kill: trigger moved)", STEP_DEADLINE, interval=2,
             check=lambda: deployment.check_running(holder, other))
    assert not trigger_log_lines(deployment, EVENTS_DAG, "cannot tell a user stop from a trigger move")
    assert not trigger_log_lines(deployment, EVENTS_DAG, "stopping run")

    batches = committed_batches(state_dir, "events-out")
    wait_for(lambda: len(committed_batches(state_dir, "events-out")) > len(batches), "a batch committed after on_kill",
             STEP_DEADLINE, interval=2)
    assert driver_processes(handle) >= drivers and not Path(handle["exit_path"]).exists()
    record = recovery(state_dir)
    assert record["pipeline_state"] == "running" and record["current"]["run_id"] == handle["run_id"]
    assert record["submissions"] == 1 and run_folders(state_dir, "") == [handle["run_id"]]
    assert api_state(deployment, run_id) == "deferred"


def api_state(deployment, run_id: str) -> str | None:
    return deployment.api.task_state(EVENTS_DAG, run_id, EVENTS_TASK)


def test_marking_the_continuous_task_success_stops_the_driver_and_records_stopped(deployment, continuous_run):
    run_id, state_dir = continuous_run["run_id"], continuous_run["state_dir"]
    api = deployment.api
    handle = recovery(state_dir)["current"]
    assert driver_processes(handle)
    api.unpause(EVENTS_DAG, paused=True)  # @continuous: no next run on this state dir once this one ends
    api.patch(f"/dags/{EVENTS_DAG}/dagRuns/{run_id}/taskInstances/{EVENTS_TASK}", {"new_state": "success"})

    marker = lease.run_marker(handle["state_dir"], handle["run_id"])
    wait_for(lambda: not lease.run_processes(handle["pid"], marker), "every process of the Spark run to end",
             STEP_DEADLINE, interval=2)
    wait_for(lambda: recovery(state_dir).get("pipeline_state") == "stopped", "recovery.json to say stopped",
             STEP_DEADLINE, interval=2)
    record = recovery(state_dir)
    assert record["current"] is None and record["submissions"] == 1
    events = audit_log(state_dir)
    assert_audit_log_continuous(events)
    assert [e["event"] for e in events] == ["started", "stopped"]
    assert "stopped by user" in events[-1]["message"]
    assert not lease.is_held(lease.lease_path(state_dir))
    assert api_state(deployment, run_id) == "success"
    # The Pipeline tab says so too, although the task's XCom was last written while it ran.
    view = api.page("/conduit/ti", dag_id=EVENTS_DAG, run_id=run_id, task_id=EVENTS_TASK, map_index="-1")
    assert 'class="badge state-stopped"' in view and 'class="badge state-running"' not in view

    # The driver stopped gracefully (SIGTERM): its report names the stop, and the outputs match it.
    report = json.loads(Path(handle["report_path"]).read_text())
    assert report["stop_reason"] and report["ended_at"]
    totals = report["totals"]
    written = len(json_lines(state_dir / "out" / "events"))
    dead = len(json_lines(state_dir / "out" / "dlq"))
    assert written == totals["written"]["events-out"] and dead == totals["dlq"]  # nothing lost, nothing twice
    assert totals["read"] == written + dead + totals["filtered"] and written > 0


# -- 3. the scheduler SIGKILLed while the task is deferred ---------------------------------------------


def test_a_scheduler_killed_during_deferral_and_restarted_submits_once_per_restart_decision(deployment):
    """The first run fails (transient, injected) and is restarted once; the scheduler is SIGKILLed while
    the task is deferred on the second run (real Spark) and stays down until that run has ended."""
    api = deployment.api
    orders = copy_orders(deployment, "orders-scheduler-kill")
    state_dir = deployment.state_root / "orders-scheduler-kill"
    api.unpause(ORDERS_DAG)
    run = api.post(f"/dags/{ORDERS_DAG}/dagRuns", {
        "logical_date": None,
        "conf": {"spec": str(orders / "pipeline.yaml"), "state_dir": str(state_dir), "faults": {"transient_first_runs": 1}},
    })
    run_id = run["dag_run_id"]

    def deferred_on_second_run():
        current = recovery(state_dir).get("current") or {}
        return (current.get("run_id", "").endswith("-s02") and api.task_state(ORDERS_DAG, run_id, ORDERS_TASK) == "deferred"
                and driver_processes(current) and current)

    handle = wait_for(deferred_on_second_run, "the task deferred on run s02", RUN_DEADLINE, interval=1,
                      check=deployment.check_running)
    audit_before = audit_log(state_dir)
    deployment.components["scheduler"].kill()  # SIGKILL, with its LocalExecutor workers

    # The job ends while no scheduler runs; the triggerer hands the event over (the task is scheduled).
    wait_for(lambda: Path(handle["exit_path"]).exists(), "run s02 to end", STEP_DEADLINE, interval=2)
    wait_for(lambda: api.task_state(ORDERS_DAG, run_id, ORDERS_TASK) == "scheduled", "the trigger's event",
             STEP_DEADLINE, interval=2)
    assert len(run_folders(state_dir, "")) == 2  # nothing submitted while the scheduler was down

    deployment.components["scheduler"].start()
    run = wait_run_finished(deployment, ORDERS_DAG, run_id)
    assert run["state"] == "success"

    summary = api.xcom(ORDERS_DAG, run_id, ORDERS_TASK, "return_value")
    events = summary["audit_log"]
    kinds = [e["event"] for e in events]
    assert kinds.count("failed") == 1 and kinds.count("restart-scheduled") == 1 and kinds.count("restarted") == 1
    assert summary["submissions"] == 1 + kinds.count("restarted") == 2  # one submission per restart decision
    assert summary["run_id"] == handle["run_id"]
    ti = api.task_instance(ORDERS_DAG, run_id, ORDERS_TASK)
    assert submissions_of_one_session(state_dir, ti) == ["s01", "s02"]
    assert_audit_log_continuous(events, earlier=audit_before)
    assert events == audit_log(state_dir)
    assert not lease.is_held(lease.lease_path(state_dir))
    assert_orders_exactly_once(orders)
