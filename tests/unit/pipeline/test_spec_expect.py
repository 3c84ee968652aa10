"""The ``expect`` processor's rules are checked by the loader (no Spark) and counted by the run report."""

from __future__ import annotations

import copy

import pytest
import yaml

from airflow_conduit.pipeline import SpecError, load_pipeline_from_string
from airflow_conduit.runs.report import RunReport

from pipeline_spec_samples import MINIMAL

BASE = yaml.safe_load(MINIMAL)


def _spec_with(rules) -> str:
    data = copy.deepcopy(BASE)
    data["pipeline"]["processors"] = [{"id": "quality", "plugin": "expect", "settings": {"rules": rules}}]
    return yaml.safe_dump(data, sort_keys=False)


def test_rules_are_loaded_with_warn_as_the_default_action():
    spec = load_pipeline_from_string(
        _spec_with([{"name": "positive", "condition": "amount > 0", "action": "DROP"}, {"name": "named", "condition": "name IS NOT NULL"}]),
        "spec.yaml", env={},
    )
    assert spec.processors[0].settings["rules"] == [
        {"name": "positive", "condition": "amount > 0", "action": "drop"},
        {"name": "named", "condition": "name IS NOT NULL", "action": "warn"},
    ]


@pytest.mark.parametrize(
    "rules,fragment",
    [
        ([], "non-empty list of rules"),
        ([{"name": "a", "condition": "(amount > 0", "action": "drop"}], "rule 'a': condition: not a valid Spark SQL expression"),
        ([{"name": "a", "condition": "x > 0", "action": "stop"}], "rule 'a': 'action' must be one of warn, drop, fail"),
        ([{"name": "a", "condition": "x > 0"}, {"name": "a", "condition": "y > 0"}], "rule 'a': the name is used twice"),
        ([{"name": "a"}], "rule 'a': missing 'condition'"),
        ([{"name": "a b", "condition": "x"}], "rule 1: 'name' must be"),
        ([{"name": "a", "condition": "x", "when": "y"}], "rule 1: unknown key 'when'"),
    ],
)
def test_a_wrong_rule_is_refused_naming_the_file_the_key_and_the_rule(rules, fragment):
    with pytest.raises(SpecError) as info:
        load_pipeline_from_string(_spec_with(rules), "spec.yaml", env={})
    [problem] = info.value.problems
    assert problem.file == "spec.yaml" and problem.key_path == "pipeline.processors[0].settings.rules"
    assert fragment in problem.message


def test_the_report_keeps_expectation_counts_per_batch_and_in_total():
    report = RunReport(pipeline_id="p", run_id="r")
    for batch_id, failed in ((0, 1), (1, 2)):
        report.add_batch(batch_id, read=5, filtered=0, dlq=failed, written={"out": 5 - failed})
        report.add_expectations({"quality": {"positive": {"action": "drop", "passed": 5 - failed, "failed": failed}}})
    assert report.batches[1]["expectations"] == {"quality": {"positive": {"action": "drop", "passed": 3, "failed": 2}}}
    assert report.totals["expectations"] == {"quality": {"positive": {"action": "drop", "passed": 7, "failed": 3}}}
    again = RunReport.from_dict(report.to_dict())
    assert again.totals["expectations"] == report.totals["expectations"]
