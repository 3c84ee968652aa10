"""A graceful stop that lands between two batches: the next batch's foreachBatch ends the query (StopRequested),
uncommitted, and no ERROR with a traceback reaches the log for it (a stop asked for is not a failure)."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from airflow_conduit.spark.runner import execute
from spark_helpers import file_dest, file_source, good, pipeline, write_lines

pytestmark = pytest.mark.spark


def test_a_stop_between_batches_ends_the_run_stopped_without_an_error_in_the_log(spark, tmp_path, caplog):
    for f in range(4):
        path = write_lines(tmp_path / "in", f"{f}.json", [good(10 * f + 1), good(10 * f + 2)])
        os.utime(path, (time.time() - 3600,) * 2)
    spec = pipeline("stop-between", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})], [file_dest(tmp_path / "out")])
    started: list[int] = []

    def stop_after_the_second_batch(runner) -> None:
        run_batch = runner._foreach_batch

        def batch(df, batch_id):
            started.append(batch_id)
            run_batch(df, batch_id)
            if batch_id == 1:
                runner.request_stop("test")  # the next batch starts at once (available-now): it raises StopRequested

        runner._foreach_batch = batch

    with caplog.at_level(logging.INFO):
        code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=stop_after_the_second_batch)
    assert code == 0 and report.status == "stopped", report.error
    assert [b["batch_id"] for b in report.batches] == [0, 1]
    assert started[:3] == [0, 1, 2], "the third batch started and was ended by the stop"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [(r.name, r.getMessage()) for r in errors]
    # the batch the stop ended is not committed: the next run processes it
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r2")
    assert code == 0 and report.totals["read"] == 4, report.totals


def test_a_stop_that_interrupts_a_batch_ends_it_with_one_line_not_the_interrupted_call(spark, tmp_path, caplog):
    """``query.stop()`` lands while a batch still runs (the runner's wait for it ran out), and the batch's JVM call fails:
    its Py4J error holds a Java stack trace. On a stopped query Spark's ``StreamExecution`` matches a failed batch's text
    against a pattern that recurses once per character: the stream thread's stack overflowed, the query ended with no
    cause and a thousand-line trace went to stderr. The batch ends with the stop's one-line StopRequested instead,
    uncommitted."""
    for f in range(3):
        path = write_lines(tmp_path / "in", f"{f}.json", [good(10 * f + 1), good(10 * f + 2)])
        os.utime(path, (time.time() - 3600,) * 2)
    spec = pipeline("stop-interrupts", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})], [file_dest(tmp_path / "out")])
    runners, stopping = [], threading.Event()

    def interrupted_in_the_second_batch(runner) -> None:
        runners.append(runner)
        process = runner._process_batch

        def batch(df, batch_id):
            if batch_id == 1:
                runner.request_stop("test")
                assert stopping.wait(120), "the run did not stop the query"
                time.sleep(1)  # query.stop() has marked the query terminated and is waiting for this batch
                # what a JVM call fails with: a Py4JJavaError whose text holds a Java stack trace
                spark._jvm.java.lang.Class.forName("no.such.Class" + "x" * 60_000)
            process(df, batch_id)

        def stop_now(query):
            stopping.set()
            query.stop()

        runner._process_batch, runner._stop_gracefully = batch, stop_now

    with caplog.at_level(logging.INFO):
        code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=interrupted_in_the_second_batch)
    assert code == 0 and report.status == "stopped", report.error
    assert [b["batch_id"] for b in report.batches] == [0]
    cause = runners[0].query.exception()
    assert cause is not None, "the query ended without a cause: Spark's pattern overflowed the stream thread's stack"
    assert "StopRequested" in str(cause) and "Py4JJavaError" not in str(cause), str(cause)[:500]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [(r.name, r.getMessage()) for r in errors]
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r2")  # the interrupted batch runs again
    assert code == 0 and report.totals["read"] == 4, report.totals
