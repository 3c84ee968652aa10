"""Spark jobs per micro-batch: a count (deterministic), not a time.

Every job of a streaming query runs in the job group of the query's run id,
so Spark's status tracker counts them. The reference pipeline (1 source with
2 processors, 1 pipeline processor, 1 file destination, file DLQ) must run at
most 4 jobs per batch whatever the number of built-in processors, and also
when its batches hold bad records, and with an ``expect`` processor whose
rules are counted by the same pass (no job per rule).
"""

from __future__ import annotations

import pytest

from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, write_lines

pytestmark = pytest.mark.spark

FILES = 3


def _input(folder):
    for f in range(FILES):
        write_lines(folder, f"{f}.json", [good(10 * f + 1), "{broken", good(10 * f + 2), '{"id": "x", "name": "w"}'])


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


def _jobs_per_batch(spark, tmp_path, extra_processors: int, rules=()) -> tuple[int, int]:
    _input(tmp_path / "in")
    runners = []
    code, report = execute(spark, _spec(tmp_path, extra_processors, rules), state_dir=tmp_path / "state", run_id="r1",
                           on_runner=runners.append)
    assert code == 0, report.error
    assert len(report.batches) == FILES and report.totals["dlq"] == 2 * FILES
    if rules:  # the rules were evaluated: every good record counted under every rule
        counted = report.totals["expectations"]["quality"]
        assert {name: c["passed"] + c["failed"] for name, c in counted.items()} == {r["name"]: 2 * FILES for r in rules}
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(str(runners[0].query.runId))
    return len(jobs), len(report.batches)


def test_reference_pipeline_runs_at_most_4_jobs_per_batch_whatever_the_processors(spark, tmp_path):
    jobs, batches = _jobs_per_batch(spark, tmp_path / "a", extra_processors=0)
    assert batches <= jobs <= 4 * batches, f"{jobs} Spark jobs for {batches} micro-batches"  # >= 1: the write itself
    more_jobs, _ = _jobs_per_batch(spark, tmp_path / "b", extra_processors=8)
    assert more_jobs == jobs, "built-in processors must add no Spark job"
    expect_jobs, _ = _jobs_per_batch(spark, tmp_path / "c", extra_processors=0, rules=RULES)
    assert expect_jobs == jobs, "expectation rules must add no Spark job"
