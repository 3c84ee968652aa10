"""A batch committed to the DLQ and not to the lake when its run was killed: the restart finishes it, every record in
exactly one place, with the spec unchanged; under a changed spec it is refused (fatal 2150) until the spec it started
with, kept in the state dir, has finished it. In-process kills (SimulatedCrash where --faults would SIGKILL the driver),
as in test_exactly_once.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_conduit.pipeline.loader import load_pipeline
from airflow_conduit.recovery import codes
from airflow_conduit.spark.faults import SimulatedCrash
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark

KILL_AFTER_DLQ = "crash_after_destination"  # the DLQ committed batch B; the lake has not


def _crash():
    raise SimulatedCrash("killed")


def _kill_after_dlq(batch: int) -> dict:
    return {KILL_AFTER_DLQ: {"destination": "dead-letter-queue", "batch": batch}}


def _amounts_input(folder: Path, files: range) -> tuple[list[int], list[tuple[str, int]]]:
    """Per file 4 good records (amounts 500, 100, 500, 100) and a malformed 3rd line; (good ids, bad positions)."""
    ids, bad = [], []
    for f in files:
        rows = [json.dumps({"id": f * 10 + k, "name": f"n{k}", "amount": 100.0 if k % 2 else 500.0}) for k in range(4)]
        write_lines(folder, f"part-{f}.json", [*rows[:2], '{"id": oops', *rows[2:]])
        ids += [f * 10 + k for k in range(4)]
        bad.append((f"part-{f}.json", 3))
    return ids, bad


def _fates(spark, tmp_path) -> tuple[list[int], list]:
    lake = sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake"))
    dlq = read_json_rows(spark, tmp_path / "dlq")
    return lake, dlq


def test_a_restart_after_a_kill_between_the_dlq_and_lake_commits_finishes_every_batch(spark, tmp_path):
    """The restart re-runs the half-committed batch (DLQ skipped) and goes on through two more batches: it used to
    hang at the second one, waiting for ever on an observation (a kept plan ran in another session than the one the
    observation was registered with). The deadline is short so that a hang fails the test instead of holding it."""
    good_ids = []
    for f in range(5):
        ids = [f * 10 + k for k in range(3)]
        good_ids += ids
        write_lines(tmp_path / "in", f"part-{f}.json", [good(ids[0]), '{"id": oops', good(ids[1]), good(ids[2])])
    spec = pipeline("half", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})], [file_dest(tmp_path / "lake", did="lake")],
                    dlq=dlq_file(tmp_path / "dlq"), batch_deadline_seconds=120.0)
    state = tmp_path / "state"
    with pytest.raises(SimulatedCrash):
        execute(spark, spec, state_dir=state, run_id="r1", faults=_kill_after_dlq(1), crash=_crash)
    assert (state / "commits" / "dead-letter-queue" / "1").exists() and not (state / "commits" / "lake" / "1").exists()

    code, report = execute(spark, spec, state_dir=state, run_id="r2")

    assert code == 0, report.error
    assert [(b["batch_id"], b.get("already_committed")) for b in report.batches] == [
        (1, ["dead-letter-queue"]), (2, None), (3, None), (4, None)]
    lake, dlq = _fates(spark, tmp_path)
    assert lake == sorted(good_ids)  # none lost, none twice
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["batch_id"]) for r in dlq) == [(f"part-{f}.json", f) for f in range(5)]


def _spec_file(tmp_path: Path, *, drop_over_400: bool) -> Path:
    rule = """
  processors:
    - id: quality
      plugin: expect
      settings:
        rules:
          - {name: small, condition: "amount <= 400", action: drop}""" if drop_over_400 else ""
    text = f"""version: "1"
pipeline:
  id: half-spec
  sources:
    - id: in
      plugin: file
      settings: {{path: in, format: json, schema: "id BIGINT NOT NULL, name STRING, amount DOUBLE", max-files-per-trigger: 1}}{rule}
  destinations:
    - id: lake
      plugin: file
      settings: {{path: lake, format: json}}
  dead-letter-queue:
    plugin: file
    settings: {{path: dlq, format: json}}
    window-size: 0
"""
    path = tmp_path / ("pipeline-new.yaml" if drop_over_400 else "pipeline.yaml")
    path.write_text(text)
    return path


def test_a_spec_changed_between_a_kill_and_the_restart_is_refused_until_the_kept_spec_finished_the_batch(spark, tmp_path):
    good_ids, bad = _amounts_input(tmp_path / "in", range(3))
    old_file, new_file = _spec_file(tmp_path, drop_over_400=False), _spec_file(tmp_path, drop_over_400=True)
    state = tmp_path / "state"
    with pytest.raises(SimulatedCrash):
        execute(spark, load_pipeline(old_file), state_dir=state, run_id="r1", faults=_kill_after_dlq(1), crash=_crash)
    old_file.unlink()  # the user edits the spec in place: the old text is only in the state dir now

    code, report = execute(spark, load_pipeline(new_file), state_dir=state, run_id="r2")

    assert code == codes.EXIT_FATAL and report.error["code"] == codes.SPEC_CHANGED_MID_BATCH, report.error
    assert report.error["fatal"] is True and "batch 1 was committed to dead-letter-queue" in report.error["message"]
    kept = Path(report.error["message"].split("kept in ", 1)[1].split(", ", 1)[0])
    assert kept.is_file() and kept.is_relative_to(state)
    assert not (state / "commits" / "lake" / "1").exists()  # nothing of the batch committed under the new spec

    kept_copy = tmp_path / "kept.yaml"  # the kept spec, run from the spec's folder (its relative paths)
    kept_copy.write_text(kept.read_text())
    code, report = execute(spark, load_pipeline(kept_copy), state_dir=state, run_id="r3")  # finishes batch 1 as begun
    assert code == 0, report.error
    assert [(b["batch_id"], b.get("already_committed")) for b in report.batches] == [(1, ["dead-letter-queue"]), (2, None)]
    more_ids, more_bad = _amounts_input(tmp_path / "in", range(3, 5))
    code, report = execute(spark, load_pipeline(new_file), state_dir=state, run_id="r4")  # the new rule from batch 3 on
    assert code == 0, report.error

    lake, dlq = _fates(spark, tmp_path)
    dropped = sorted(json.loads(r["record"])["id"] for r in dlq if r["component_id"] == "quality")
    assert sorted(lake + dropped) == sorted(good_ids + more_ids)  # every good record in the lake or the DLQ
    assert len(set(lake) | set(dropped)) == len(good_ids + more_ids)  # and in one of them only
    assert dropped == [i for i in more_ids if i % 2 == 0]  # only the batches begun under the new rule
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq if r["stage"] == "source") == bad + more_bad
    # the report counts what was written: each batch's dlq count is what the DLQ's batch folder holds
    runs = {p.name: json.loads((p / "report.json").read_text()) for p in (state / "runs").iterdir()}
    for run in ("r3", "r4"):
        for batch in runs[run]["batches"]:
            assert batch["dlq"] == len([r for r in dlq if r["batch_id"] == batch["batch_id"]]), (run, batch)
            assert batch["written"]["lake"] == len([i for i in lake if i // 10 == batch["batch_id"]]), (run, batch)


def test_spark_submit_killed_with_sigkill_between_the_dlq_and_lake_commits_restarts_and_finishes(spark, tmp_path):
    """The same with the real driver: spark-submit SIGKILLs itself after the DLQ committed batch 1 (--faults), and
    the restart, with the spec unchanged, runs to its end (it hung at its second batch after the re-run one)."""
    import subprocess

    from test_entrypoint import _env, _submit_cmd

    ids, bad = _amounts_input(tmp_path / "in", range(5))
    spec = _spec_file(tmp_path, drop_over_400=False)
    spec.write_text(spec.read_text().replace("  sources:", "  batch-deadline: 5m\n  sources:"))
    killed = subprocess.run(_submit_cmd(tmp_path, spec, "r1", _kill_after_dlq(1)), cwd=tmp_path, env=_env(),
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == 137, killed.stderr[-3000:]
    restarted = subprocess.run(_submit_cmd(tmp_path, spec, "r2"), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                               timeout=900)
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    report = json.loads((tmp_path / "state" / "runs" / "r2" / "report.json").read_text())
    assert report["status"] == "succeeded"
    assert [(b["batch_id"], b.get("already_committed")) for b in report["batches"]] == [
        (1, ["dead-letter-queue"]), (2, None), (3, None), (4, None)]
    lake, dlq = _fates(spark, tmp_path)
    assert lake == sorted(ids)  # every good record once
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq) == bad  # every bad one once


def test_a_batch_past_its_deadline_ends_the_run_as_transient_and_the_restart_runs_it_once(spark, tmp_path):
    """``pipeline.batch-deadline``: a batch stuck in a call that does not return (here a custom processor's first
    record, for 600 s) ends the run with BatchDeadlineExceeded (1220, transient: the engine restarts it) within the
    deadline, not when the call returns; the restart runs the batch again, each record written once."""
    import time

    from spark_helpers import proc

    marks = tmp_path / "marks"
    marks.mkdir()
    write_lines(tmp_path / "in", "a.json", [json.dumps({"id": i, "name": str(marks), "amount": 1.0}) for i in (1, 2, 3)])
    spec = pipeline("deadline", [file_source(tmp_path / "in")], [file_dest(tmp_path / "lake", did="lake")],
                    processors=[proc("slow", "custom", function="conduit_test_functions:slow_the_first_time")],
                    dlq=dlq_file(tmp_path / "dlq"), batch_deadline_seconds=30.0)

    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")

    assert code == codes.EXIT_TRANSIENT, report.error
    assert report.error["code"] == codes.BATCH_DEADLINE and report.error["fatal"] is False
    assert "batch 0 ran longer than pipeline.batch-deadline (30s)" in report.error["message"]
    assert (marks / "slow-once").exists() and not (tmp_path / "state" / "commits" / "lake").exists()
    stopping = time.monotonic() + 300  # the stuck query is stopped on a thread of its own: the restart waits for it
    while spark.streams.active and time.monotonic() < stopping:
        time.sleep(0.5)
    assert not spark.streams.active

    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r2")
    assert code == 0, report.error
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake")) == [1, 2, 3]
