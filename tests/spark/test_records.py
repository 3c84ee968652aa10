"""Per-record errors: every bad record lands in the DLQ with its stage and context; the counts add up."""

from __future__ import annotations

import json

import pytest

from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, read_json_rows, write_lines

pytestmark = pytest.mark.spark


def test_bad_records_go_to_the_dlq_with_stage_and_context(spark, tmp_path):
    src = tmp_path / "in"
    write_lines(src, "a.json", [
        good(1),
        '{"id": 2, "name": "n2", "amount": 3',          # malformed JSON (line 2)
        '{"id": "three", "name": "n3", "amount": 1}',   # wrong type
        '{"name": "no id", "amount": 2.5}',              # missing required field
        good(5).replace("n5", "boom5"),                  # custom processor raises
        good(6).replace("n6", "drop6"),                  # custom processor drops it
        good(7),
        '[1, 2]',                                        # valid JSON, not an object
        good(9).replace('"amount": 13.5', '"amount": -1'),  # filtered by the filter processor
    ])
    spec = pipeline(
        "records",
        [file_source(src)],
        [file_dest(tmp_path / "out")],
        processors=[
            proc("keep-positive", "filter", condition="amount >= 0"),
            proc("tagger", "custom", function="conduit_test_functions:tag_or_fail"),
            proc("currency", "field.set", field="currency", value="'EUR'"),
        ],
        dlq=dlq_file(tmp_path / "dlq", size=0, include_configs=True),
    )
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    written = read_json_rows(spark, tmp_path / "out")
    assert sorted(r["id"] for r in written) == [1, 7]
    assert {r["tag"] for r in written} == {"t-1", "t-7"}
    assert {r["currency"] for r in written} == {"EUR"}

    dlq = {(r["source_position"]): r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert sorted(dlq) == [2, 3, 4, 5, 8]
    assert dlq[2]["stage"] == "source" and dlq[2]["exception_class"].endswith("MalformedRecordError")
    assert dlq[3]["stage"] == "source" and dlq[3]["exception_class"].endswith("WrongTypeError")
    assert "id" in dlq[3]["exception_message"]
    assert dlq[4]["exception_class"].endswith("MissingFieldError") and "id" in dlq[4]["exception_message"]
    assert dlq[8]["exception_class"].endswith("MalformedRecordError")
    boom = dlq[5]
    assert boom["stage"] == "processor" and boom["component_id"] == "tagger" and boom["component_type"] == "custom"
    assert boom["exception_class"] == "ValueError" and "boom5" in boom["exception_message"]
    assert "Traceback" in boom["exception_stacktrace"]
    assert json.loads(boom["record"])["name"] == "boom5"  # include-messages: the original record
    assert json.loads(boom["configs"])["settings"]["function"] == "conduit_test_functions:tag_or_fail"
    for row in dlq.values():
        assert row["pipeline_id"] == "records" and row["run_id"] == "r1" and row["batch_id"] == 0
        assert row["source_id"] == "in" and row["source_file"].endswith("a.json") and row["attempt"] == 1

    totals = report.totals
    assert totals["read"] == 9
    assert totals["dlq"] == 5 and totals["filtered"] == 2 and totals["written"] == {"out": 2}
    assert totals["read"] == totals["dlq"] + totals["filtered"] + totals["written"]["out"]
    assert report.counters["total-record-failures"] == 5
    assert report.counters["deadletterqueue-records-produced"] == 5
    assert report.status == "succeeded" and report.first_record_written_at is not None
