"""An input file that changed after it was read is reported, never silent: at the next batch, run or restart.

Spark's file source reads a file once, by name; the runner reports the bytes it did not process (docs/sources.md,
delivering input files). Real runner, real local Spark, real files.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from airflow_conduit.runs.report import RunReport, report_path
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark


def test_lines_appended_to_a_file_already_read_are_reported_with_their_byte_range_and_again_after_a_restart(
    spark, tmp_path, caplog
):
    state = tmp_path / "state"
    spec = pipeline("appends", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    first = write_lines(tmp_path / "in", "a.json", [good(1), good(2)])
    read_size = first.stat().st_size
    code, report = execute(spark, spec, state_dir=state, run_id="r1")
    assert code == 0 and report.totals["read"] == 2 and not report.input_files_changed

    with first.open("a") as f:  # appended after it was read: Spark's file source never reads it again
        f.write(good(3) + "\n")
    grown = first.stat().st_size
    write_lines(tmp_path / "in", "b.json", [good(4)])
    caplog.set_level(logging.WARNING, logger="airflow_conduit.spark.input_files")
    code, report = execute(spark, spec, state_dir=state, run_id="r2")
    assert code == 0 and report.totals["read"] == 1
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 4]  # line 3 not processed...
    [found] = report.input_files_changed  # ...and said so, in the report
    assert found["file"].endswith("/in/a.json") and found["batch_id"] == 0
    assert (found["read_bytes"], found["size_now"]) == (read_size, grown)
    on_disk = RunReport.read(report_path(state, "r2"))
    assert on_disk.input_files_changed == [found]
    warned = [r.getMessage() for r in caplog.records if "INPUT_FILE_CHANGED" in r.getMessage()]
    assert len(warned) == 1 and f"bytes {read_size:,}..{grown:,} (end excluded) were not processed" in warned[0]
    assert "a.json" in warned[0] and "move into the folder" in warned[0]

    caplog.clear()  # a restart with nothing new still says it; a file archived after it was read is no finding
    (tmp_path / "in" / "b.json").rename(tmp_path / "b.json.done")
    code, report = execute(spark, spec, state_dir=state, run_id="r3")
    assert code == 0 and [f["file"] for f in report.input_files_changed] == [found["file"]]
    assert any("INPUT_FILE_CHANGED" in r.getMessage() and "found earlier" in r.getMessage() for r in caplog.records)
    assert json.loads((state / "input-files" / "changed.json").read_text())[found["file"]]["size_now"] == grown


def test_a_file_appended_while_the_run_goes_on_is_reported_by_that_run(spark, tmp_path):
    """Appended after its batch, before the run ends (continuous pipelines: the next batch or the run's end sees it)."""
    state = tmp_path / "state"
    spec = pipeline("appends-live", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    first = write_lines(tmp_path / "in", "a.json", [good(1)])
    write_lines(tmp_path / "in", "b.json", [good(2)])
    size = first.stat().st_size

    def append_after_the_first_batch(runner):
        process = runner._process_batch

        def batch_then_append(batch, batch_id):
            process(batch, batch_id)
            if batch_id == 0:
                with first.open("a") as f:
                    f.write(good(3) + "\n")

        runner._process_batch = batch_then_append

    code, report = execute(spark, spec, state_dir=state, run_id="r1", on_runner=append_after_the_first_batch)
    assert code == 0 and report.totals["read"] == 2
    [found] = report.input_files_changed
    assert found["file"].endswith("/in/a.json") and (found["read_bytes"], found["size_now"]) == (size, first.stat().st_size)


def test_a_file_renamed_in_the_folder_after_it_was_read_is_not_read_again_and_is_reported(spark, tmp_path, caplog):
    state = tmp_path / "state"
    spec = pipeline("renames", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    first = write_lines(tmp_path / "in", "a.jsonl", [good(1), good(2), good(3)])
    code, report = execute(spark, spec, state_dir=state, run_id="r1")
    assert code == 0 and report.totals["read"] == 3

    first.rename(tmp_path / "in" / "a-archived.jsonl")  # mv in/a.jsonl in/a-archived.jsonl
    write_lines(tmp_path / "in", "b.jsonl", [good(4)])
    caplog.set_level(logging.WARNING, logger="airflow_conduit.spark.input_files")
    code, report = execute(spark, spec, state_dir=state, run_id="r2")
    assert code == 0 and report.totals["read"] == 1
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3, 4]  # ids 1-3 once
    [renamed] = [f for f in report.input_files_changed if f.get("renamed_from")]
    assert renamed["file"].endswith("/in/a-archived.jsonl") and renamed["renamed_from"].endswith("/in/a.jsonl")
    assert renamed["batch_id"] == 0
    assert any("INPUT_FILE_RENAMED" in r.getMessage() and "a-archived.jsonl" in r.getMessage() for r in caplog.records)

    code, report = execute(spark, spec, state_dir=state, run_id="r3")  # a restart reads nothing again either
    assert code == 0 and report.totals["read"] == 0
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3, 4]


def test_a_copy_of_a_file_that_is_still_there_is_a_new_file(spark, tmp_path):
    """Only a file whose old name is gone is a rename: a copy next to the original is read (a new delivery)."""
    state = tmp_path / "state"
    spec = pipeline("copies", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    first = write_lines(tmp_path / "in", "a.jsonl", [good(1)])
    assert execute(spark, spec, state_dir=state, run_id="r1")[0] == 0
    copy = tmp_path / "in" / "a-copy.jsonl"
    copy.write_bytes(first.read_bytes())
    os.utime(copy, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns))  # cp -p: even the same mtime
    code, report = execute(spark, spec, state_dir=state, run_id="r2")
    assert code == 0 and report.totals["read"] == 1 and not report.input_files_changed


def test_a_file_deleted_between_its_listing_and_its_read_is_reported_by_name(spark, tmp_path, caplog):
    state = tmp_path / "state"
    spec = pipeline("deleted", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    write_lines(tmp_path / "in", "a.json", [good(1)])
    doomed = write_lines(tmp_path / "in", "b.json", [good(2), good(3)])

    def delete_after_the_listing(runner):
        each_batch = runner._foreach_batch

        def deleting(batch, batch_id):
            doomed.unlink(missing_ok=True)  # Spark listed it for this batch; the batch reads it only now
            each_batch(batch, batch_id)

        runner._foreach_batch = deleting

    caplog.set_level(logging.WARNING, logger="airflow_conduit.spark.input_files")
    code, report = execute(spark, spec, state_dir=state, run_id="r1", on_runner=delete_after_the_listing)
    assert code == 0 and report.totals["read"] == 1
    [gone] = report.input_files_changed
    assert gone["file"].endswith("/in/b.json") and gone["gone_before_read"] and gone["batch_id"] == 0
    assert any("INPUT_FILE_GONE" in r.getMessage() and "b.json" in r.getMessage() for r in caplog.records)
    assert json.loads((state / "input-files" / "changed.json").read_text())[gone["file"]]["gone_before_read"]


def test_a_file_still_being_written_when_listed_is_read_once_settled_its_last_line_complete(spark, tmp_path, monkeypatch):
    """Copied in while its writer is mid-line (no line end): the batch waits for it to settle, so the line is read
    complete (never a truncated record in the DLQ); a line written after the listed end is reported from its start."""
    import threading
    import time

    from airflow_conduit.spark import input_files

    monkeypatch.setattr(input_files, "LAST_LINE_SETTLE_SECONDS", 2.0)
    state = tmp_path / "state"
    spec = pipeline("growing", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    folder = tmp_path / "in"
    folder.mkdir()
    growing = folder / "a.json"
    line3 = good(3)
    growing.write_text(good(1) + "\n" + good(2) + "\n" + line3[:20])  # "...am" with no line end

    from airflow_conduit.spark import runner as runner_mod

    settle = runner_mod.settle_still_written

    def listed_then_finished(files, batch):  # Spark listed the file mid-line; its writer finishes it now
        def finish():
            time.sleep(0.5)  # the batch waits for the file meanwhile
            with growing.open("a") as f:
                f.write(line3[20:] + "\n" + good(4) + "\n")

        writer = threading.Thread(target=finish)
        writer.start()
        try:
            settle(files, batch)
        finally:
            writer.join()

    monkeypatch.setattr(runner_mod, "settle_still_written", listed_then_finished)
    code, report = execute(spark, spec, state_dir=state, run_id="r1")
    assert code == 0
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3]  # line 3 read complete
    assert report.totals["dlq"] == 0 and not list((tmp_path / "dlq").rglob("*.json"))
    line4_starts = len((good(1) + "\n" + good(2) + "\n" + line3 + "\n").encode())
    [found] = report.input_files_changed  # line 4 began after the listed end: not read, said so from its first byte
    assert (found["read_bytes"], found["size_now"]) == (line4_starts, growing.stat().st_size)


def test_a_continuous_run_with_no_new_file_finds_an_append_on_its_timer(spark, tmp_path, monkeypatch):
    import threading
    import time

    from airflow_conduit.spark import input_files

    monkeypatch.setattr(input_files, "SWEEP_SECONDS", 1.0)
    state = tmp_path / "state"
    spec = pipeline("timer", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"),
                    mode="continuous", trigger_interval_seconds=0.5)
    first = write_lines(tmp_path / "in", "a.json", [good(1)])
    seen_while_running: list[dict] = []

    def append_then_wait_for_the_finding(runner):
        def watch():
            deadline = time.monotonic() + 300
            path = report_path(state, "r1")
            while time.monotonic() < deadline:
                on_disk = RunReport.read(path) if path.exists() else None
                if on_disk is not None and on_disk.batches:
                    break
                time.sleep(0.2)
            with first.open("a") as f:
                f.write(good(2) + "\n")
            while time.monotonic() < deadline:
                on_disk = RunReport.read(path)
                if on_disk is not None and on_disk.input_files_changed:
                    seen_while_running.extend(on_disk.input_files_changed)
                    break
                time.sleep(0.2)
            runner.request_stop("test over")

        threading.Thread(target=watch, daemon=True).start()

    code, report = execute(spark, spec, state_dir=state, run_id="r1", on_runner=append_then_wait_for_the_finding)
    assert code == 0
    [found] = seen_while_running  # in the report while the run went on, before its end's check
    assert found["file"].endswith("/in/a.json") and found["size_now"] == first.stat().st_size
