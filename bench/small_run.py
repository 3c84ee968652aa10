"""Benchmark 6: where the wall time of ``airflow-conduit run examples/orders/pipeline.yaml`` goes, against a plain PySpark
script on the same 15 records (method: docs/benchmarks.md)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from airflow_conduit.runs.report import read_json
from bench.common import REPO, alternate, benchmark, iso_epoch, spread, summary, table, workdir

TITLE = "6. A small run, as a new user runs it"
EXAMPLE = REPO / "examples" / "orders"
SPARK_LINE = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) \w+ (\S+): (.*)$")
PY_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (\S+): (.*)$")
SPARK_EVENTS = {("SparkContext", "Running Spark version"): "spark_context_starting", ("BlockManager", "Initialized BlockManager"): "spark_context_ready",
                ("MicroBatchExecution", "Starting ["): "query_starting"}
FLOOR_SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[*]").appName("small-run-floor").getOrCreate()
schema = "id INT, customer STRING, amount DOUBLE, currency STRING, ts TIMESTAMP, payload STRING"
spark.read.schema(schema).json(sys.argv[1]).write.mode("overwrite").parquet(sys.argv[2])
spark.stop()
"""
BATCH_FIGURES = {"batch_seconds": "trigger start → commit", "foreach_batch_seconds": "… in foreachBatch (the runner)",
                 "planning_seconds": "… query planning", "offsets_and_commit_seconds": "… offsets and commit logs"}


def parse_driver_log(text: str) -> dict[str, Any]:
    """Spark's milestones (1 s resolution), the streaming progress reports and the Python driver's start."""
    events: dict[str, float] = {}
    progress: list[dict[str, Any]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := SPARK_LINE.match(line):
            at, who, msg = m.groups()
            at_epoch = time.mktime(datetime.strptime(at, "%y/%m/%d %H:%M:%S").timetuple())
            for (source, start), name in SPARK_EVENTS.items():
                if who == source and msg.startswith(start):
                    events.setdefault(name, at_epoch)
            if who == "ProgressReporter" and "made progress" in msg and msg.rstrip().endswith("{"):
                try:
                    end = lines.index("}", i)
                    progress.append(json.loads("\n".join(["{", *lines[i + 1:end], "}"])))
                except ValueError:
                    pass
        elif (p := PY_LINE.match(line)) and p.group(2) == "airflow_conduit.spark.entrypoint":
            dt = datetime.strptime(p.group(1), "%Y-%m-%d %H:%M:%S,%f")
            for mark in ("driver started", "session ready"):
                if mark in p.group(3):
                    events.setdefault(mark, time.mktime(dt.timetuple()) + dt.microsecond / 1e6)
    return {"events": events, "progress": progress}


def run_floor(work: Path) -> dict[str, Any]:
    shutil.copytree(EXAMPLE / "data" / "in", work / "in")
    t0 = time.time()
    subprocess.run([sys.executable, "-c", FLOOR_SCRIPT, str(work / "in"), str(work / "out")], capture_output=True, timeout=600, cwd=str(work),
                   check=True)
    return {"seconds": time.time() - t0}


def run_cli(work: Path) -> dict[str, Any]:
    """One ``airflow-conduit run`` on a fresh copy of the example and state directory; its phases."""
    shutil.copytree(EXAMPLE, work / "orders", ignore=shutil.ignore_patterns("out"))
    state, seen = work / "state", {}
    cmd = [str(Path(sys.executable).parent / "airflow-conduit"), "run", str(work / "orders" / "pipeline.yaml"), "--state-dir", str(state)]
    t0 = time.time()
    with open(work / "cli.out", "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=str(work))
        while proc.poll() is None:
            if time.time() - t0 > 600:
                proc.kill()
                raise TimeoutError("airflow-conduit run did not finish within 600 s")
            for log_file in state.glob("runs/*/driver.log"):
                seen.setdefault("driver_log_created", time.time())
                if report := read_json(log_file.parent / "report.json"):  # written atomically: absent or whole
                    seen.setdefault(f"status:{report['status']}", time.time())
            time.sleep(0.05)
    t_exit = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"airflow-conduit run exited {proc.returncode}:\n{(work / 'cli.out').read_text()[-3000:]}")
    run_dir = next((state / "runs").iterdir())
    return phases(t0, t_exit, seen, read_json(run_dir / "report.json"), read_json(run_dir / "exit.json"),
                  parse_driver_log((run_dir / "driver.log").read_text(errors="replace")))


def phases(t0: float, t_exit: float, seen: dict[str, float], report: dict, exit_record: dict, parsed: dict) -> dict[str, Any]:
    """Consecutive phases that add up to the wall time, and the per-batch figures of the progress reports."""
    ev = parsed["events"]
    started, ended, driver_exit = iso_epoch(report["started_at"]), iso_epoch(report["ended_at"]), iso_epoch(exit_record["ended_at"])
    submitted = seen.get("driver_log_created", t0)
    query = ev.get("query_starting") or seen.get("status:running") or started
    sc = ev.get("spark_context_starting", submitted)
    driver = min(max(ev.get("driver started", sc), submitted), sc)
    sc_ready = min(max(ev.get("spark_context_ready", sc), sc), started)
    session = min(max(ev.get("session ready", sc_ready), sc_ready), started)
    batches = [{"trigger_start": iso_epoch(p["timestamp"]), "batch_seconds": p.get("batchDuration", 0) / 1000,
                "foreach_batch_seconds": (p.get("durationMs") or {}).get("addBatch", 0) / 1000,
                "planning_seconds": (p.get("durationMs") or {}).get("queryPlanning", 0) / 1000,
                "offsets_and_commit_seconds": sum((p.get("durationMs") or {}).get(k, 0) for k in ("latestOffset", "getBatch", "walCommit", "commitOffsets")) / 1000}
               for p in parsed["progress"]]
    first = batches[0]["trigger_start"] if batches else query
    last = max((b["trigger_start"] + b["batch_seconds"] for b in batches), default=query)
    marks = [("command start → spark-submit started (CLI: Python + Airflow imports, spec check, packaging)", t0, submitted),
             ("spark-submit started → Python driver started (spark-submit's JVM launch, the driver's Python start)", submitted, driver),
             ("Python driver started → SparkContext starting (the driver's imports: PySpark, the runner)", driver, sc),
             ("SparkContext start (JVM side: SparkEnv, block manager, executor)", sc, sc_ready),
             ("SparkContext ready → session ready (Spark's SparkSession creation)", sc_ready, session),
             ("session ready → runner created (the runner's set-up; report started_at)", session, started),
             ("pipeline setup → query started (the sources' streaming DataFrames: reader, schema, first listing; query start)", started, query),
             ("query started → first batch triggered", query, first), ("micro-batches (trigger start → commit, all batches)", first, last),
             ("last batch → query ended (no more input; report ended_at)", last, ended),
             ("query ended → driver exited (spark.stop, JVM exit)", ended, driver_exit),
             ("driver exited → command exited (the CLI's next poll, summary)", driver_exit, t_exit)]
    return {"seconds": t_exit - t0, "phases": {name: b - a for name, a, b in marks}, "batches": batches, "totals": report.get("totals")}


def measure(args) -> dict[str, Any]:
    with workdir("small") as root:
        os.environ.setdefault("AIRFLOW_HOME", str(root / "airflow-home"))  # the CLI needs no Airflow DB; keep it out of ~
        runs = alternate(["floor", "runner"], args.runs, warmup=0, work=root,
                         run=lambda way, folder: (run_floor if way == "floor" else run_cli)(folder))
    cli, names = runs["runner"], list(runs["runner"][0]["phases"])
    return {
        "command": "airflow-conduit run examples/orders/pipeline.yaml --state-dir <new temporary folder>", "runs": cli,
        "wall_seconds": summary(r["seconds"] for r in cli), "phases": {n: summary(r["phases"][n] for r in cli) for n in names}, "phase_order": names,
        "first_batch": {k: summary(r["batches"][0][k] for r in cli if r["batches"]) for k in BATCH_FIGURES},
        "later_batches": {k: summary(b[k] for r in cli for b in r["batches"][1:]) for k in BATCH_FIGURES},
        "floor_wall_s": summary(r["seconds"] for r in runs["floor"]), "class_archive": class_archive_in_use()}


def class_archive_in_use() -> str | None:
    """The driver's class data sharing archive the runs were given (spark/jvm/options.py), None without one."""
    from airflow_conduit.spark.jvm.options import class_archive_path

    archive = class_archive_path()
    return str(archive) if archive is not None and archive.is_file() else None


def tables(r: dict[str, Any]) -> list[str]:
    def seconds(value: Any) -> float:
        return (value.get("median") if isinstance(value, Mapping) else value) or 0.0

    wall, phases_ = r["wall_seconds"], r.get("phases") or {}
    first, later = r.get("first_batch") or {}, r.get("later_batches") or {}
    head = [["wall time, `airflow-conduit run` → exit", spread(wall, 1, " s")]]
    if r.get("floor_wall_s") is not None:
        head.append(["plain PySpark script (SparkSession, read, write)", spread(r["floor_wall_s"], 1, " s")])
    if "class_archive" in r:
        head.append(["the runner's driver JVM maps a class data sharing archive", "yes" if r["class_archive"] else "no (none made)"])
    return [f"`{r.get('command', '?')}`, {len(r.get('runs') or [])} run(s).", table(["measure", "seconds"], head),
            table(["phase", "seconds", "share"], [[name, spread(phases_[name], 1, " s"), f"{100 * seconds(phases_[name]) / (seconds(wall) or 1):.0f} %"]
                                                  for name in r.get("phase_order") or list(phases_)]),
            table(["per micro-batch", "first batch", "later batches"],
                  [[label, spread(first[k], 2, " s"), spread(later.get(k), 2, " s")] for k, label in BATCH_FIGURES.items() if k in first])]


if __name__ == "__main__":
    benchmark("small_run", __doc__, measure, runs=2)
