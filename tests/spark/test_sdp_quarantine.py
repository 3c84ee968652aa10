"""The SDP runner on examples/sdp: expectations and quarantine, the run report, exactly once across a SIGKILL.

Real runs launched as spark-pipelines launches its CLI (spark-class SparkPipelines, a local Spark Connect server).
One run per scenario, shared by the module's tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sdp_project import project_copy, report, run_runner, runner_command, table_rows

MALFORMED = '{"id":5,"customer":"dee",'


@pytest.fixture(scope="module")
def quarantine_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sdp-quarantine")
    project = project_copy(root)
    state_dir = root / "state"
    done = run_runner(project, state_dir, "r1")
    return root, state_dir, done


def test_the_run_succeeds_and_reports_each_flow(quarantine_run):
    root, state_dir, done = quarantine_run
    assert done.returncode == 0, (state_dir / "runs" / "r1" / "driver.log").read_text()[-3000:]
    flows = report(state_dir, "r1")["flows"]
    assert {name: flow["state"] for name, flow in flows.items()} == {
        "orders": "COMPLETED", "orders_quarantine": "COMPLETED", "customer_totals": "COMPLETED"}
    assert [entry["state"] for entry in flows["orders"]["timeline"]][-1] == "COMPLETED"
    assert flows["orders"]["rows_written"] == 3 and flows["orders_quarantine"]["rows_written"] == 2
    assert flows["customer_totals"]["rows_written"] == 2  # ada, bob: the view's rows


def test_the_target_table_has_the_good_records_only(quarantine_run):
    root, _, _ = quarantine_run
    assert sorted(row["id"] for row in table_rows(root / "warehouse" / "orders")) == [1, 2, 3]


def test_the_quarantine_keeps_the_raw_record_and_its_context(quarantine_run):
    root, _, _ = quarantine_run
    rows = {row["rule"]: row for row in table_rows(root / "warehouse" / "orders_quarantine")}
    assert set(rows) == {"malformed_record", "id_present"}
    bad = rows["malformed_record"]
    assert bad["record"] == MALFORMED and bad["record_bytes"] == MALFORMED.encode()
    assert bad["flow"] == "orders" and bad["source_file"].endswith("/input/orders-2.json")
    assert bad["failed_at"] is not None and len(bad["quarantine_id"]) == 64
    assert rows["id_present"]["error"] == "expectation failed: id_present"


def test_per_rule_counts_reach_the_run_report(quarantine_run):
    _, state_dir, _ = quarantine_run
    data = report(state_dir, "r1")
    rules = data["totals"]["expectations"]["orders"]
    assert rules["id_present"] == {"action": "quarantine", "passed": 5, "failed": 1}
    assert rules["amount_positive"] == {"action": "drop", "passed": 5, "failed": 1}
    assert rules["amount_below_limit"]["failed"] == 0 and rules["customer_named"]["action"] == "warn"
    assert data["totals"]["dlq"] == 2 and data["totals"]["filtered"] == 1 and data["totals"]["written"] == {"orders": 3}
    assert data["counters"]["deadletterqueue-records-produced"] == 2
    from airflow_conduit.runs.state_dir import StateDir

    assert StateDir(state_dir).dlq_records_since(None) == 2  # what DeadLetterQueueSensor counts


def many_orders(files: int, per_file: int) -> dict[str, str]:
    return {f"orders-{f:02d}.json": "".join(f'{{"id":{f * per_file + i},"customer":"c{i % 3}","amount":{i + 1}}}\n'
                                           for i in range(per_file)) for f in range(files)}


def test_exactly_once_across_a_sigkill_of_the_driver_mid_flow(tmp_path):
    """SIGKILL the run's driver (the Python runner and its JVM, the local Connect server the flows run in) once
    `orders` committed a batch and while it writes the next; the next run resumes from SDP's checkpoints: every
    order once, none lost."""
    project = project_copy(tmp_path, data=many_orders(files=6, per_file=50))
    state_dir = tmp_path / "state"
    folder = state_dir / "runs" / "k1"
    folder.mkdir(parents=True)
    env = {**os.environ}
    with open(folder / "driver.log", "wb") as log:
        launcher = subprocess.Popen(runner_command(project, state_dir, "k1"), stdout=log, stderr=subprocess.STDOUT,
                                    cwd=folder, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            batches = [b for b in (_report_or_empty(state_dir, "k1").get("batches") or []) if b["batch_id"].startswith("orders#")]
            if batches:
                break
            assert launcher.poll() is None, (folder / "driver.log").read_text()[-3000:]
            time.sleep(0.2)
        else:
            pytest.fail("no batch of orders was committed in time")
        for pid in driver_pids(launcher.pid):
            os.kill(pid, signal.SIGKILL)
        launcher.wait(timeout=300)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode != 0
    assert report(state_dir, "k1")["status"] != "succeeded"
    done = run_runner(project, state_dir, "k2")
    assert done.returncode == 0, (state_dir / "runs" / "k2" / "driver.log").read_text()[-3000:]
    ids = [row["id"] for row in table_rows(tmp_path / "warehouse" / "orders")]
    assert len(ids) == len(set(ids)) == 300 and sorted(ids) == list(range(300))


def _report_or_empty(state_dir: Path, run_id: str) -> dict:
    try:
        return report(state_dir, run_id)
    except (FileNotFoundError, ValueError):
        return {}


def driver_pids(root_pid: int) -> list[int]:
    """The run's driver: the Python runner under the launcher's JVM, and the JVMs it started (the local Connect
    server) - all at once, as a machine's OOM killer or a lost container would."""
    import psutil

    found = [p for p in psutil.Process(root_pid).children(recursive=True)]
    runner = [p for p in found if p.name().startswith("python")]
    assert runner, [p.name() for p in found]
    return [p.pid for p in runner] + [c.pid for p in runner for c in p.children(recursive=True)]
