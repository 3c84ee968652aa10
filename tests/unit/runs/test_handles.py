"""JobHandle (runs/handles.py): a typed, frozen job handle whose dict form round-trips, and which reads the
handles earlier versions stored (task state, XCom, recovery.json, deferred triggers' kwargs)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_conduit.runs.handles import JobHandle, JobHandleError, backend_of, optional_handle

LOCAL = {  # as the local backend stores it
    "backend": "local", "run_id": "p-s01", "state_dir": "/state", "report_path": "/state/runs/p-s01/report.json",
    "log_path": "/state/runs/p-s01/driver.log", "exit_path": "/state/runs/p-s01/exit.json",
    "lease_path": "/state/driver.lease", "pid": 4242, "pid_started": 1765000000.25,
    "submitted_at": "2026-12-07T08:00:00+00:00", "spark_ui": "http://127.0.0.1:4040",
}
STANDALONE = {  # as the standalone backend stores it
    "backend": "standalone", "run_id": "p-s02", "state_dir": "/state", "report_path": "/state/runs/p-s02/report.json",
    "driver_id": "driver-20261207080000-0001", "rest_endpoint": "http://master:6066", "master": "spark://master:7077",
    "submitted_at": "2026-12-07T08:00:00+00:00", "spark_ui": "http://master:8080", "conn_id": "spark_default",
    "rest_retry": {"limit": 5, "delay": 1.0, "max_delay": 10.0},
}


@pytest.mark.parametrize("stored", [LOCAL, STANDALONE])
def test_the_dict_form_round_trips_through_json(stored):
    handle = JobHandle.from_dict(stored)
    assert handle.to_dict() == stored
    assert JobHandle.from_dict(json.loads(json.dumps(handle.to_dict()))) == handle


def test_a_handle_is_frozen():
    handle = JobHandle.from_dict(LOCAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        handle.pid = 1  # type: ignore[misc]


def test_a_handle_stored_by_an_earlier_version_with_the_launcher_key_is_read():
    """Task state, XCom and deferred triggers keep handles across an upgrade: ``launcher`` was ``backend``'s name;
    those handles also wrote every key, unset ones as null."""
    earlier = {**{k: v for k, v in LOCAL.items() if k != "backend"}, "launcher": "local", "conn_id": None}
    handle = JobHandle.from_dict(earlier)
    assert handle == JobHandle.from_dict(LOCAL) and handle.backend == "local"
    assert "launcher" not in handle.to_dict()


@pytest.mark.parametrize("data, named", [
    ({**LOCAL, "carry": {}}, "unknown key(s) ['carry']"),
    ({k: v for k, v in LOCAL.items() if k != "report_path"}, "missing report_path"),
    ({k: v for k, v in LOCAL.items() if k != "backend"}, "missing backend"),
    ({**LOCAL, "run_id": ""}, "run_id: expected a non-empty string"),
    (["p-s01"], "expected a mapping, got list"),
])
def test_a_malformed_handle_is_refused_naming_the_key(data, named):
    with pytest.raises(JobHandleError) as raised:
        JobHandle.from_dict(data)
    assert named in str(raised.value)


def test_where_a_driver_runs_for_the_timeline():
    assert JobHandle.from_dict(LOCAL).where == "pid 4242"
    assert JobHandle.from_dict(STANDALONE).where == "driver-20261207080000-0001"


def test_a_stored_handle_may_be_absent():
    assert optional_handle(None) is None and optional_handle({}) is None
    assert optional_handle(LOCAL) == JobHandle.from_dict(LOCAL)


def test_backend_of_reads_a_handle_and_every_stored_form():
    """The UI plugin reads the handle in XCom as a dict."""
    assert backend_of(JobHandle.from_dict(STANDALONE)) == "standalone"
    assert backend_of({"run_id": "p-s01", "backend": "standalone"}) == "standalone"
    assert backend_of({"run_id": "p-s01", "launcher": "local"}) == "local"
    assert backend_of(None) is None and backend_of({}) is None
