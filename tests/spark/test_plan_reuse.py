"""A batch's whole plan analysed once per run (``analysed_plan``, ``runner._plan_batch``), and where it must not be.

Each test runs a pipeline of one file per batch and records, per batch, whether the batch's plan (records,
processors, fates, the Delta fit) ran Spark's analyzer (its query's tracker counts the analyzer's rules): a reused
plan does not. Where reuse would be wrong (a seeded random function, a Delta table whose schema changed) the plan
must be analysed again, and the records must show it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec
from airflow_conduit.spark.runner import execute
from spark_helpers import file_dest, file_source, good, pipeline, proc, read_json_rows, write_lines

pytestmark = pytest.mark.spark

FILES = 3
PER_FILE = 4


def _analysed(frame) -> bool:
    return not frame._jdf.queryExecution().tracker().rules().isEmpty()


def _files(folder: Path, line=good) -> None:
    for f in range(FILES):
        write_lines(folder, f"{f}.json", [line(f * 10 + k) for k in range(PER_FILE)])


def _run(spark, spec, state: Path, after_batch=None) -> list[bool]:
    """Runs ``spec``; returns per batch whether its plan was analysed (the plan built ahead of the first batch, on
    a thread of its own, is not a batch's). ``after_batch(n)`` runs after batch n."""
    analysed: list[bool] = []
    in_batch = threading.local()

    def wrap(runner):
        plan_batch, process = runner._plan_batch, runner._process_batch

        def recorded(batch, ctx, **kwargs):
            status, branches = plan_batch(batch, ctx, **kwargs)
            if getattr(in_batch, "on", False):
                analysed.append(_analysed(status))
            return status, branches

        def processed(batch, number):
            in_batch.on = True
            try:
                process(batch, number)
            finally:
                in_batch.on = False
            if after_batch is not None:
                after_batch(number)

        runner._plan_batch, runner._process_batch = recorded, processed

    code, report = execute(spark, spec, state_dir=state, run_id="r1", on_runner=wrap)
    assert code == 0, report.error
    assert len(report.batches) == FILES
    return analysed


def _by_batch(rows: list[dict], field: str) -> dict[int, set]:
    found: dict[int, set] = {}
    for row in rows:
        found.setdefault(row["id"] // 10, set()).add(row[field])
    return found


def test_a_plan_with_current_timestamp_is_reused_and_each_batch_still_gets_its_own_time(spark, tmp_path):
    _files(tmp_path / "in")
    spec = pipeline("reuse-now", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})], [file_dest(tmp_path / "out")],
                    processors=[proc("stamp", "field.set", field="at", value="cast(current_timestamp() AS STRING)")])
    assert _run(spark, spec, tmp_path / "state") == [False] * FILES, "every batch reuses the plan analysed ahead of the first"
    times = _by_batch(read_json_rows(spark, tmp_path / "out"), "at")
    assert sorted(times) == list(range(FILES)) and all(len(t) == 1 for t in times.values()), times
    stamps = [next(iter(times[b])) for b in range(FILES)]
    assert stamps == sorted(stamps) and len(set(stamps)) == FILES, f"the time is taken per batch, not kept: {stamps}"


@pytest.mark.parametrize("expression", ["rand()", "uuid()"])
def test_a_plan_with_a_seeded_random_function_is_analysed_at_every_batch(spark, tmp_path, expression):
    _files(tmp_path / "in")
    spec = pipeline("reuse-rand", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})], [file_dest(tmp_path / "out")],
                    processors=[proc("noise", "field.set", field="noise", value=f"cast({expression} AS STRING)")])
    assert _run(spark, spec, tmp_path / "state") == [True] * FILES, "refused: each batch analyses its plan"
    noise = _by_batch(read_json_rows(spark, tmp_path / "out"), "noise")
    # one file per batch read as one partition: a kept seed would give every batch the same values
    assert all(not (noise[a] & noise[b]) for a in range(FILES) for b in range(a + 1, FILES)), noise


def test_a_delta_table_whose_schema_changes_between_batches_is_fitted_again(spark, tmp_path):
    lake = tmp_path / "lake"
    spark.sql(f"CREATE TABLE delta.`{lake}` (id BIGINT, name STRING) USING delta")
    _files(tmp_path / "in", line=lambda i: json.dumps({"id": i, "name": f"n{i}", "note": f"t{i}"}))
    spec = pipeline("reuse-delta", [file_source(tmp_path / "in", schema="id BIGINT, name STRING, note STRING", **{"max-files-per-trigger": 1})],
                    [DestinationSpec(id="lake", plugin="delta", settings={"path": str(lake)})],
                    dlq=DeadLetterQueueSpec(plugin="file", settings={"path": str(tmp_path / "dlq"), "format": "json"}, window_size=0))

    def add_note_column(number: int) -> None:
        if number == 0:  # between the first and the second batch
            spark.sql(f"ALTER TABLE delta.`{lake}` ADD COLUMNS (note STRING)")

    analysed = _run(spark, spec, tmp_path / "state", after_batch=add_note_column)
    assert analysed == [True, True, False], "fitted again when the table changed, then reused while it stays the same"
    written = {r["id"]: r["note"] for r in spark.read.format("delta").load(str(lake)).collect()}
    assert sorted(written) == [10 * f + k for f in range(1, FILES) for k in range(PER_FILE)], "the first batch's notes did not fit"
    assert all(note == f"t{i}" for i, note in written.items()), written
    dlq = read_json_rows(spark, tmp_path / "dlq")
    assert len(dlq) == PER_FILE, f"only the first batch's records (note not a column yet) went to the DLQ: {dlq}"
