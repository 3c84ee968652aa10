"""RunStore (runs/store.py): the one writer of a run's state, on real files; Airflow's task state store
and XCom are replaced by the smallest objects with their interface."""

from __future__ import annotations

import pytest

from airflow_conduit.names import STORE_KEY, XCOM_AUDIT, XCOM_STATE
from airflow_conduit.recovery import FakeClock, RecoveryOptions
from airflow_conduit.runs.events import WatchEvent
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.store import RunStore, record_stopped
from airflow_conduit.runs.supervisor import RunSupervisor

TASK = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}


class TaskStateStore:
    def __init__(self, broken: bool = False):
        self.values: dict = {}
        self.broken = broken

    def get(self, key):
        if self.broken:
            raise ConnectionError("api server unreachable")
        return self.values.get(key)

    def set(self, key, value):
        if self.broken:
            raise ConnectionError("api server unreachable")
        self.values[key] = value


def supervisor() -> RunSupervisor:
    return RunSupervisor(RecoveryOptions(), run_prefix="p", pipeline_id="orders", clock=FakeClock())


def test_save_writes_the_task_store_recovery_json_and_xcom(tmp_path):
    pushed = {}
    tasks = TaskStateStore()
    store = RunStore(str(tmp_path), TASK, task_store=tasks, publish=lambda key, value: pushed.__setitem__(key, value))
    sup = supervisor()
    store.save(sup)
    record = StateDir(tmp_path).read_recovery()
    assert record["owner"] == TASK and record["pipeline_state"] == "running" and record["carry"] == tasks.values[STORE_KEY]
    assert pushed[XCOM_STATE] == "running" and type(pushed[XCOM_STATE]) is str and pushed[XCOM_AUDIT][0]["event"] == "started"
    assert store.load() == sup.carry()


def test_a_broken_task_store_falls_back_to_recovery_json(tmp_path):
    store = RunStore(str(tmp_path), TASK, task_store=TaskStateStore(broken=True))
    sup = supervisor()
    store.save(sup)
    assert store.load() == sup.carry()


@pytest.mark.parametrize("task_store", [TaskStateStore(), None])
def test_a_lease_refusal_leaves_the_holders_recovery_json_alone(tmp_path, task_store):
    holder = RunStore(str(tmp_path), {"cli": True, "pid": 1})
    holder.save(supervisor())
    before = (tmp_path / "recovery.json").read_bytes()
    refused = WatchEvent.submission_refused("p-s01", RuntimeError("leased"), by_lease=True)
    RunStore(str(tmp_path), TASK, task_store=task_store).save(supervisor(), refused)
    assert (tmp_path / "recovery.json").read_bytes() == before


def test_a_lease_refusal_still_updates_this_owners_own_file(tmp_path):
    store = RunStore(str(tmp_path), TASK, task_store=TaskStateStore())
    sup = supervisor()
    store.save(sup)
    sup.stop("not submitted")
    store.save(sup, WatchEvent.submission_refused("p-s02", RuntimeError("leased"), by_lease=True))
    assert StateDir(tmp_path).pipeline_state() == "stopped"


def test_record_stopped_wins_over_the_task_store_when_the_stopped_run_is_current(tmp_path):
    tasks = TaskStateStore()
    store = RunStore(str(tmp_path), TASK, task_store=tasks)
    sup = supervisor()
    sup.current = JobHandle("local", "p-s01", str(tmp_path), str(tmp_path / "runs" / "p-s01" / "report.json"), pid=42)
    store.save(sup)
    record_stopped(str(tmp_path), "p-s99", "stopped by user")  # not the current run: nothing happens
    assert StateDir(tmp_path).pipeline_state() == "running"
    record_stopped(str(tmp_path), "p-s01", "stopped by user")
    assert StateDir(tmp_path).pipeline_state() == "stopped"
    carry = store.load()
    assert carry["current"] is None and carry["recovery"]["pipeline_state"] == "stopped"
