"""Benchmark 5: memory and STATE_DIR over hundreds of micro-batches of one continuous pipeline (method: docs/benchmarks.md)."""

import gc
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import arguments, log, workdir, setup_environment, table, write_result

TITLE = "5. Continuous soak: memory and STATE_DIR"
LATE_FROM = 110  # after the longest retention window in STATE_DIR (100 batches) is full
IN_FLIGHT_FILES = 8  # a sample may catch one batch in flight before the purge: a bounded file count moves this much
MIB = 1024 * 1024
MEMORY = {"python_rss": "Python RSS", "jvm_heap_used_after_gc": "JVM heap after GC", "jvm_rss": "JVM RSS (not judged)",
          "python_objects": "Python objects"}
JUDGED = ("python_rss", "jvm_heap_used_after_gc")
SPEC = """
version: "1"
pipeline:
  id: soak
  mode: continuous
  trigger-interval: {interval}
  sources:
    - id: gen
      plugin: generator
      settings: {{records: 1000000000000, rate: {rate}, bad-record-ratio: 0.01, seed: 1, fields: {{id: BIGINT, customer: STRING, amount: DOUBLE, ts: TIMESTAMP}}}}
      processors:
        - {{id: drop-small, plugin: filter, settings: {{condition: "amount >= 5"}}}}
  processors:
    - {{id: enrich, plugin: sql, settings: {{select: ["*", "round(amount * 100) AS amount_cents", "to_date(ts) AS order_date"]}}}}
  destinations:
    - {{id: lake, plugin: builtin:file, settings: {{path: "{root}/lake", format: parquet}}}}
  dead-letter-queue:
    plugin: builtin:file
    settings: {{path: "{root}/dlq", format: json}}
    window-size: 10000
    window-nack-threshold: 5000
"""


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


def analyse(samples: list[dict[str, Any]]) -> dict[str, Any]:
    late = [s for s in samples if s["batches"] >= LATE_FROM]

    def trends(of: list[dict[str, Any]]) -> dict[str, Any]:
        xs = [s["batches"] for s in of]
        return {**{k: trend(xs, [s[k] for s in of]) for k in MEMORY},
                **{f"state_{k}": trend(xs, [s["state_dir"][k] for s in of]) for k in ("bytes", "files")}}

    memory_late = trends(late)
    grows = {k: None if t is None else t["fitted_change"] > max(3 * t["noise"], 1000 if k == "python_objects" else MIB)
             for k, t in memory_late.items() if k in MEMORY}
    return {"all": trends(samples), "late": memory_late, "memory_grows": grows, "late_from": LATE_FROM}


def verdicts(r: dict[str, Any]) -> dict[str, bool | None]:
    """memory_flat: no judged memory measure grows once the retention windows are full; state_dir_bounded: STATE_DIR's late
    growth under 1 KiB a batch and its file count within one batch in flight. None: too few late samples."""
    a = r["analysis"]
    grows = a["memory_grows"]
    flat = None if any(grows.get(k) is None for k in JUDGED) else not any(grows[k] for k in JUDGED)
    late = a.get("late") or {f"state_{k}": v for k, v in a["state_dir_after_retention"].items()}
    files, size = late.get("state_files"), late.get("state_bytes")
    bounded = (files["fitted_change"] <= max(3 * files["noise"], IN_FLIGHT_FILES) and size["per_batch"] < 1024) if files and size else None
    return {"memory_flat": flat, "state_dir_bounded": bounded}


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__, batches=200, warmup=10, samples=9, rate=2000, interval="500ms", spark_retention=100, timeout=1800.0)
    setup_environment()
    confs = ("spark.ui.retainedJobs", "spark.ui.retainedStages", "spark.sql.ui.retainedExecutions")
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join(f"--conf {c}={args.spark_retention}" for c in confs) + " pyspark-shell"
    from airflow_conduit.pipeline import load_pipeline_from_string
    from airflow_conduit.spark.runner import execute
    from airflow_conduit.spark.session import build_session

    samples, runners, outcome = [], [], {}
    step = (args.batches - args.warmup) / max(args.samples - 1, 1)
    points = sorted({int(round(args.warmup + k * step)) for k in range(args.samples)})

    def done() -> int:
        entries = runners[0].report.batches if runners else []
        return entries[-1]["batch_id"] + 1 if entries else 0

    with workdir("soak") as work:
        spec = load_pipeline_from_string(SPEC.format(interval=args.interval, rate=args.rate, root=work), str(work / "p.yaml"), base_dir=str(work))
        spark = build_session("airflow-conduit-bench-soak", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        thread = threading.Thread(target=lambda: outcome.update(result=execute(spark, spec, state_dir=work / "state", run_id="soak",
                                                                               on_runner=runners.append)), daemon=True)
        started = time.monotonic()
        thread.start()
        for point in points:
            while done() < point:
                if not thread.is_alive() or time.monotonic() > started + args.timeout:
                    raise RuntimeError(f"{point} batches not reached (the pipeline ended or the timeout passed): {outcome}")
                time.sleep(0.05)
            samples.append(sample(spark, work / "state", done(), started))
            log(f"sample {samples[-1]}")
        runners[0].request_stop("soak finished")
        thread.join(timeout=300)
        code, report = outcome["result"]
        spark.stop()
    write_result("soak", {"batches": done(), "rate": args.rate, "interval": args.interval, "exit_code": code, "status": report.status,
                          "totals": report.totals, "samples": samples, "analysis": analyse(samples),
                          "rows_per_batch": round(report.totals["read"] / max(done(), 1))}, args.out)
    return 0


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
    everything = a.get("all") or {**a["memory"], **{f"state_{k}": v for k, v in a["state_dir"].items()}}
    late = a["late"] if "late" in a else {**a["memory_late"], **{f"state_{k}": v for k, v in a["state_dir_after_retention"].items()}}
    rows = [[label, per_batch(everything.get(k), "objects" if k == "python_objects" else "KiB"),
             per_batch(late.get(k), "objects" if k == "python_objects" else "KiB")] for k, label in MEMORY.items()]
    rows += [["STATE_DIR bytes", per_batch(everything.get("state_bytes")), per_batch(late.get("state_bytes"))],
             ["STATE_DIR files", per_batch(everything.get("state_files"), "files"), per_batch(late.get("state_files"), "files")]]
    return [f"{r['batches']} micro-batches in {samples[-1]['seconds'] / 60:.1f} min, {r['rows_per_batch']:,} records per batch, "
            f"ended `{r['status']}` (exit code {r['exit_code']}); {r['totals']['read']:,} records read, {r['totals']['dlq']:,} to the DLQ.",
            table(["batch", "time", "Python RSS", "Python objects", "JVM RSS", "JVM heap after GC", "STATE_DIR", "files"],
                  [[s["batches"], f"{s['seconds']:.0f} s", mib(s["python_rss"]), f"{s['python_objects']:,}", mib(s["jvm_rss"]),
                    mib(s["jvm_heap_used_after_gc"]), f"{s['state_dir']['bytes'] / 1024:,.1f} KiB", f"{s['state_dir']['files']:,}"] for s in samples]),
            table(["growth per batch", "all samples", f"from batch {a.get('late_from', LATE_FROM)}"], rows)]


if __name__ == "__main__":
    sys.exit(main())
