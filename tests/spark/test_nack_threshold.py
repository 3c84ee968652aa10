"""The DLQ nack window stops the pipeline as fatal (2300) once the threshold is exceeded, losing nothing."""

from __future__ import annotations

import pytest

from airflow_conduit.recovery import codes
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark


def test_threshold_exceeded_is_fatal_2300_and_the_nacked_records_are_in_the_dlq(spark, tmp_path):
    src = tmp_path / "in"
    write_lines(src, "0.json", [good(1), good(2)])
    write_lines(src, "1.json", [good(3), "{bad", good(4), "{bad too"])
    write_lines(src, "2.json", [good(5), "{bad again"])
    # window of 3 records tolerating 1 nack: batch 1 has 2 nacks within 3 records -> exceeded there
    spec = pipeline(
        "nacks",
        [file_source(src, **{"max-files-per-trigger": 1})],
        [file_dest(tmp_path / "out")],
        dlq=dlq_file(tmp_path / "dlq", size=3, threshold=1),
    )
    state = tmp_path / "state"
    code, report = execute(spark, spec, state_dir=state, run_id="r1")

    assert code == codes.EXIT_FATAL == 70
    assert report.status == "failed"
    assert report.error["code"] == codes.DLQ_NACK_THRESHOLD and report.error["fatal"] is True
    assert report.error["stage"] == "dlq" and "window-nack-threshold 1" in report.error["message"]
    assert [b["batch_id"] for b in report.batches] == [0, 1]  # stopped after the crossing batch, before batch 2
    # the crossing batch was handled completely: its good records written, its nacked ones in the DLQ
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3, 4]
    assert sorted(r["source_position"] for r in read_json_rows(spark, tmp_path / "dlq")) == [2, 4]
    assert report.counters["deadletterqueue-records-produced"] == 2

    # a restart (the operator's decision) resumes after the crossing batch instead of failing on it again,
    # and the window still remembers: batch 2's nack comes within 3 records of batch 1's -> fatal again
    code2, report2 = execute(spark, spec, state_dir=state, run_id="r2")
    assert code2 == 70 and report2.error["code"] == codes.DLQ_NACK_THRESHOLD
    assert [b["batch_id"] for b in report2.batches] == [1, 2]
    assert report2.batches[0].get("replayed") is True
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3, 4, 5]
    assert sorted(r["source_position"] for r in read_json_rows(spark, tmp_path / "dlq")) == [2, 2, 4]


def test_default_dlq_settings_stop_at_the_first_nack(spark, tmp_path):
    src = tmp_path / "in"
    write_lines(src, "0.json", [good(1), "not json", good(3)])
    spec = pipeline("first-nack", [file_source(src)], [file_dest(tmp_path / "out")])  # builtin:log DLQ, window 1/0
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 70 and report.error["code"] == 2300
    assert report.totals == {"read": 3, "filtered": 0, "dlq": 1, "written": {"out": 2},
                             "dlq_kinds": {"in": {"source": {"airflow_conduit.spark.MalformedRecordError": 1}}}}
    assert report.counters["total-record-failures"] == 1 and report.counters["last-failure-timestamp"]
