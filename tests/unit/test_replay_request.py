"""The replay request (filters, dry run) the operator hands to the Spark job: checked, named errors, round trip."""

from __future__ import annotations

import pytest

from airflow_conduit.pipeline.replay_request import ReplayFilter, ReplayRequest, ReplayRequestError


def test_rendered_template_values_become_filters():
    filters = ReplayFilter.from_mapping({
        "stages": "source, processor", "components": '["in"]', "rules": None, "exception_classes": "None",
        "batch_min": "2", "batch_max": 5, "since": "2026-11-01T10:00:00Z", "until": "",
    })
    assert filters == ReplayFilter(stages=("source", "processor"), components=("in",), batch_min=2, batch_max=5,
                                   since="2026-11-01T10:00:00.000000Z")
    assert filters.to_dict() == {"stages": ["source", "processor"], "components": ["in"], "batch_min": 2, "batch_max": 5,
                                 "since": "2026-11-01T10:00:00.000000Z"}


def test_request_round_trips_as_the_jobs_replay_argument():
    request = ReplayRequest(ReplayFilter(rules=("positive",), until="2026-11-02T00:00:00.000000Z"), dry_run=True)
    assert ReplayRequest.from_json(request.to_json()) == request
    assert ReplayRequest.from_json('{"filters": {}, "dry_run": "False"}') == ReplayRequest()
    forced = ReplayRequest(force=True)
    assert ReplayRequest.from_json(forced.to_json()) == forced and '"force": true' in forced.to_json()
    assert "force" not in ReplayRequest().to_json()  # a job of an earlier version reads it unchanged
    with pytest.raises(ReplayRequestError, match="force"):
        ReplayRequest.from_json('{"force": "sometimes"}')


@pytest.mark.parametrize(
    "values, named",
    [
        ({"since": "yesterday"}, "since"),
        ({"batch_min": "two"}, "batch_min"),
        ({"stages": "[oops"}, "stages"),
        ({"stages": [1]}, "stages"),
        ({"stage": "source"}, "unknown key(s) ['stage']"),
        ({"batch_min": 5, "batch_max": 2}, "batch_min 5 is greater than batch_max 2"),
        ({"since": "2026-11-02", "until": "2026-11-01"}, "is not before until"),
    ],
)
def test_a_bad_filter_is_refused_naming_the_key(values, named):
    with pytest.raises(ReplayRequestError, match="replay filters: ") as refused:
        ReplayFilter.from_mapping(values)
    assert named in str(refused.value)


def test_a_bad_request_is_refused_naming_the_option():
    with pytest.raises(ReplayRequestError, match="--replay: not JSON"):
        ReplayRequest.from_json("{")
    with pytest.raises(ReplayRequestError, match="--replay: dry_run: expected true or false"):
        ReplayRequest.from_json('{"dry_run": "maybe"}')
