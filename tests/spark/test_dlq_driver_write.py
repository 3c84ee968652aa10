"""A file DLQ written by the driver holds exactly what Spark's write of the same batch held.

The pass brings a batch's DLQ entries to the driver; a local json or parquet DLQ is then written from there
(``spark/local_batch_files.py``) instead of by a Spark job. The same pipeline runs twice on the same files, once
so and once with that path switched off (the Spark write), and both DLQs are read back with Spark: every column
of every row must be the same but the time of the error. The corpus has a source's reader rejections (malformed,
wrong type, missing field), a processor's failures, a CSV source, include-configs, and a batch whose rejected line
is too long for its reason to be worked out in the pass: that batch keeps the Spark write.
"""

from __future__ import annotations

import json

import pytest

from airflow_conduit.spark import batch_pass
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, pipeline, proc, write_lines

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT NOT NULL, name STRING NOT NULL, amount DOUBLE"
LONG = "0" * 2_000  # a run of digits over the number limit (parsing.decidable_in_the_pass): its reason is worked out after the pass


def _inputs(root):
    write_lines(root / "json", "0.json", [
        json.dumps({"id": 1, "name": "a", "amount": 1.0}), '{"id": 2, "name": "b", "amo',
        json.dumps({"id": "x", "name": "caf\u00e9", "amount": 3.0}), json.dumps({"id": 4, "amount": 4.0}),
        json.dumps({"id": 5, "name": "e", "amount": -5.0}), "", json.dumps({"id": 6, "name": "f", "amount": 6.0}),
    ])
    write_lines(root / "json", "1.json", [json.dumps({"id": 7, "name": "g", "amount": 7.0}), '{"id": 8, "name": "' + LONG])
    write_lines(root / "csv", "0.csv", ["id,name,amount", "9,i,9.0", "10,j,ten", "11,,11.0", "12,l,-12.0"])


def _run(spark, root, fmt: str, run: str):
    rule = {"name": "positive", "condition": "amount > 0", "action": "drop"}
    spec = pipeline(
        f"dlq-{fmt}",
        [file_source(root / "json", sid="json", schema=SCHEMA, processors=[proc("json-rules", "expect", rules=[rule])],
                     **{"max-files-per-trigger": 1}),
         file_source(root / "csv", sid="csv", fmt="csv", schema=SCHEMA, **{"max-files-per-trigger": 1})],
        [file_dest(root / run / "out")],
        dlq=dlq_file(root / run / "dlq", size=0, include_configs=True),
    )
    spec.dead_letter_queue.settings["format"] = fmt
    code, report = execute(spark, spec, state_dir=root / run / "state", run_id="r1")
    assert code == 0, report.error
    rows = [r.asDict() for r in spark.read.format(fmt).load(str(root / run / "dlq")).collect()]
    return sorted(({k: v for k, v in r.items() if k != "time_of_error"} for r in rows), key=lambda r: json.dumps(r, sort_keys=True))


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_the_driver_writes_the_dlq_rows_spark_would_write(spark, tmp_path, monkeypatch, fmt):
    _inputs(tmp_path)
    written_by_driver = []
    original = batch_pass.BatchPass._write_dlq_from_driver
    monkeypatch.setattr(batch_pass.BatchPass, "_write_dlq_from_driver",
                        lambda self, *a: written_by_driver.append(original(self, *a)) or written_by_driver[-1])
    driver = _run(spark, tmp_path, fmt, "driver")
    assert True in written_by_driver and False in written_by_driver, "both ways ran: the long line's batch by Spark"

    monkeypatch.setattr(batch_pass.BatchPass, "_dlq_on_driver", lambda self: False)
    by_spark = _run(spark, tmp_path, fmt, "spark")

    assert len(driver) == 7
    assert driver == by_spark
    assert {r["source_position"] for r in driver if r["source_id"] == "json" and r["exception_class"].endswith("MalformedRecordError")} == {2}
    assert all(r["configs"] for r in driver)


def test_the_driver_reads_a_records_text_after_the_pass_only_where_its_line_is_not_found(spark, tmp_path, monkeypatch):
    """A found line is the DLQ row's ``record``: the entries' own text does not come with the counts; where the line
    cannot be read again (here: no file can), the driver reads it then and writes the rows Spark would write."""
    from airflow_conduit.spark import observed, source_lines
    from airflow_conduit.spark.dlq import ORIGINAL

    _inputs(tmp_path)
    read_with_counts: list[tuple] = []
    metrics_init = observed.ObservedMetrics.__init__

    def noted(self, *args, **kwargs):
        metrics_init(self, *args, **kwargs)
        read_with_counts.append(tuple(kwargs.get("fields", ())))

    monkeypatch.setattr(observed.ObservedMetrics, "__init__", noted)
    monkeypatch.setattr(batch_pass, "ObservedMetrics", observed.ObservedMetrics)
    _run(spark, tmp_path, "json", "found")
    assert read_with_counts and all(("dlq", "exception_class") in f for f in read_with_counts if f)
    assert not any(("dlq", ORIGINAL) in f for f in read_with_counts), "a found line replaces the entry's text"

    def unreadable(*args, **kwargs):
        raise OSError("gone")

    monkeypatch.setattr(source_lines, "read_lines", unreadable)
    driver = _run(spark, tmp_path, "json", "driver")
    monkeypatch.setattr(batch_pass.BatchPass, "_dlq_on_driver", lambda self: False)
    by_spark = _run(spark, tmp_path, "json", "spark")
    assert len(driver) == 7 and driver == by_spark
    assert any(r["record"] == '{"id": 2, "name": "b", "amo' for r in driver), "the reader's text where the line is not found"
