"""The entry point as spark-submit runs it: exit codes, ERROR line, run report, real driver kills.

Spark-submit runs cost ~20 s each; this module keeps them to one scenario of four runs.
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

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import StructuredError
from airflow_conduit.spark.packaging import build_py_files_archive, entrypoint_path
from spark_helpers import good, write_lines

pytestmark = pytest.mark.spark

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"

BAD_SPEC = """\
version: "1"
pipeline:
  id: broken
  sources:
    - id: in
      plugin: builtin:ftp
      settings: {path: in}
  destinations:
    - id: out
      plugin: builtin:file
      settings: {path: out}
"""


def _spec(folder: Path, mode: str, **extra) -> Path:
    lines = [
        'version: "1"',
        "pipeline:",
        "  id: e2e",
        f"  mode: {mode}",
        *(f"  {k}: {v}" for k, v in extra.items()),
        "  sources:",
        "    - id: in",
        "      plugin: builtin:file",
        "      settings:",
        "        path: in",
        '        schema: "id BIGINT NOT NULL, name STRING, amount DOUBLE"',
        "        max-files-per-trigger: 1",
        "  destinations:",
        "    - id: a",
        "      plugin: builtin:file",
        "      settings: {path: out/a}",
        "    - id: b",
        "      plugin: builtin:file",
        "      settings: {path: out/b, format: parquet}",
        "  dead-letter-queue:",
        "    plugin: builtin:file",
        "    settings: {path: out/dlq}",
        "    window-size: 0",
    ]
    path = folder / f"{mode}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return env


def _python_entrypoint(args: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    """Run the entry point file with plain Python, as spark-submit would (no Spark needed before validation)."""
    env = _env()
    env["JAVA_HOME"] = "/nonexistent-java"  # starting Spark would fail loudly, with another exit code
    return subprocess.run([sys.executable, entrypoint_path(), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, **kw)


def _error_line(stderr: str) -> StructuredError:
    error = StructuredError.from_stderr(stderr)
    assert error is not None, stderr[-2000:]
    return error


def test_a_bad_spec_exits_78_with_the_key_and_file_before_any_spark(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPEC)
    result = _python_entrypoint(["--spec", str(spec), "--run-id", "r1", "--state-dir", str(tmp_path / "state")], tmp_path)
    assert result.returncode == codes.EXIT_INVALID_SPEC == 78
    error = _error_line(result.stderr)
    assert error.code == codes.INVALID_SPEC and error.fatal
    assert "bad.yaml" in error.message and "pipeline.sources[0].plugin" in error.message
    report = json.loads((tmp_path / "state" / "runs" / "r1" / "report.json").read_text())
    assert report["status"] == "failed" and report["error"]["code"] == 2100
    # and pyspark was never even imported on that path
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys; from airflow_conduit.spark.entrypoint import main; "
         f"rc = main(['--spec', {str(spec)!r}, '--run-id', 'r2', '--state-dir', {str(tmp_path / 'state')!r}]); "
         "print('pyspark imported' if any(m.startswith('pyspark') for m in sys.modules) else 'no pyspark'); sys.exit(rc)"],
        capture_output=True, text=True, env=_env(), timeout=60,
    )
    assert probe.returncode == 78 and probe.stdout.strip() == "no pyspark"


def test_injected_faults_before_spark_exit_75_then_70(tmp_path):
    write_lines(tmp_path / "in", "0.json", [good(1)])
    spec = _spec(tmp_path, "available-now")
    args = ["--spec", str(spec), "--state-dir", str(tmp_path / "state")]
    first = _python_entrypoint([*args, "--run-id", "r1", "--faults", '{"transient_first_runs": 2}'], tmp_path)
    second = _python_entrypoint([*args, "--run-id", "r2", "--faults", '{"transient_first_runs": 2}'], tmp_path)
    assert (first.returncode, second.returncode) == (75, 75)
    assert _error_line(first.stderr).code == codes.INJECTED_TRANSIENT and not _error_line(first.stderr).fatal
    fatal = _python_entrypoint([*args, "--run-id", "r3", "--faults", '{"fatal": true}'], tmp_path)
    assert fatal.returncode == 70 and _error_line(fatal.stderr).code == codes.INJECTED_FATAL
    report = json.loads((tmp_path / "state" / "runs" / "r3" / "report.json").read_text())
    assert report["error"]["fatal"] is True and report["pipeline_id"] == "e2e"


# -- spark-submit, with real driver deaths ----------------------------------------------------------------


def _submit_cmd(tmp_path: Path, spec: Path, run_id: str, faults: dict | None = None) -> list[str]:
    archive = build_py_files_archive(tmp_path / "dist")
    cmd = [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--py-files", archive, entrypoint_path(),
           "--spec", str(spec), "--run-id", run_id, "--state-dir", str(tmp_path / "state")]
    if faults:
        cmd += ["--faults", json.dumps(faults)]
    return cmd


def _report(tmp_path: Path, run_id: str) -> dict:
    path = tmp_path / "state" / "runs" / run_id / "report.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _ids_committed(tmp_path: Path, dest: str) -> set[int]:
    """Ids written to ``dest`` (Parquet) in the batches whose commit marker exists (read without Spark)."""
    import pyarrow.parquet as pq

    ids: set[int] = set()
    markers = tmp_path / "state" / "commits" / dest
    for marker in markers.iterdir() if markers.exists() else []:
        folder = tmp_path / "out" / dest / f"batch_id={marker.name}"
        for part in folder.glob("*.parquet") if folder.exists() else []:
            ids.update(pq.read_table(part, columns=["id"]).column("id").to_pylist())
    return ids


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _python_driver_pid(run_id: str, state_dir: Path) -> int:
    """The Python driver process spark-submit started for this run in ``state_dir`` (it handles SIGTERM gracefully);
    the state dir tells it from another test's driver with the same run id on the same machine."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in cmdline]
        if any(a.endswith("entrypoint.py") for a in args) and run_id in args and str(state_dir) in args and "java" not in args[0]:
            return int(proc.name)
    raise AssertionError(f"no python driver for {run_id}")


def test_spark_submit_survives_three_driver_kills_and_stops_gracefully_on_sigterm(spark, tmp_path):
    good_ids, bad = [], []
    for f in range(4):
        ids = [f * 10 + k for k in range(3)]
        good_ids += ids
        write_lines(tmp_path / "in", f"{f}.json", [good(ids[0]), "{oops", good(ids[1]), '{"id": "x"}', good(ids[2])])
        bad += [(f"{f}.json", 2), (f"{f}.json", 4)]
    batch_spec = _spec(tmp_path, "available-now")
    continuous_spec = _spec(tmp_path, "continuous", **{"trigger-interval": "1s"})
    env = _env()

    # kill 1 and 2: the driver SIGKILLs itself right after one destination committed a batch
    for run_id, faults in [("r1", {"destination": "a", "batch": 0}), ("r2", {"destination": "b", "batch": 1})]:
        result = subprocess.run(_submit_cmd(tmp_path, batch_spec, run_id, {"crash_after_destination": faults}),
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 137, result.stderr[-3000:]
        assert _report(tmp_path, run_id)["status"] == "running"  # killed: no error written, like a real kill

    # kill 3: SIGKILL the whole spark-submit process group of a continuous run mid-run
    proc = subprocess.Popen(_submit_cmd(tmp_path, continuous_spec, "r3"), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(lambda: any(b["batch_id"] >= 2 for b in _report(tmp_path, "r3").get("batches", [])), 600, "batch 2")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    # new input arrives while the pipeline is down; the restart picks it up, then SIGTERM stops it gracefully
    for f in range(4, 6):
        ids = [f * 10 + k for k in range(3)]
        good_ids += ids
        write_lines(tmp_path / "in", f"{f}.json", [good(ids[0]), "{oops", good(ids[1]), '{"id": "x"}', good(ids[2])])
        bad += [(f"{f}.json", 2), (f"{f}.json", 4)]
    log = tmp_path / "r4.log"
    with log.open("w") as log_file:  # a file, not a pipe: Spark's chatty log would fill a pipe and block the driver
        proc = subprocess.Popen(_submit_cmd(tmp_path, continuous_spec, "r4"), cwd=tmp_path, env=env,
                                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            # every record written to the last destination ("b" commits after "a"): how many batches that
            # takes depends on where kill 3 landed, so wait on the data, not on a batch number
            _wait_for(lambda: _report(tmp_path, "r4").get("status") == "running"
                      and _ids_committed(tmp_path, "b") >= set(good_ids), 600, "every record in destination b")
            os.kill(_python_driver_pid("r4", tmp_path / "state"), signal.SIGTERM)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, log.read_text()[-3000:]
    ours = [line.split(": ", 1)[-1] for line in log.read_text().splitlines() if " airflow_conduit.spark.entrypoint: " in line]
    assert ours[:2] == ["run r4: driver started", "run r4: session ready"], ours  # the marks of a start-up's phases
    final = _report(tmp_path, "r4")
    assert final["status"] == "stopped" and final["ended_at"] and final["stop_reason"] == "signal SIGTERM"

    a = [r.asDict() for r in spark.read.json(str(tmp_path / "out" / "a")).collect()]
    b = [r.asDict() for r in spark.read.parquet(str(tmp_path / "out" / "b")).collect()]
    dlq = [r.asDict() for r in spark.read.json(str(tmp_path / "out" / "dlq")).collect()]
    assert sorted(r["id"] for r in a) == sorted(good_ids)  # none missing, none twice
    assert sorted(r["id"] for r in b) == sorted(good_ids)
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq) == sorted(bad)
