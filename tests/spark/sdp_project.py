"""Helpers of the SDP tests: a private copy of examples/sdp, runs of the SDP runner, its tables read back.

A streaming table is read through its sink's commit log (``_spark_metadata``), as Spark reads it: files a
killed batch left behind are not in it, so a count over the log is what a reader of the table gets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "sdp"


def project_copy(root: Path, *, data: dict[str, str] | None = None) -> Path:
    """examples/sdp under ``root``/project, its storage, warehouse and input in ``root``; ``data``: input files to use."""
    project = root / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("spark-warehouse", "storage", "__pycache__"))
    text = (project / "spark-pipeline.yml").read_text()
    text = text.replace("file:///tmp/airflow-conduit-sdp-example/storage", (root / "storage").as_uri())
    text = text.replace("/tmp/airflow-conduit-sdp-example/warehouse", str(root / "warehouse"))
    text = text.replace("orders.input: examples/sdp/data", f"orders.input: {root / 'input'}")
    (project / "spark-pipeline.yml").write_text(text)
    (root / "input").mkdir()
    for name, body in (data or {p.name: p.read_text() for p in (EXAMPLE / "data").glob("*.json")}).items():
        (root / "input" / name).write_text(body)
    return project


def runner_command(project: Path, state_dir: Path, run_id: str, faults: dict | None = None) -> list[str]:
    from airflow_conduit.spark import packaging
    from airflow_conduit.spark.sdp.launch import pipelines_command, runner_path

    zip_file = packaging.build_py_files_archive(str(state_dir / "runs" / run_id))
    args = ["--spec", str(project / "spark-pipeline.yml"), "--run-id", run_id, "--state-dir", str(state_dir)]
    if faults:
        args += ["--faults", json.dumps(faults)]
    submit = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]", "--conf",
              "spark.sql.pipelines.maxFlowRetryAttempts=0", "--py-files", zip_file, runner_path(), *args]
    return pipelines_command(submit, runner_path(), args)


def run_runner(project: Path, state_dir: Path, run_id: str, faults: dict | None = None,
               timeout: float = 900) -> subprocess.CompletedProcess:
    """One run, to its end; its output in STATE_DIR/runs/<run-id>/driver.log."""
    folder = state_dir / "runs" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(folder / "driver.log", "wb") as log:
        return subprocess.run(runner_command(project, state_dir, run_id, faults), stdout=log, stderr=subprocess.STDOUT,
                              cwd=folder, env=env, timeout=timeout)


def report(state_dir: Path, run_id: str) -> dict:
    return json.loads((state_dir / "runs" / run_id / "report.json").read_text())


def committed_files(table: Path) -> list[Path]:
    """The files a streaming table's sink committed (its ``_spark_metadata`` log: adds less deletes)."""
    log_dir = table / "_spark_metadata"
    files: dict[str, bool] = {}
    for entry in sorted(log_dir.iterdir(), key=lambda p: int(p.name.split(".")[0]) if p.name.split(".")[0].isdigit() else -1):
        if not entry.name.split(".")[0].isdigit():
            continue
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            files[record["path"]] = record.get("action", "add") == "add"
    return [Path(path.removeprefix("file://").removeprefix("file:")) for path, added in files.items() if added]


def table_rows(table: Path) -> list[dict]:
    """Every committed row of a streaming table (a list: duplicates stay visible)."""
    import pyarrow.parquet as pq

    return [row for path in committed_files(table) for row in pq.read_table(path).to_pylist()]
