"""Small run: where the wall time of ``airflow-conduit run examples/orders/pipeline.yaml`` goes (15 records).

Runs the command a new user runs (the CLI, the local launcher, spark-submit, the
Spark job, the CLI's watcher) on a copy of examples/orders (so that its output
folder in the repository is not touched), in a fresh state directory, and
splits the wall time into phases from:

- the wall clock of this process (command started, command exited) and a 50 ms
  poll of the state directory (driver.log appears = spark-submit started;
  report status ``running`` first seen = query started);
- the run report (``started_at``: the runner exists, its SparkSession is up;
  ``ended_at``: the query ended) and the launcher's exit record (``ended_at``:
  the driver process exited);
- the driver log: Spark's own lines (``Running Spark version`` = SparkContext
  starting; 1 s resolution) and Structured Streaming's progress reports (per
  batch: trigger start, batchDuration and its parts, ms resolution), and the
  runner's ``batch N: ... in X s`` lines (time inside foreachBatch).

The floor: a plain PySpark script (``bench/small_run_floor.py``) that starts a SparkSession,
reads the same 15 records and writes them as Parquet, timed the same way (command start to exit).
Each repetition runs the floor and the runner (and, with ``--baseline CHECKOUT``, the runner of
another checkout of the project: before/after in one invocation) in rotated order; the runner's
excess over the floor is a per-repetition difference.

Repeated ``--runs`` times (each a new process and state directory); the doc
shows each phase as median (min–max).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import REPO, iso_epoch, log, rotated, setup_environment, summary, write_result

EXAMPLE = REPO / "examples" / "orders"
SPARK_LINE = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) (\w+) (\S+): (.*)$")
PY_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) (\S+): (.*)$")
BATCH_LINE = re.compile(r"batch (\d+): read (\d+).* in ([\d.]+)s")
FLOOR_SCRIPT = REPO / "bench" / "small_run_floor.py"
TARGET_OVER_FLOOR_SECONDS = 2.0  # issue target: the runner within 2 s of the floor


def _spark_time(text: str) -> float:
    """Spark's log4j default pattern (yy/MM/dd HH:mm:ss, the JVM's local time zone, as this machine's)."""
    return time.mktime(datetime.strptime(text, "%y/%m/%d %H:%M:%S").timetuple())


def _py_time(text: str) -> float:
    """Python logging's asctime (local time, milliseconds)."""
    dt = datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f")
    return time.mktime(dt.timetuple()) + dt.microsecond / 1e6


def parse_driver_log(text: str) -> dict[str, Any]:
    """Spark's milestones, the streaming progress reports and the runner's batch lines of a driver log."""
    events: dict[str, float] = {}
    progress: list[dict[str, Any]] = []
    batches: dict[int, dict[str, float]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = SPARK_LINE.match(line)
        if m:
            at, _, who, msg = m.groups()
            if who == "SparkContext" and msg.startswith("Running Spark version"):
                events.setdefault("spark_context_starting", _spark_time(at))
            elif who == "BlockManager" and msg.startswith("Initialized BlockManager"):
                events.setdefault("spark_context_ready", _spark_time(at))
            elif who == "MicroBatchExecution" and msg.startswith("Starting ["):
                events.setdefault("query_starting", _spark_time(at))
            elif who == "SparkContext" and msg.startswith("Successfully stopped SparkContext"):
                events.setdefault("spark_context_stopped", _spark_time(at))
            elif who == "ProgressReporter" and "made progress" in msg and msg.rstrip().endswith("{"):
                block = ["{"]
                i += 1
                while i < len(lines) and lines[i] != "}":
                    block.append(lines[i])
                    i += 1
                block.append("}")
                try:
                    progress.append(json.loads("\n".join(block)))
                except ValueError:
                    pass
        p = PY_LINE.match(line)
        if p:
            at, _, who, msg = p.groups()
            b = BATCH_LINE.search(msg) if who.endswith("spark.runner") else None
            if b:
                batches[int(b.group(1))] = {"done": _py_time(at), "seconds": float(b.group(3)), "read": int(b.group(2))}
            if who == "py4j.clientserver" and "Python Server ready" in msg:
                events.setdefault("python_callback_ready", _py_time(at))
            if who == "airflow_conduit.spark.entrypoint" and "driver started" in msg:
                events.setdefault("python_driver_started", _py_time(at))
        i += 1
    return {"events": events, "progress": progress, "batches": batches}


def code_environment(checkout: Path) -> dict[str, str]:
    """This process's environment with ``checkout``'s package first on the path (the installed package may be
    another checkout's: an editable install points at one folder)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return env


def run_floor(work: Path, timeout: float) -> dict[str, Any]:
    """The plain PySpark script on a fresh copy of the example's input; its wall time and milestones."""
    if work.exists():
        shutil.rmtree(work)
    source = work / "in"
    shutil.copytree(EXAMPLE / "data" / "in", source)
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(FLOOR_SCRIPT), str(source), str(work / "out")], capture_output=True,
                          text=True, timeout=timeout, cwd=str(work))
    t_exit = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"the plain PySpark script exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    marks = json.loads(proc.stdout.strip().splitlines()[-1])
    steps = [
        ("python start, pyspark import", t0, marks["imported"]),
        ("SparkSession start (JVM launch, SparkContext, session)", marks["imported"], marks["session"]),
        ("read the records and write them (one job)", marks["session"], marks["written"]),
        ("spark.stop", marks["written"], marks["stopped"]),
        ("stopped → process exited (JVM exit)", marks["stopped"], t_exit),
    ]
    return {"wall_seconds": t_exit - t0, "phases": {name: b - a for name, a, b in steps}}


def run_once(work: Path, poll: float, timeout: float, checkout: Path = REPO) -> dict[str, Any]:
    """One ``airflow-conduit run`` of ``checkout``'s code on a fresh copy of the example; the timestamps of its phases."""
    if work.exists():
        shutil.rmtree(work)
    example = work / "orders"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("out"))
    state = work / "state"
    cli = Path(sys.executable).parent / "airflow-conduit"
    cmd = [str(cli), "run", str(example / "pipeline.yaml"), "--state-dir", str(state)]
    seen: dict[str, float] = {}
    out_path = work / "cli.out"
    t0 = time.time()
    with open(out_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=str(work), env=code_environment(checkout))
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"airflow-conduit run did not finish within {timeout:.0f}s")
            now = time.time()
            runs = list((state / "runs").glob("*/driver.log")) if (state / "runs").exists() else []
            if runs:
                seen.setdefault("driver_log_created", now)
                try:
                    report = json.loads((runs[0].parent / "report.json").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    report = None
                if report:
                    seen.setdefault(f"status:{report.get('status')}", now)
            time.sleep(poll)
    t_exit = time.time()
    output = out_path.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"airflow-conduit run exited {proc.returncode}:\n{output[-3000:]}")
    run_dir = next((state / "runs").iterdir())
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    exit_record = json.loads((run_dir / "exit.json").read_text(encoding="utf-8"))
    parsed = parse_driver_log((run_dir / "driver.log").read_text(encoding="utf-8", errors="replace"))
    return phases(t0, t_exit, seen, report, exit_record, parsed) | {"cli_output": output.splitlines()[-6:]}


def phases(t0: float, t_exit: float, seen: dict[str, float], report: dict, exit_record: dict, parsed: dict) -> dict[str, Any]:
    """Consecutive phases (they add up to the wall time) and the per-batch figures."""
    ev = parsed["events"]
    started = iso_epoch(report["started_at"])
    ended = iso_epoch(report["ended_at"])
    driver_exit = iso_epoch(exit_record["ended_at"])
    submitted = seen.get("driver_log_created", t0)
    query = ev.get("query_starting") or seen.get("status:running") or started
    progress = parsed["progress"]
    first_trigger = iso_epoch(progress[0]["timestamp"]) if progress else None
    sc = ev.get("spark_context_starting", submitted)
    driver = min(max(ev.get("python_driver_started", sc), submitted), sc)  # absent in older drivers' logs: 0 s
    sc_ready = min(max(ev.get("spark_context_ready", sc), sc), started)
    batches = []
    for p in progress:
        bid = int(p["batchId"])
        ours = parsed["batches"].get(bid, {})
        d = p.get("durationMs") or {}
        batches.append({
            "batch_id": bid,
            "rows": p.get("numInputRows"),
            "trigger_start": iso_epoch(p["timestamp"]),
            "batch_seconds": p.get("batchDuration", 0) / 1000,  # Structured Streaming: trigger start to commit
            "foreach_batch_seconds": d.get("addBatch", 0) / 1000,  # our foreachBatch (plan + pass + DLQ + markers)
            "runner_seconds": ours.get("seconds"),  # the runner's own log line (inside _process_batch)
            "planning_seconds": d.get("queryPlanning", 0) / 1000,
            "offsets_and_commit_seconds": (d.get("latestOffset", 0) + d.get("getBatch", 0) + d.get("walCommit", 0)
                                           + d.get("commitOffsets", 0)) / 1000,
        })
    last_batch_end = max((b["trigger_start"] + b["batch_seconds"] for b in batches), default=query)
    marks = [
        ("command start → spark-submit started (CLI: Python + Airflow imports, spec check, packaging)", t0, submitted),
        ("spark-submit started → Python driver started (spark-submit's JVM launch, the driver's Python start)", submitted, driver),
        ("Python driver started → SparkContext starting (the driver's imports: PySpark, the runner)", driver, sc),
        ("SparkContext start (JVM side: SparkEnv, block manager, executor)", sc, sc_ready),
        ("SparkContext ready → runner created (SparkSession, session settings; report started_at)", sc_ready, started),
        ("pipeline setup → query started (sources, destinations, DLQ, streaming query start)", started, query),
        ("query started → first batch triggered", query, first_trigger or query),
        ("micro-batches (trigger start → commit, all batches)", first_trigger or query, last_batch_end),
        ("last batch → query ended (no more input; report ended_at)", last_batch_end, ended),
        ("query ended → driver exited (spark.stop, JVM exit)", ended, driver_exit),
        ("driver exited → command exited (the CLI's next poll, summary)", driver_exit, t_exit),
    ]
    return {
        "wall_seconds": t_exit - t0,
        "phases": {name: b - a for name, a, b in marks},
        "batches": batches,
        "events": {k: v - t0 for k, v in {**ev, **seen, "started_at": started, "ended_at": ended,
                                          "driver_exit": driver_exit}.items()},
        "totals": report.get("totals"),
        "status": report.get("status"),
    }


def runner_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runner's figures over its runs: wall time, phases, first and later batches."""
    names = list(runs[0]["phases"]) if runs else []
    first = [r["batches"][0] for r in runs if r["batches"]]
    later = [b for r in runs for b in r["batches"][1:]]
    batch_keys = ("batch_seconds", "foreach_batch_seconds", "runner_seconds", "planning_seconds", "offsets_and_commit_seconds")
    return {
        "wall_seconds": summary(r["wall_seconds"] for r in runs),
        "phases": {n: summary(r["phases"][n] for r in runs) for n in names},
        "phase_order": names,  # the JSON file's keys are sorted
        "first_batch": {k: summary(b[k] or 0 for b in first) for k in batch_keys},
        "later_batches": {k: summary(b[k] or 0 for b in later) for k in batch_keys},
        "batches_per_run": summary(len(r["batches"]) for r in runs),
    }


def over_floor(runs: list[dict[str, Any]], floors: list[dict[str, Any]]) -> dict[str, Any]:
    """Per repetition: the runner's wall time minus the floor's, and their ratio."""
    return {
        "seconds": summary(r["wall_seconds"] - f["wall_seconds"] for r, f in zip(runs, floors)),
        "ratio": summary(r["wall_seconds"] / f["wall_seconds"] for r, f in zip(runs, floors)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--poll", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--baseline", default=None, metavar="CHECKOUT",
                        help="also run the CLI with another checkout's code (before/after in one invocation)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_environment()
    root = Path(tempfile.mkdtemp(prefix="conduit-bench-small-"))
    os.environ.setdefault("AIRFLOW_HOME", str(root / "airflow-home"))  # the CLI needs no Airflow DB; keep it out of ~
    baseline = Path(args.baseline).resolve() if args.baseline else None
    variants = ["floor", "runner", *(["baseline"] if baseline else [])]
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    try:
        for k in range(args.runs):
            for variant in rotated(variants, k):
                work = root / f"{variant}-{k}"
                if variant == "floor":
                    result = run_floor(work, args.timeout)
                    log(f"run {k + 1} floor (plain PySpark script): {result['wall_seconds']:.1f}s wall")
                else:
                    result = run_once(work, args.poll, args.timeout, REPO if variant == "runner" else baseline)
                    log(f"run {k + 1} {variant}: {result['wall_seconds']:.1f}s wall, {len(result['batches'])} batches, "
                        f"totals {result['totals']}")
                results[variant].append(result)
                for name, seconds in result["phases"].items():
                    log(f"    {seconds:6.1f}s  {name}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    runs, floors = results["runner"], results["floor"]
    result = {
        "command": "airflow-conduit run examples/orders/pipeline.yaml --state-dir <new temporary folder>",
        "records": 15,
        "runs": runs,
        **runner_summary(runs),
        "floor": {
            "script": "bench/small_run_floor.py: SparkSession (local[*], Spark's defaults), read the same 15 JSON "
                      "lines with the example's schema, write them as Parquet, stop",
            "runs": floors,
            "wall_seconds": summary(f["wall_seconds"] for f in floors),
            "phases": {n: summary(f["phases"][n] for f in floors) for n in (floors[0]["phases"] if floors else {})},
            "phase_order": list(floors[0]["phases"]) if floors else [],
        },
        "floor_wall_s": summary(f["wall_seconds"] for f in floors),  # the key bench/targets.py and sections.py read
        "over_floor": over_floor(runs, floors),
        "target_over_floor_seconds": TARGET_OVER_FLOOR_SECONDS,
        "load_average_at_end": os.getloadavg(),
    }
    if baseline:
        result["baseline"] = {"checkout": str(baseline), "runs": results["baseline"], **runner_summary(results["baseline"]),
                              "over_floor": over_floor(results["baseline"], floors),
                              "runner_over_baseline_ratio": summary(r["wall_seconds"] / b["wall_seconds"]
                                                                    for r, b in zip(runs, results["baseline"]))}
    path = write_result("small_run", result, args.out)
    extra = ""
    if baseline:
        extra = (f"; baseline {result['baseline']['wall_seconds']['median']:.1f}s "
                 f"(+{result['baseline']['over_floor']['seconds']['median']:.1f}s over the floor)")
    log(f"wall {result['wall_seconds']['median']:.1f}s, floor {result['floor']['wall_seconds']['median']:.1f}s: "
        f"+{result['over_floor']['seconds']['median']:.1f}s over the floor (target ≤ {TARGET_OVER_FLOOR_SECONDS:.0f}s; "
        f"median of {len(runs)}){extra}; written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
