"""Expectations (the ``expect`` processor) on real local Spark: warn, drop, fail, NULL verdicts, counts, bad rules."""

from __future__ import annotations

import json

import pytest

from airflow_conduit.recovery import codes
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, read_json_rows, write_lines

pytestmark = pytest.mark.spark

NAMED = {"name": "named", "condition": "name IS NOT NULL", "action": "warn"}
POSITIVE = {"name": "positive", "condition": "amount > 0", "action": "drop"}


def _spec(tmp_path, rules, pid="expect", **source):
    return pipeline(
        pid,
        [file_source(tmp_path / "in", **source)],
        [file_dest(tmp_path / "out")],
        processors=[proc("quality", "expect", rules=rules)],
        dlq=dlq_file(tmp_path / "dlq", size=0),
    )


def test_warn_keeps_drop_quarantines_null_fails_and_every_rule_is_counted(spark, tmp_path):
    no_name = json.dumps({"id": 2, "name": None, "amount": 3.0})
    negative = json.dumps({"id": 3, "name": "c", "amount": -1.0})
    no_amount = json.dumps({"id": 4, "name": "d"})  # amount > 0 is NULL: counts as failed
    write_lines(tmp_path / "in", "a.json", [good(1), no_name, negative, no_amount, "{broken", good(5)])

    code, report = execute(spark, _spec(tmp_path, [NAMED, POSITIVE]), state_dir=tmp_path / "state", run_id="r1")

    assert code == 0, report.error
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 5]  # warn keeps record 2
    dlq = {r["source_position"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert sorted(dlq) == [3, 4, 5]  # the two dropped records and the unparsable line
    for position, line in ((3, negative), (4, no_amount)):
        assert dlq[position]["component_id"] == "quality" and dlq[position]["component_type"] == "expect"
        assert dlq[position]["exception_class"] == "airflow_conduit.spark.ExpectationFailed"
        assert dlq[position]["exception_message"].startswith("expectation 'positive' (drop) failed")
        as_read = {k: v for k, v in json.loads(line).items() if v is not None}  # the fields as read, as JSON
        assert json.loads(dlq[position]["record"]) == as_read
    assert dlq[5]["stage"] == "source"  # a source error never reaches the rules: not counted below
    expected = {"named": {"action": "warn", "passed": 4, "failed": 1}, "positive": {"action": "drop", "passed": 3, "failed": 2}}
    assert report.batches[0]["expectations"] == {"quality": expected}
    assert report.totals["expectations"] == {"quality": expected}
    # KIP-298 counters: dropped records are failures sent to the DLQ; warnings are not failures
    assert report.totals["dlq"] == report.counters["total-record-failures"] == 3
    assert report.counters["deadletterqueue-records-produced"] == 3


def test_fail_stops_after_the_batch_is_committed_naming_the_rule_and_the_first_offender(spark, tmp_path):
    rules = [NAMED, {"name": "positive", "condition": "amount > 0", "action": "fail"}]
    write_lines(tmp_path / "in", "a.json", [good(1), good(2)])
    b = write_lines(tmp_path / "in", "b.json", [good(3), json.dumps({"id": 4, "name": "x", "amount": -4.0}),
                                                json.dumps({"id": 5, "name": "y", "amount": -5.0})])
    write_lines(tmp_path / "in", "c.json", [good(6)])
    spec = _spec(tmp_path, rules, **{"max-files-per-trigger": 1})

    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")

    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.PROCESSOR and report.error["component_id"] == "quality"
    message = report.error["message"]
    assert "expectation 'positive'" in message and "2 record(s) of batch 1" in message
    assert f"first at record 2 of file:{b}" in message, message
    # the failing batch is committed: its good record written, the offenders in the DLQ; the next batch not started
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3]
    assert sorted(r["source_position"] for r in read_json_rows(spark, tmp_path / "dlq")) == [2, 3]
    assert [b["batch_id"] for b in report.batches] == [0, 1]

    # restarted after investigation: the stopped batch is not failed twice, the pipeline goes on, nothing is written twice
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r2")
    assert code == 0, report.error
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3, 6]
    assert len(read_json_rows(spark, tmp_path / "dlq")) == 2


@pytest.mark.parametrize(
    "condition,expected",
    [("amount >", "is not valid Spark SQL"), ("amount + 1", "gives double, not a boolean"), ("amout > 0", "amout")],
)
def test_a_bad_rule_is_refused_with_an_error_naming_it(spark, tmp_path, condition, expected):
    write_lines(tmp_path / "in", "a.json", [good(1)])
    rules = [NAMED, {"name": "broken-rule", "condition": condition, "action": "drop"}]

    code, report = execute(spark, _spec(tmp_path, rules), state_dir=tmp_path / "state", run_id="r1")

    assert code == codes.EXIT_INVALID_SPEC
    assert report.error["code"] == codes.INVALID_SPEC and report.error["component_id"] == "quality"
    assert "rule 'broken-rule'" in report.error["message"] and expected in report.error["message"]
    assert read_json_rows(spark, tmp_path / "out") == []
