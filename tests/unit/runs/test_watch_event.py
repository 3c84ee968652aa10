"""WatchEvent (runs/events.py): the watcher's event as a typed value; its dict form round-trips, and a
malformed one is refused naming the key."""

from __future__ import annotations

import json

import pytest

from airflow_conduit.runs.events import WatchEvent, WatchEventError
from airflow_conduit.runs.status import WatchStatus

HANDLE = {"run_id": "p-s01", "backend": "local", "state_dir": "/state", "report_path": "/state/runs/p-s01/report.json"}
FULL = {
    "status": "failed", "run_id": "p-s01", "handle": HANDLE, "exit_code": 75, "driver_state": None,
    "message": "", "error": {"code": 1500, "fatal": False, "message": "boom"}, "stderr_tail": "Traceback ...",
    "report": {"totals": {"read": 3}},
}


def test_dict_form_round_trips_through_json_with_plain_string_status():
    event = WatchEvent.from_dict(FULL)
    assert event.status is WatchStatus.FAILED and event.status == "failed"
    data = event.to_dict()
    assert data == FULL and type(data["status"]) is str
    assert WatchEvent.from_dict(json.loads(json.dumps(data))) == event


def test_digest_leaves_out_the_log_tail_and_the_handle():
    digest = WatchEvent.from_dict(FULL).digest()
    assert "stderr_tail" not in digest and "handle" not in digest and digest["error"]["message"] == "boom"


@pytest.mark.parametrize("data, named", [
    ({**FULL, "status": "exploded"}, "status: expected one of"),
    ({**FULL, "run_id": ""}, "run_id: expected a non-empty string"),
    ({**FULL, "exit_code": "75"}, "exit_code: expected an integer"),
    ({**FULL, "exit_code": True}, "exit_code: expected an integer"),
    ({**FULL, "error": "boom"}, "error: expected dict or null, got str"),
    ({**FULL, "report": []}, "report: expected dict or null, got list"),
    ({**FULL, "handle": {**HANDLE, "run_id": "p-s02"}}, "handle: about run 'p-s02'"),
    ({**FULL, "carry": {}}, "unknown key(s) ['carry']"),
    ({k: v for k, v in FULL.items() if k != "run_id"}, "run_id: missing"),
    ({k: v for k, v in FULL.items() if k != "status"}, "status: missing"),
    ("failed", "expected a watch event (a mapping), got str"),
    (None, "expected a watch event (a mapping), got NoneType"),
])
def test_a_malformed_event_is_refused_naming_the_key(data, named):
    with pytest.raises(WatchEventError) as raised:
        WatchEvent.from_dict(data)
    assert named in str(raised.value)


def test_a_refused_submission_is_a_transient_infrastructure_failure_that_says_whether_the_lease_refused_it():
    lease = WatchEvent.submission_refused("p-s02", RuntimeError("leased by run x"), by_lease=True)
    assert (lease.status, lease.handle, lease.refused_by_lease) == (WatchStatus.FAILED, None, True)
    assert lease.error["code"] == 1400 and lease.error["fatal"] is False
    assert lease.error["message"] == "not submitted: RuntimeError: leased by run x"
    other = WatchEvent.submission_refused("p-s02", OSError("unreachable"))
    assert not other.refused_by_lease
    assert WatchEvent.from_dict(lease.to_dict()) == lease
