"""One writer per state dir, whoever starts it: `airflow-conduit run`, `airflow-conduit dlq replay`, the operators.

Real `airflow-conduit` processes, real spark-submit and local Spark, the real driver lease (flock). Two runs
started in the same second get different run ids, and the one the lease refuses ends with exit 4 without
touching the other: no driver killed, its recovery.json byte for byte as it was. A replay holds the same
lease for its whole run, so two replays started together never pick the same replay number, and a replay
beside a running pipeline is refused (exit 4, one named line).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_conduit.hooks.backends import lease
from conftest import xcoms

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).parent / "airflow-conduit")
DEADLINE = 400  # seconds: several Spark starts on a shared 2-core machine
JAVA_TRACE = ("Traceback", "\tat org.apache", "Py4JJavaError", "Caused by:")


def wait_for(condition, what: str, procs=(), timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        for proc in procs:
            assert proc.poll() is None, f"a process ended (exit {proc.returncode}) while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return value


def recovery(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / "recovery.json").read_text())
    except (OSError, ValueError):
        return None


def continuous(orders: Path) -> Path:
    spec = orders / "continuous.yaml"
    spec.write_text((orders / "pipeline.yaml").read_text().replace("mode: available-now", "mode: continuous"))
    return spec


def start_run(spec: Path, state_dir: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([CLI, "run", str(spec), "--state-dir", str(state_dir), "--poll-interval", "1"],
                                stdout=out, stderr=subprocess.STDOUT, text=True)


def committed(folder: Path, suffix: str) -> list[Path]:
    """Files a reader sees: not under ``_temporary`` (a writer still at work), not ``_SUCCESS``."""
    return sorted(f for f in folder.rglob(f"*{suffix}") if not any(p.startswith("_") for p in f.relative_to(folder).parts))


def lake(folder: Path) -> list[int] | None:
    import pyarrow.parquet as pq

    try:
        return sorted(i for f in committed(folder, ".parquet") for i in pq.read_table(f).column("id").to_pylist())
    except (OSError, ValueError):  # a file being written
        return None


def all_records_placed(orders: Path) -> bool:
    expected = json.loads((orders / "expected.json").read_text())
    dlq = [line for f in committed(orders / "out" / "dlq", ".json") for line in f.read_text().splitlines() if line.strip()]
    return lake(orders / "out" / "lake") == sorted(expected["written_ids"]) and len(dlq) == len(expected["dlq"])


def run_processes(handle: dict) -> list:
    return lease.run_processes(handle["pid"], lease.run_marker(handle["state_dir"], handle["run_id"]))


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=DEADLINE)


def test_two_runs_started_in_the_same_second_one_runs_the_other_is_refused_with_exit_4(orders, tmp_path):
    spec, state_dir = continuous(orders), orders / "state"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_run(spec, state_dir, log) for log in logs]  # the same second: before, both got cli-<seconds>-s01
    try:
        [loser] = wait_for(lambda: [i for i, proc in enumerate(procs) if proc.poll() is not None], "one of the two to end")
        winner = 1 - loser
        assert procs[loser].wait() == 4, logs[loser].read_text()[-3000:]
        refused = logs[loser].read_text()
        assert "FAILED: the state dir" in refused and "is leased by run cli-" in refused, refused
        assert "Traceback" not in refused and "internal error" not in refused

        handle = wait_for(lambda: (recovery(state_dir) or {}).get("current"), "the winner's run in recovery.json", [procs[winner]])
        assert (recovery(state_dir)["owner"]["pid"], handle["run_id"].endswith("-s01")) == (procs[winner].pid, True)
        wait_for(lambda: all_records_placed(orders), "every record in the lake or the DLQ", [procs[winner]])
        assert len(run_processes(handle)) >= 3  # wrapper, spark-submit JVM, Python driver: nothing was killed
        runs = sorted(p.name for p in (state_dir / "runs").iterdir())
        assert runs == [handle["run_id"]]  # the refused run left no run folder, no exit file
        assert stop(procs[winner]) == 130  # the winner runs on until stopped, as a continuous pipeline does
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    out = logs[winner].read_text()
    assert "Traceback" not in out and out.count("submitted: run") == 1 and "failed:" not in out, out[-3000:]
    record = recovery(state_dir)
    assert record["pipeline_state"] == "stopped" and record["submissions"] == 1
    assert not run_processes(handle) and not lease.is_held(lease.lease_path(state_dir))
    assert all_records_placed(orders)  # nothing twice


STRICT = "id BIGINT NOT NULL, name STRING, code INT"
FIXED = "id BIGINT NOT NULL, name STRING, code STRING"  # the fix: codes are not all numbers


def codes_pipeline(root: Path, schema: str) -> Path:
    spec = root / "pipeline.yaml"
    spec.write_text(f"""version: "1"
pipeline:
  id: codes
  mode: available-now
  sources:
    - {{id: in, plugin: builtin:file, settings: {{path: {root / 'in'}, format: json, schema: "{schema}"}}}}
  destinations:
    - {{id: lake, plugin: builtin:file, settings: {{path: {root / 'lake'}, format: json}}}}
  dead-letter-queue:
    plugin: builtin:file
    settings: {{path: {root / 'dlq'}, format: json}}
    window-size: 0
""")
    return spec


def json_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for f in committed(folder, ".json") for line in f.read_text().splitlines() if line.strip()]


def test_two_replays_started_together_one_runs_the_other_is_refused_and_every_record_is_in_one_place(tmp_path):
    lines = [{"id": 1, "name": "a", "code": 7}, {"id": 2, "name": "b", "code": "A2"}, "{broken",
             {"id": 4, "name": "d", "code": "B4"}, {"id": 5, "name": "e", "code": 9}]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    state_dir = tmp_path / "state"
    ran = subprocess.run([CLI, "run", str(codes_pipeline(tmp_path, STRICT)), "--state-dir", str(state_dir)],
                         capture_output=True, text=True, timeout=DEADLINE)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert sorted(r["id"] for r in json_rows(tmp_path / "lake")) == [1, 5] and len(json_rows(tmp_path / "dlq")) == 3

    fixed = codes_pipeline(tmp_path, FIXED)
    replays = [replay_cli(fixed, state_dir) for _ in range(2)]  # started together: before, both took replay 1
    outputs = [proc.communicate(timeout=DEADLINE) for proc in replays]
    outcomes = [(proc.returncode, out, err) for proc, (out, err) in zip(replays, outputs)]
    assert sorted(code for code, _, _ in outcomes) == [0, 4], outcomes
    [(_, out, _)] = [o for o in outcomes if o[0] == 0]
    [(_, _, refused)] = [o for o in outcomes if o[0] == 4]
    assert out.startswith("replay 1 (batch -1): 3 record(s): written[lake=2]"), out
    assert refused.startswith("FAILED: dlq replay not started: the state dir") and "leased by dlq replay dlq-replay-" in refused
    assert len(refused.strip().splitlines()) == 1 and not any(t in refused for t in JAVA_TRACE), refused
    assert sorted(p.name for p in (state_dir / "replays").iterdir()) == ["1"]  # one replay number, taken once

    # every record in exactly one place: each good or fixed one in the lake once, the one that still fails
    # in the DLQ (its first copy, and the copy replay 1 sent back)
    assert sorted(r["id"] for r in json_rows(tmp_path / "lake")) == [1, 2, 4, 5]
    dlq = json_rows(tmp_path / "dlq")
    assert sorted((r["batch_id"], r["record"]) for r in dlq if r["record"] == "{broken") == [(-1, "{broken"), (0, "{broken")]
    assert [r["batch_id"] for r in dlq if r["batch_id"] == -1] == [-1]  # replay 1's batch written once
    assert not lease.is_held(lease.lease_path(state_dir))


def replay_cli(spec: Path, state_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([CLI, "dlq", "replay", str(spec), "--state-dir", str(state_dir), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_beside_a_running_pipeline_a_run_a_replay_and_the_replay_operator_are_refused_and_recovery_json_is_untouched(
        airflow_db, orders, tmp_path):
    spec, state_dir = continuous(orders), orders / "state"
    pipeline = start_run(spec, state_dir, tmp_path / "pipeline.log")
    try:
        handle = wait_for(lambda: (recovery(state_dir) or {}).get("current"), "the pipeline's run", [pipeline])
        wait_for(lambda: all_records_placed(orders), "every record in the lake or the DLQ", [pipeline])
        before = (state_dir / "recovery.json").read_bytes()

        second = subprocess.run([CLI, "run", str(spec), "--state-dir", str(state_dir)], capture_output=True, text=True,
                                timeout=DEADLINE)
        assert second.returncode == 4, second.stderr[-3000:]
        assert f"is leased by run {handle['run_id']}" in second.stderr
        assert (state_dir / "recovery.json").read_bytes() == before  # not rewritten to stopped / owner = the refused run

        replay = replay_cli(orders / "pipeline.yaml", state_dir)
        out, err = replay.communicate(timeout=DEADLINE)
        assert replay.returncode == 4, (out, err)
        assert err.startswith("FAILED: dlq replay not started: the state dir") and f"leased by run {handle['run_id']}" in err
        assert len(err.strip().splitlines()) == 1 and not any(t in err for t in JAVA_TRACE)
        assert not (state_dir / "replays").exists()  # no replay number was taken

        dr = run_replay_dag("refused_replay_operator", spec=str(orders / "pipeline.yaml"), state_dir=str(state_dir),
                            max_retries=0)  # the first refusal degrades the task: no waiting for a restart
        assert dr.state == "failed"
        audit = xcoms(dr.dag_id, dr.run_id)["audit_log"]
        assert any("not submitted: LeaseHeld" in e["message"] and handle["run_id"] in e["message"] for e in audit), audit
        assert audit[-1]["pipeline_state"] == "degraded"  # max-retries 0: the refusal is its only try
        assert (state_dir / "recovery.json").read_bytes() == before  # the operator left the holder's file alone too
        assert not (state_dir / "replays").exists()
        assert len(run_processes(handle)) >= 3 and pipeline.poll() is None  # the pipeline ran on through all three
    finally:
        code = stop(pipeline)
    assert code == 130
    record = recovery(state_dir)
    assert record["pipeline_state"] == "stopped" and record["owner"]["pid"] == pipeline.pid
    assert all_records_placed(orders)


def run_replay_dag(dag_id: str, **replay):
    """The tests' parameterised DAG with one DeadLetterQueueReplayOperator task (conn conduit_local), by dag.test()."""
    import importlib.util

    from conftest import TEST_DAGS

    replay = {"conn_id": "conduit_local", "poll_interval": 1, "min_delay": "1s", **replay}
    os.environ["CONDUIT_TEST_DAG"] = json.dumps({"dag_id": dag_id, "operator": None, "replay": replay})
    module_spec = importlib.util.spec_from_file_location(f"conduit_test_dag_{dag_id}", TEST_DAGS / "conduit_test_dag.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.dag.test()
