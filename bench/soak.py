"""Benchmark 5: memory and STATE_DIR over hundreds of micro-batches of one continuous pipeline (method: docs/benchmarks.md)."""

import gc
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bench.error_handling import ENRICH
from bench.common import benchmark, file_dlq, log, pipeline_yaml, run_pipeline, spark_session, step, table, workdir

TITLE = "5. Continuous soak: memory and STATE_DIR"
LATE_FROM = 110  # after the longest retention window in STATE_DIR (100 batches) is full
IN_FLIGHT_FILES = 8  # a sample may catch one batch in flight before the purge: a bounded file count moves this much
MIB = 1024 * 1024
MEMORY = {"python_rss": "Python RSS", "jvm_heap_used_after_gc": "JVM heap after GC", "jvm_rss": "JVM RSS (not judged)",
          "python_objects": "Python objects"}
JUDGED = ("python_rss", "jvm_heap_used_after_gc")
STATE = ("bytes", "files")


def folder_size(path: Path) -> tuple[int, int]:
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total, files = total + os.lstat(os.path.join(root, name)).st_size, files + 1
            except FileNotFoundError:  # pruned while we walk
                pass
    return total, files


def sample(spark, state: Path, batches: int, started: float) -> dict[str, Any]:
    import psutil

    gc.collect()
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    java = next((c for c in psutil.Process().children(recursive=True) if "java" in c.name()), None)
    size, files = folder_size(state)
    return {"batches": batches, "seconds": time.monotonic() - started, "python_rss": psutil.Process().memory_info().rss,
            "python_objects": len(gc.get_objects()), "jvm_rss": java.memory_info().rss if java else None,
            "jvm_heap_used_after_gc": runtime.totalMemory() - runtime.freeMemory(), "state_dir": {"bytes": size, "files": files}}


def trend(xs: list[float], ys: list[float | None]) -> dict[str, float] | None:
    """Least-squares slope, the fitted change over the range and the residuals' standard deviation."""
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if len(pts) < 2 or len({x for x, _ in pts}) < 2:
        return None
    slope, intercept = statistics.linear_regression([x for x, _ in pts], [y for _, y in pts])
    noise = statistics.pstdev([y - (intercept + slope * x) for x, y in pts])
    return {"per_batch": slope, "fitted_change": slope * (pts[-1][0] - pts[0][0]), "noise": noise}


def soak_spec(interval: str, rate: int, root: Path) -> str:
    fields = {"id": "BIGINT", "customer": "STRING", "amount": "DOUBLE", "ts": "TIMESTAMP"}
    source = step("gen", "generator", records=1_000_000_000_000, rate=rate, bad_record_ratio=0.01, seed=1, fields=fields)
    source["processors"] = [step("drop-small", "filter", condition="amount >= 5")]
    return pipeline_yaml("soak", [source], [step("lake", "builtin:file", path=root / "lake", format="parquet")],
                         [step("enrich", "sql", select=ENRICH)], file_dlq(root / "dlq", "json", window_size=10000, window_nack_threshold=5000),
                         mode="continuous", trigger_interval=interval)


def analyse(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Trends over all samples and over those once the retention windows are full; whether memory grows late."""
    def trends(of: list[dict[str, Any]], measures: Any, value: Callable[[dict, str], Any]) -> dict[str, Any]:
        return {k: trend([s["batches"] for s in of], [value(s, k) for s in of]) for k in measures}

    late = [s for s in samples if s["batches"] >= LATE_FROM]
    memory, state = (lambda s, k: s[k]), (lambda s, k: s["state_dir"][k])
    memory_late = trends(late, MEMORY, memory)
    grows = {k: None if t is None else t["fitted_change"] > max(3 * t["noise"], 1000 if k == "python_objects" else MIB)
             for k, t in memory_late.items()}
    return {"memory": trends(samples, MEMORY, memory), "memory_late": memory_late, "memory_grows": grows, "late_from": LATE_FROM,
            "state_dir": trends(samples, STATE, state), "state_dir_after_retention": trends(late, STATE, state)}


def verdicts(r: dict[str, Any]) -> dict[str, bool | None]:
    """memory_flat: no judged memory measure grows once the retention windows are full; state_dir_bounded: STATE_DIR's late
    growth under 1 KiB a batch and its file count within one batch in flight. None: too few late samples."""
    grows, late = r["analysis"]["memory_grows"], r["analysis"]["state_dir_after_retention"]
    flat = None if any(grows.get(k) is None for k in JUDGED) else not any(grows[k] for k in JUDGED)
    files, size = late.get("files"), late.get("bytes")
    bounded = (files["fitted_change"] <= max(3 * files["noise"], IN_FLIGHT_FILES) and size["per_batch"] < 1024) if files and size else None
    return {"memory_flat": flat, "state_dir_bounded": bounded}


def measure(args) -> dict[str, Any]:
    samples, runners, outcome = [], [], {}
    step = (args.batches - args.warmup) / max(args.samples - 1, 1)
    points = sorted({int(round(args.warmup + k * step)) for k in range(args.samples)})

    def done() -> int:
        entries = runners[0].report.batches if runners else []
        return entries[-1]["batch_id"] + 1 if entries else 0

    with workdir("soak") as work:
        retention = ("spark.ui.retainedJobs", "spark.ui.retainedStages", "spark.sql.ui.retainedExecutions")
        spark = spark_session("airflow-conduit-bench-soak", "1g", conf=dict.fromkeys(retention, args.spark_retention))
        thread = threading.Thread(daemon=True, target=lambda: outcome.update(
            run_pipeline(spark, soak_spec(args.interval, args.rate, work), work, on_runner=runners.append)))
        started = time.monotonic()
        thread.start()
        for point in points:
            while done() < point:
                if not thread.is_alive() or time.monotonic() > started + args.timeout:
                    raise RuntimeError(f"{point} batches not reached (the pipeline ended or the timeout passed)")
                time.sleep(0.05)
            samples.append(sample(spark, work / "state", done(), started))
            log(f"sample {samples[-1]}")
        runners[0].request_stop("soak finished")
        thread.join(timeout=300)
        spark.stop()
    if not outcome:  # run_pipeline returns only when the runner exits 0
        raise RuntimeError("the runner failed after the last sample (its error is in the log above)")
    return {"batches": done(), "exit_code": 0, "status": runners[0].report.status, "totals": outcome["totals"],
            "samples": samples, "analysis": analyse(samples), "rows_per_batch": round(outcome["totals"]["read"] / max(done(), 1))}


def tables(r: dict[str, Any]) -> list[str]:
    def mib(v: float | None) -> str:
        return "n/a" if v is None else f"{v / MIB:,.1f} MiB"

    def per_batch(t: dict[str, float] | None, unit: str = "KiB") -> str:
        if not t:
            return "n/a"
        if unit == "KiB":
            return f"{t['per_batch'] / 1024:+,.1f} KiB (± {t['noise'] / 1024:,.0f})"
        return f"{t['per_batch']:+,.2f} {unit} (± {t['noise']:,.1f})"

    a, samples = r["analysis"], r["samples"]
    rows = [[label, per_batch(a["memory"].get(k), "objects" if k == "python_objects" else "KiB"),
             per_batch(a["memory_late"].get(k), "objects" if k == "python_objects" else "KiB")] for k, label in MEMORY.items()]
    rows += [[f"STATE_DIR {k}", per_batch(a["state_dir"].get(k), unit), per_batch(a["state_dir_after_retention"].get(k), unit)]
             for k, unit in (("bytes", "KiB"), ("files", "files"))]
    return [f"{r['batches']} micro-batches in {samples[-1]['seconds'] / 60:.1f} min, {r['rows_per_batch']:,} records per batch, "
            f"ended `{r['status']}` (exit code {r['exit_code']}); {r['totals']['read']:,} records read, {r['totals']['dlq']:,} to the DLQ.",
            table(["batch", "time", "Python RSS", "Python objects", "JVM RSS", "JVM heap after GC", "STATE_DIR", "files"],
                  [[s["batches"], f"{s['seconds']:.0f} s", mib(s["python_rss"]), f"{s['python_objects']:,}", mib(s["jvm_rss"]),
                    mib(s["jvm_heap_used_after_gc"]), f"{s['state_dir']['bytes'] / 1024:,.1f} KiB", f"{s['state_dir']['files']:,}"] for s in samples]),
            table(["growth per batch", "all samples", f"from batch {a['late_from']}"], rows)]


if __name__ == "__main__":
    benchmark("soak", __doc__, measure, batches=200, warmup=10, samples=9, rate=2000, interval="500ms", spark_retention=100, timeout=1800.0)
