"""`make demo`: the main job end to end on the embedded default (local Spark, Airflow on SQLite).

It copies the orders example (sample data with bad records) into .demo/, runs the reference DAG
`conduit_orders_available_now` with `airflow dags test`, injecting a transient failure on the first
two runs, then prints the recovery timeline, the dead letter queue summary and where the outputs are.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / ".demo"
DAG_ID = "conduit_orders_available_now"
FAULTS = {"transient_first_runs": 2}


def _environment() -> dict[str, str]:
    home = DEMO / "airflow"
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    )
    return env


def _fresh_pipeline() -> tuple[Path, Path]:
    """A clean copy of the example pipeline and an empty state directory under .demo/."""
    pipeline_dir = DEMO / "orders"
    state_dir = DEMO / "state" / "orders"
    for path in (pipeline_dir, state_dir):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(REPO / "examples" / "orders", pipeline_dir, ignore=shutil.ignore_patterns("out"))
    return pipeline_dir, state_dir


def _run(cmd: list[str], env: dict[str, str], log: Path) -> int:
    with open(log, "w", encoding="utf-8") as out:
        return subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


def _print_story(log: Path) -> None:
    """The operator's plain log lines: submitted, failed, restarting, recovered, degraded, succeeded."""
    keys = ("submitted", "failed:", "restarting in", "recovered", "degraded", "succeeded", "running:")
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if "airflow_conduit" in line and any(key in line for key in keys):
            message = line.split("]", 1)[-1].split(" [", 1)[0].strip()  # structlog: "<time> [info ] message [logger] ..."
            print("  " + line[11:23] + "  " + message)


def _print_timeline(state_dir: Path) -> None:
    record = json.loads((state_dir / "recovery.json").read_text())
    print(f"\nRecovery timeline (pipeline state now: {record['pipeline_state']}, submissions: {record['submissions']})")
    recovery = record.get("recovery") or record["carry"]["recovery"]
    for event in recovery["audit"]:
        print(f"  {event['at'][11:23]}  {event['event']:<18} {event['pipeline_state']:<11} {event.get('message', '')}")


def _print_dlq(pipeline_dir: Path) -> None:
    rows = []
    for part in sorted((pipeline_dir / "out" / "dlq").rglob("part-*.json")):
        rows += [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
    by_cause = collections.Counter((r["stage"], r["component_id"], r["exception_class"].rsplit(".", 1)[-1]) for r in rows)
    print(f"\nDead letter queue: {len(rows)} records")
    for (stage, component, exception), count in sorted(by_cause.items()):
        print(f"  {count:>3}  stage={stage:<10} component={component:<16} {exception}")


def _count_parquet_rows(folder: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(part).num_rows for part in folder.rglob("*.parquet"))


def main() -> int:
    DEMO.mkdir(exist_ok=True)
    env = _environment()
    pipeline_dir, state_dir = _fresh_pipeline()
    airflow = str(Path(sys.executable).parent / "airflow")

    print("Preparing Airflow (SQLite metadata database in .demo/airflow) ...")
    if _run([airflow, "db", "migrate"], env, DEMO / "db-migrate.log") != 0:
        print(f"airflow db migrate failed: see {DEMO / 'db-migrate.log'}")
        return 1

    conf = {"spec": str(pipeline_dir / "pipeline.yaml"), "state_dir": str(state_dir), "faults": FAULTS}
    print(f"Running DAG {DAG_ID} with a transient failure injected on the first two runs ({json.dumps(FAULTS)}) ...")
    log = DEMO / "dags-test.log"
    code = _run([airflow, "dags", "test", DAG_ID, "-c", json.dumps(conf)], env, log)
    _print_story(log)
    _print_timeline(state_dir)
    _print_dlq(pipeline_dir)

    lake = pipeline_dir / "out" / "lake"
    print(f"\nOutputs:\n  lake (Parquet): {lake}  ({_count_parquet_rows(lake)} records)")
    print(f"  dead letter queue (JSON lines): {pipeline_dir / 'out' / 'dlq'}")
    print(f"  state directory (checkpoints, commit markers, run reports, recovery.json): {state_dir}")
    print(f"  Airflow log of the run: {log}")
    print("\nDemo " + ("succeeded." if code == 0 else f"FAILED (airflow dags test exited {code})."))
    return code


if __name__ == "__main__":
    sys.exit(main())
