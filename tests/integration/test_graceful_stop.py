"""A graceful stop through the local backend lets the running batch finish: nothing written is uncounted.

A real continuous pipeline under spark-submit, stopped the way the operator's on_kill and the CLI stop
it. The SIGTERM goes to the Python driver only: spark-submit's JVM, signalled too, would stop the
SparkContext under the running batch (its files written, its commit and its count not).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.hooks.spark_pipeline import EMBEDDED_LOCAL_CONN_ID, SparkPipelineHook

DEADLINE = 600.0  # starts Spark on a possibly loaded machine

SPEC = """\
version: "1"
pipeline:
  id: ticking
  mode: continuous
  trigger-interval: 100ms
  sources:
    - id: ticks
      plugin: builtin:generator
      settings:
        records: 1000000
        rate: 200
        fields: {user: STRING, ms: INT}
        bad-record-ratio: 0.05
  destinations:
    - id: out
      plugin: builtin:file
      settings:
        path: out/ticks
        format: json
  dead-letter-queue:
    plugin: builtin:file
    settings:
      path: out/dlq
      format: json
    window-size: 0
"""


def json_lines(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.rglob("*.json")) if folder.exists() else 0


def report(handle: dict) -> dict:
    try:
        return json.loads(Path(handle.report_path).read_text())
    except (OSError, ValueError):
        return {}


def test_a_graceful_stop_ends_the_running_batch_and_the_driver_jvm_with_it(tmp_path):
    (tmp_path / "pipeline.yaml").write_text(SPEC)
    handle = SparkPipelineHook(EMBEDDED_LOCAL_CONN_ID).submit_job(str(tmp_path / "pipeline.yaml"), "graceful", str(tmp_path))
    backend = LocalBackend(graceful_stop_seconds=DEADLINE)  # what kill_job does, with a loaded machine's patience
    try:
        deadline = time.monotonic() + DEADLINE
        while len([b for b in report(handle).get("batches", []) if b["read"]]) < 3:
            assert time.monotonic() < deadline, "three batches with records were not written"
            assert backend.status(handle).state == "running", backend.status(handle)
            time.sleep(0.5)
        backend.kill(handle, graceful=True)  # batches follow each other at once: one is running now
    finally:
        backend.kill(handle, graceful=False)

    status = backend.status(handle)
    assert status.exit_code == 0, status  # spark-submit ended with its driver, not on a SIGTERM of its own (143)
    final = report(handle)
    assert final["status"] == "stopped" and final["stop_reason"] == "signal SIGTERM"
    totals = final["totals"]
    assert json_lines(tmp_path / "out" / "ticks") == totals["written"]["out"] > 0  # nothing written uncounted
    assert json_lines(tmp_path / "out" / "dlq") == totals["dlq"]
    driver_log = without_cpython_3_13_0_shutdown_noise(Path(handle.log_path).read_text(errors="replace"))
    # a batch that starts after the stop ends the query from foreachBatch: Spark's "terminated with error" is quieted
    assert "terminated with error" not in driver_log and "Traceback" not in driver_log, driver_log[-3000:]


# CPython 3.13.0 prints this at interpreter exit for threads it did not start (Py4J's callback threads), whatever the
# program did; later 3.13 releases do not. It is not an error of the run's.
_DUMMY_THREAD_DEL = re.compile(
    r"Exception ignored in: <function _DeleteDummyThreadOnDel.__del__ at 0x[0-9a-f]+>\n"
    r"Traceback \(most recent call last\):\n(?:  .*\n)+TypeError: 'NoneType' object does not support the context manager protocol\n"
)


def without_cpython_3_13_0_shutdown_noise(log: str) -> str:
    return _DUMMY_THREAD_DEL.sub("", log)
