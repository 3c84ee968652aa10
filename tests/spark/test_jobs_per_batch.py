"""Spark jobs per micro-batch: a count (deterministic), not a time.

Every job of a streaming query runs in the job group of the query's run id,
so Spark's status tracker counts them. The reference pipeline (1 source with
2 processors, 1 pipeline processor, 1 file destination, file DLQ) runs one
job per destination write plus one for the DLQ only when a batch holds bad
records: exactly 2 per batch with bad records, exactly 1 without, whatever
the number of built-in processors, and with an ``expect`` processor whose
rules are counted by the same pass (no job per rule).
"""

from __future__ import annotations

import pytest

from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, write_lines

pytestmark = pytest.mark.spark

FILES = 3


def _input(folder, *, bad: bool):
    for f in range(FILES):
        lines = [good(10 * f + 1), good(10 * f + 2)]
        if bad:  # one line the reader rejects, one record that fails its schema (id not a number)
            lines[1:1] = ["{broken"]
            lines.append('{"id": "x", "name": "w"}')
        write_lines(folder, f"{f}.json", lines)


RULES = [
    {"name": "has-id", "condition": "id IS NOT NULL", "action": "drop"},
    {"name": "named", "condition": "name IS NOT NULL", "action": "warn"},
    {"name": "small", "condition": "amount < 10", "action": "warn"},
    {"name": "never", "condition": "name = 'nobody'", "action": "warn"},
]


def _spec(tmp_path, extra_processors: int, rules=()):
    source_processors = [
        proc("tag", "field.set", field="origin", value="'file'"),
        proc("upper", "field.set", field="name", value="upper(name)"),
    ]
    pipeline_processors = [proc("positive", "filter", condition="amount >= 0")]
    pipeline_processors += [proc(f"extra-{i}", "field.set", field=f"x{i}", value=f"amount * {i}") for i in range(extra_processors)]
    if rules:
        pipeline_processors.append(proc("quality", "expect", rules=list(rules)))
    return pipeline(
        f"jobs-{extra_processors}",
        [file_source(tmp_path / "in", processors=source_processors, **{"max-files-per-trigger": 1})],
        [file_dest(tmp_path / "out", fmt="parquet")],
        processors=pipeline_processors,
        dlq=dlq_file(tmp_path / "dlq", size=0),
    )


def _jobs_per_batch(spark, tmp_path, extra_processors: int = 0, rules=(), *, bad: bool = True) -> float:
    _input(tmp_path / "in", bad=bad)
    runners = []
    code, report = execute(spark, _spec(tmp_path, extra_processors, rules), state_dir=tmp_path / "state", run_id="r1",
                           on_runner=runners.append)
    assert code == 0, report.error
    assert len(report.batches) == FILES
    assert report.totals["dlq"] == (2 * FILES if bad else 0)
    assert sum(report.totals["written"].values()) == 2 * FILES
    if rules:  # the rules were evaluated: every good record counted under every rule
        counted = report.totals["expectations"]["quality"]
        assert {name: c["passed"] + c["failed"] for name, c in counted.items()} == {r["name"]: 2 * FILES for r in rules}
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(str(runners[0].query.runId))
    return len(jobs) / len(report.batches)


def test_a_batch_with_bad_records_runs_2_jobs_its_write_and_the_dlq_write(spark, tmp_path):
    assert _jobs_per_batch(spark, tmp_path / "a") == 2
    assert _jobs_per_batch(spark, tmp_path / "b", extra_processors=8) == 2, "built-in processors must add no Spark job"
    assert _jobs_per_batch(spark, tmp_path / "c", rules=RULES) == 2, "expectation rules must add no Spark job"


def test_a_batch_without_bad_records_runs_1_job_its_write(spark, tmp_path):
    assert _jobs_per_batch(spark, tmp_path / "a", bad=False) == 1
    assert _jobs_per_batch(spark, tmp_path / "b", rules=RULES, bad=False) == 1, "expectation rules must add no Spark job"
