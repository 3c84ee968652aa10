"""Continuous soak: memory and STATE_DIR over hundreds of micro-batches of one continuous pipeline.

A ``mode: continuous`` pipeline with a ``generator`` source (1% bad records,
two processors, a Parquet lake, a JSON DLQ, the nack window on) runs in this
process on a local[2] SparkSession (the runner's own session settings), for
``--batches`` micro-batches. At a few points (the first after ``--warmup``
batches, the last at the end) the benchmark samples, between two looks at
the run report:

- the driver's Python process: RSS (after ``gc.collect()``) and the number of
  objects the garbage collector tracks;
- the JVM (the driver's java child process): RSS, and the heap in use after a
  ``System.gc()`` (``Runtime.totalMemory() - freeMemory()``);
- STATE_DIR: bytes and files, in all and per top-level folder.

Growth per batch is the least-squares slope over the samples; a trend counts
as growth when the fitted growth over the run exceeds both the noise of the
samples around the fit (3 standard deviations) and 1 MiB. STATE_DIR is
expected to stop growing once its retention windows are full (commit markers:
100 batches per destination; nack-window files: 20; the report's batch list:
100; Spark's offset and commit logs: ``minBatchesToRetain``, 100), so its
growth is also reported over the samples after batch 110.

Spark itself keeps the last 1,000 jobs, stages and SQL executions for its
status store (also with the UI disabled) and the last 100 progress reports of
a query: bounded, but at 2-3 jobs per batch not full within a few hundred
batches, so its filling would look like a trend. The soak lowers those limits
to ``--spark-retention`` (100) so that they fill early, and judges memory on
the samples after batch 110 (``late``): what grows there is not Spark's
bounded history.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import log, setup_environment, write_result

RETENTION_BATCHES = 100
LATE_FROM = RETENTION_BATCHES + 10  # the longest retention window in STATE_DIR (commit markers, Spark's logs, report batches)
MIB = 1024 * 1024


def soak_spec(out: Path, dlq: Path, rate: int, interval: str, bad_ratio: float) -> str:
    return f"""
version: "1"
pipeline:
  id: soak
  mode: continuous
  trigger-interval: {interval}
  sources:
    - id: gen
      plugin: generator
      settings:
        records: 1000000000000
        rate: {rate}
        bad-record-ratio: {bad_ratio}
        seed: 1
        fields: {{id: BIGINT, customer: STRING, amount: DOUBLE, ts: TIMESTAMP}}
      processors:
        - id: drop-small
          plugin: filter
          settings: {{condition: "amount >= 5"}}
  processors:
    - id: enrich
      plugin: sql
      settings:
        select: ["*", "round(amount * 100) AS amount_cents", "to_date(ts) AS order_date"]
  destinations:
    - id: lake
      plugin: builtin:file
      settings: {{path: {json.dumps(str(out))}, format: parquet}}
  dead-letter-queue:
    plugin: builtin:file
    settings: {{path: {json.dumps(str(dlq))}, format: json}}
    window-size: 10000
    window-nack-threshold: 5000
"""


# -- sampling -----------------------------------------------------------------------------------------


def folder_size(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``."""
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
                files += 1
            except FileNotFoundError:  # pruned while we walk
                pass
    return total, files


def state_dir_sizes(state: Path) -> dict[str, Any]:
    parts = {}
    if state.exists():
        for child in sorted(state.iterdir()):
            b, f = folder_size(child) if child.is_dir() else (child.stat().st_size, 1)
            parts[child.name] = {"bytes": b, "files": f}
    return {"bytes": sum(p["bytes"] for p in parts.values()), "files": sum(p["files"] for p in parts.values()), "parts": parts}


def jvm_process():
    """The driver's JVM: the java process among this process's children (py4j launched it)."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            if "java" in child.name():
                return child
        except psutil.Error:
            continue
    return None


def sample(spark, state: Path, batches: int, started: float) -> dict[str, Any]:
    import psutil

    gc.collect()
    me = psutil.Process()
    jvm = spark.sparkContext._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    jvm.java.lang.System.gc()
    heap_used = runtime.totalMemory() - runtime.freeMemory()
    java = jvm_process()
    return {
        "batches": batches,
        "seconds": time.monotonic() - started,
        "python_rss": me.memory_info().rss,
        "python_objects": len(gc.get_objects()),
        "jvm_rss": java.memory_info().rss if java is not None else None,
        "jvm_heap_used_after_gc": heap_used,
        "jvm_heap_committed": runtime.totalMemory(),
        "jvm_heap_max": runtime.maxMemory(),
        "state_dir": state_dir_sizes(state),
    }


def batches_done(runner) -> int:
    """Micro-batches the runner has completed (the report keeps the last 100 entries; ids count from 0)."""
    entries = runner.report.batches if runner is not None else []
    return entries[-1]["batch_id"] + 1 if entries else 0


# -- trend --------------------------------------------------------------------------------------------


def trend(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Least-squares slope of ys over xs, the fitted change over the range, and the residual noise."""
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    residuals = [y - (my + slope * (x - mx)) for x, y in pts]
    noise = statistics.pstdev(residuals) if len(residuals) > 1 else 0.0
    span = pts[-1][0] - pts[0][0]
    return {"per_batch": slope, "fitted_change": slope * span, "noise": noise, "first": pts[0][1], "last": pts[-1][1],
            "from_batch": pts[0][0], "to_batch": pts[-1][0]}


def grows(t: dict[str, float] | None, floor: float = MIB) -> bool | None:
    """A growth trend: the fitted growth exceeds the samples' noise (3 sd) and ``floor``."""
    if t is None:
        return None
    return t["fitted_change"] > max(3 * t["noise"], floor)


def analyse(samples: list[dict[str, Any]]) -> dict[str, Any]:
    xs = [s["batches"] for s in samples]
    memory = {
        key: trend(xs, [s[key] for s in samples])
        for key in ("python_rss", "jvm_heap_used_after_gc", "jvm_rss", "python_objects")
    }
    state = {"bytes": trend(xs, [s["state_dir"]["bytes"] for s in samples]),
             "files": trend(xs, [s["state_dir"]["files"] for s in samples])}
    late = [s for s in samples if s["batches"] >= LATE_FROM]
    lx = [s["batches"] for s in late]
    memory_late = {key: trend(lx, [s[key] for s in late]) for key in memory}
    verdicts = {key: grows(t, floor=1000 if key == "python_objects" else MIB) for key, t in memory_late.items()}
    state_late = {"bytes": trend(lx, [s["state_dir"]["bytes"] for s in late]),
                  "files": trend(lx, [s["state_dir"]["files"] for s in late])}
    parts = sorted({p for s in samples for p in s["state_dir"]["parts"]})
    per_part = {p: {"first": samples[0]["state_dir"]["parts"].get(p), "last": samples[-1]["state_dir"]["parts"].get(p),
                    "late_bytes": trend(lx, [s["state_dir"]["parts"].get(p, {}).get("bytes") for s in late]),
                    "late_files": trend(lx, [s["state_dir"]["parts"].get(p, {}).get("files") for s in late])}
                for p in parts}
    return {"memory": memory, "memory_late": memory_late, "memory_grows": verdicts, "late_from": LATE_FROM, "state_dir": state, "state_dir_after_retention": state_late,
            "state_dir_parts": per_part}


# -- run ----------------------------------------------------------------------------------------------


def sample_points(total: int, warmup: int, count: int) -> list[int]:
    """``count`` batch numbers from ``warmup`` to ``total``, evenly spaced."""
    if count < 2:
        return [total]
    step = (total - warmup) / (count - 1)
    return sorted({int(round(warmup + k * step)) for k in range(count)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10, help="batches before the first sample")
    parser.add_argument("--samples", type=int, default=9, help="samples from --warmup to --batches, evenly spaced")
    parser.add_argument("--rate", type=int, default=2000, help="generator records per second")
    parser.add_argument("--interval", default="500ms", help="trigger-interval")
    parser.add_argument("--bad-ratio", type=float, default=0.01)
    parser.add_argument("--spark-retention", type=int, default=100,
                        help="spark.ui.retainedJobs/Stages, spark.sql.ui.retainedExecutions (0: Spark's defaults)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_environment()
    os.environ.setdefault("AIRFLOW_CONDUIT_SPARK_MASTER", "local[2]")
    if args.spark_retention > 0:  # read when pyspark launches the JVM (build_session below)
        confs = ("spark.ui.retainedJobs", "spark.ui.retainedStages", "spark.sql.ui.retainedExecutions")
        os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join(f"--conf {c}={args.spark_retention}" for c in confs) + " pyspark-shell"
    from airflow_conduit.pipeline import load_pipeline_from_string
    from airflow_conduit.pipeline.spec_durations import parse_duration
    from airflow_conduit.spark.runner import execute
    from airflow_conduit.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="conduit-bench-soak-"))
    state, out, dlq = work / "state", work / "lake", work / "dlq"
    text = soak_spec(out, dlq, args.rate, args.interval, args.bad_ratio)
    spec = load_pipeline_from_string(text, str(work / "pipeline.yaml"), base_dir=str(work))
    points = sample_points(args.batches, args.warmup, args.samples)
    samples: list[dict[str, Any]] = []
    runners: list[Any] = []
    outcome: dict[str, Any] = {}
    spark = build_session("airflow-conduit-bench-soak")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        def run() -> None:
            try:
                outcome["code"], outcome["report"] = execute(spark, spec, state_dir=state, run_id="soak", on_runner=runners.append)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                outcome["exception"] = exc

        thread = threading.Thread(target=run, name="soak-pipeline", daemon=True)
        started = time.monotonic()
        thread.start()
        deadline = started + args.timeout
        log(f"continuous pipeline: generator {args.rate} records/s, trigger-interval {args.interval}; "
            f"sampling at batches {points}")
        for point in points:
            while batches_done(runners[0] if runners else None) < point:
                if not thread.is_alive():
                    raise RuntimeError(f"the pipeline ended early: {outcome}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{point} batches not reached within {args.timeout:.0f}s")
                time.sleep(0.05)
            s = sample(spark, state, batches_done(runners[0]), started)
            samples.append(s)
            log(f"  batch {s['batches']:4d} at {s['seconds']:6.1f}s: python RSS {s['python_rss'] / MIB:7.1f} MiB, "
                f"JVM RSS {(s['jvm_rss'] or 0) / MIB:7.1f} MiB, heap after GC {s['jvm_heap_used_after_gc'] / MIB:6.1f} MiB, "
                f"STATE_DIR {s['state_dir']['bytes'] / 1024:8.1f} KiB in {s['state_dir']['files']} files")
        runners[0].request_stop("soak finished")
        thread.join(timeout=300)
        report = runners[0].report
        output = {"lake": folder_size(out), "dlq": folder_size(dlq)}
    finally:
        try:
            spark.stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if outcome.get("exception") is not None:
        raise outcome["exception"]
    ats = [b["at"] for b in report.batches]
    from bench.common import iso_epoch, summary

    gaps = [iso_epoch(b) - iso_epoch(a) for a, b in zip(ats, ats[1:])]
    result = {
        "batches": batches_done(runners[0]),
        "rate": args.rate,
        "interval": args.interval,
        "interval_seconds": parse_duration(args.interval),
        "rows_per_batch": max(1, int(args.rate * parse_duration(args.interval) + 0.999999)),
        "bad_ratio": args.bad_ratio,
        "exit_code": outcome.get("code"),
        "status": report.status,
        "totals": report.totals,
        "report_batches_kept": len(report.batches),
        "samples": samples,
        "analysis": analyse(samples),
        "seconds": samples[-1]["seconds"] if samples else None,
        "batch_interval_last_100": summary(gaps),
        "output": {k: {"bytes": b, "files": f} for k, (b, f) in output.items()},
        "retention_batches": RETENTION_BATCHES,
        "spark_retention": args.spark_retention,
    }
    path = write_result("soak", result, args.out)
    a = result["analysis"]
    for key, t in a["memory_late"].items():
        if t:
            log(f"{key}: {t['first']:,.0f} -> {t['last']:,.0f}, {t['per_batch']:,.1f}/batch (noise {t['noise']:,.0f}); "
                f"grows: {a['memory_grows'][key]}")
    log(f"written to {path}")
    return 0


# -- verdicts and the report's section -----------------------------------------------------------------

# A sample is taken while the pipeline runs: it may catch the batch in flight (Spark's offset and commit log
# entries with their .crc files, the commit markers, a nack-window file) before Spark's asynchronous log purge and
# the runner's pruning removed the oldest ones; a bounded STATE_DIR's file count moves by up to this much.
IN_FLIGHT_FILES = 8
JUDGED_MEMORY = ("python_rss", "jvm_heap_used_after_gc")


def verdicts(r: dict[str, Any]) -> dict[str, bool | None]:
    """memory_flat: no growth trend in the judged memory measures after the retention windows filled;
    state_dir_bounded: STATE_DIR's late growth under 1 KiB a batch and its file count within the in-flight files.
    None when too few samples came after the retention windows."""
    a = r["analysis"]
    grows_ = a["memory_grows"]
    memory_flat = None if any(grows_.get(k) is None for k in JUDGED_MEMORY) else not any(grows_[k] for k in JUDGED_MEMORY)
    late = a["state_dir_after_retention"]
    files, size = late.get("files"), late.get("bytes")
    bounded = None
    if files and size:
        bounded = files["fitted_change"] <= max(3 * files["noise"], IN_FLIGHT_FILES) and size["per_batch"] < 1024
    return {"memory_flat": memory_flat, "state_dir_bounded": bounded}


TITLE = "5. Continuous soak: memory and STATE_DIR"
ABOUT = f"""
A `mode: continuous` pipeline (a `generator` source with 1 % bad records, a `filter` and an `sql` processor, a
Parquet lake, a JSON DLQ, the nack window on) runs on a `local[2]` SparkSession with the runner's settings for
hundreds of micro-batches, back to back. At each sample point: the driver's Python RSS (after `gc.collect()`) and
the objects its garbage collector tracks, the JVM's RSS and heap in use after `System.gc()`, STATE_DIR's bytes
and files. Spark's bounded job, stage and SQL history is lowered so that it fills early, and the verdicts are
judged on the samples after every retention window is full ("late": commit markers and report batches keep
100, nack-window files 20, Spark's logs 100). Growth per batch is the least-squares slope; memory grows when
the fitted late growth exceeds 3× the samples' scatter and 1 MiB (Python RSS and heap after GC are judged; JVM
RSS rises towards a plateau without a leak and is shown only). STATE_DIR is bounded when it grows by less than
1 KiB a batch and its file count by no more than {IN_FLIGHT_FILES} files (one batch in flight).
"""


def section(r: dict[str, Any]) -> str:
    from bench.markdown import section_text, table

    def mib(v: float | None) -> str:
        return "n/a" if v is None else f"{v / MIB:,.1f} MiB"

    def per_batch(t: dict[str, float] | None, unit: str = "KiB") -> str:
        if not t:
            return "n/a"
        if unit == "KiB":
            return f"{t['per_batch'] / 1024:+,.1f} KiB (± {t['noise'] / 1024:,.0f})"
        return f"{t['per_batch']:+,.2f} {unit} (± {t['noise']:,.1f})"

    a, samples = r["analysis"], r["samples"]
    facts = (f"{r['batches']} micro-batches in {samples[-1]['seconds'] / 60:.1f} min, {r['rows_per_batch']:,} records per batch, "
             f"ended `{r['status']}` (exit code {r['exit_code']}); {r['totals']['read']:,} records read, {r['totals']['dlq']:,} to the DLQ.")
    sample_rows = [[s["batches"], f"{s['seconds']:.0f} s", mib(s["python_rss"]), f"{s['python_objects']:,}", mib(s["jvm_rss"]),
                    mib(s["jvm_heap_used_after_gc"]), f"{s['state_dir']['bytes'] / 1024:,.1f} KiB", f"{s['state_dir']['files']:,}"]
                   for s in samples]
    names = {"python_rss": "Python RSS", "jvm_heap_used_after_gc": "JVM heap after GC", "jvm_rss": "JVM RSS (not judged)",
             "python_objects": "Python objects"}
    trend_rows = [[names[k], per_batch(a["memory"].get(k), "objects" if k == "python_objects" else "KiB"),
                   per_batch(a["memory_late"].get(k), "objects" if k == "python_objects" else "KiB")] for k in names]
    late = a["state_dir_after_retention"]
    trend_rows.append(["STATE_DIR bytes", per_batch(a["state_dir"].get("bytes")), per_batch(late.get("bytes"))])
    trend_rows.append(["STATE_DIR files", per_batch(a["state_dir"].get("files"), "files"), per_batch(late.get("files"), "files")])
    return section_text(TITLE, ABOUT, facts,
                        table(["batch", "time", "Python RSS", "Python objects", "JVM RSS", "JVM heap after GC", "STATE_DIR", "files"], sample_rows),
                        table(["growth per batch", "all samples", f"from batch {a.get('late_from', LATE_FROM)}"], trend_rows))


if __name__ == "__main__":
    sys.exit(main())
