"""Benchmark 1c: where the tasks' CPU goes in the runner (a), the streaming floor (p) and plain PySpark (b), sampled by
Java Flight Recorder (method: docs/benchmarks.md)."""

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from bench import error_handling as eh
from bench.common import (MIN_PAIRS, benchmark, by_way, column, iso_epoch, log, measure_ways, ratio, run_child, spark_session, spread,
                          summary, table, thread_cpu_clock, thread_cpu_used, workdir)

TITLE = "1c. Where the tasks' CPU goes"
WAYS = ("a", "p", "b")
# A task thread's sample belongs to the first part whose marker (a substring of "class.method") is found from the sampled
# frame down its stack.
TASK_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("observation", ("AggregatingAccumulator", "CollectMetricsExec")),
    ("json_reader", ("fasterxml", "JacksonParser", "FailureSafeParser", "TextInputJsonDataSource")),
    ("line_reader", ("LineReader", "HadoopLineRecordReader")),
    ("parquet_writer", ("parquet", "Parquet")),
    ("generated_code", ("GeneratedClass", "UnsafeWriter", "UnsafeRowWriter", "UnsafeProjection")),
)
RECORDER_OPTIONS = "-XX:StartFlightRecording=settings=profile -XX:FlightRecorderOptions:stackdepth=64"


def task_part(frames: list[dict[str, Any]]) -> str:
    for frame in frames:
        name = f"{frame['method']['type']['name']}.{frame['method']['name']}"
        for part, markers in TASK_PARTS:
            if any(marker in name for marker in markers):
                return part
    return "other"


def attribute(samples: list[dict[str, Any]], windows: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """Samples per run of each way, by part: task threads by TASK_PARTS, every other JVM thread as ``driver``."""
    spans = sorted((start, end, way) for way, runs in windows.items() for start, end in runs)
    per_way: dict[str, Counter] = {way: Counter() for way in windows}
    for event in samples:
        values = event["values"]
        at = iso_epoch(values["startTime"])
        way = next((w for start, end, w in spans if start <= at <= end), None)
        if way is not None:
            thread = (values.get("sampledThread") or {}).get("javaName") or ""
            frames = (values.get("stackTrace") or {}).get("frames") or []
            per_way[way][task_part(frames) if "Executor task launch" in thread else "driver"] += 1
    return {way: {part: n / max(len(windows[way]), 1) for part, n in counts.items()} for way, counts in per_way.items()}


def with_thread_cpu(clock: Callable[[], dict[str, Any]], way: Callable) -> Callable:
    """``way`` with the CPU its run used per thread group (``thread_cpu``) added to its figures."""

    def run(spark, data: Path, folder: Path) -> dict[str, Any]:
        before = clock()
        result = way(spark, data, folder)
        return {**result, "thread_cpu": thread_cpu_used(before, clock())}

    return run


def child(args) -> dict[str, Any]:
    """One JVM with the recorder: the ways alternating; times, windows, rows, CPU per thread group; the recording dumped
    before the JVM exits."""
    spark = spark_session("airflow-conduit-bench-bookkeeping", args.driver_memory, java_options=RECORDER_OPTIONS)
    work, ways = Path(args.work), eh.ways()
    clock = thread_cpu_clock(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))
    runs = measure_ways(spark, work, work / "data", {way: with_thread_cpu(clock, ways[way]) for way in WAYS}, args.reps)
    jvm = spark.sparkContext._jvm
    for recording in jvm.jdk.jfr.FlightRecorder.getFlightRecorder().getRecordings():
        recording.dump(jvm.java.io.File(str(work / "ways.jfr")).toPath())
    java_home = str(jvm.java.lang.System.getProperty("java.home"))
    spark.stop()
    return {"runs": runs, "java_home": java_home}


def measure(args) -> dict[str, Any]:
    with workdir("bookkeeping") as work:
        eh.generate(work / "data", args.records, args.per_file)
        out = run_child("bench.bookkeeping_cost", work / "child.json", work=work, reps=args.reps, driver_memory=args.driver_memory)
        runs, jfr = out["runs"], Path(out["java_home"]) / "bin" / "jfr"
        try:
            printed = subprocess.run([str(jfr), "print", "--json", "--stack-depth", "32", "--events", "jdk.ExecutionSample",
                                      str(work / "ways.jfr")], check=True, capture_output=True, text=True).stdout
            profile = attribute(json.loads(printed)["recording"]["events"], {w: column(r, "window") for w, r in runs.items()})
        except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:  # the times stand without it
            log(f"no profile: {jfr} could not read the recording: {getattr(exc, 'stderr', None) or exc}")
            profile = {}
    times = {w: column(r, "seconds") for w, r in runs.items()}
    return {
        "rows_written": {w: r[-1]["written"] for w, r in runs.items()}, "seconds": by_way(runs),
        "ratio_to_b": {w: ratio(runs, w, "b") for w in runs},
        "steps": {"runner_over_p": summary(x - y for x, y in zip(times["a"], times["p"])),
                  "structured_streaming": summary(x - y for x, y in zip(times["p"], times["b"]))},
        "task_samples_per_run": profile, "task_parts": [part for part, _ in TASK_PARTS],
        "thread_cpu": {w: {group: summary(run["thread_cpu"][group] for run in r) for group in CPU_LABELS} for w, r in runs.items()}}


PART_LABELS = {"json_reader": "Spark's JSON reader", "line_reader": "reading lines", "parquet_writer": "Spark's Parquet writer",
               "generated_code": "generated code (projections, flags, transforms, row copies)", "observation": "the observation's aggregates",
               "other": "other task work", "driver": "driver JVM threads (planning, scheduling, commits)"}
CPU_LABELS = {"tasks": "executor tasks", "jit": "the JIT compilers (C1, C2)", "gc": "the garbage collector",
              "driver": "other JVM threads (planning, scheduling, Py4J)", "python": "the Python driver"}
STEP_LABELS = {"runner_over_p": "the runner over the floor (a − p)", "structured_streaming": "Structured Streaming (p − b)"}


def tables(r: dict[str, Any]) -> list[str]:
    cols = [w for w in WAYS if w in r["seconds"]]
    out = [table(["way", "seconds", "÷ b", "rows written"],
                 [[w, spread(r["seconds"][w], 2, " s"), spread(r["ratio_to_b"][w]), f"{r['rows_written'][w]:,}"] for w in cols]),
           table(["step", "seconds"], [[STEP_LABELS.get(k, k), spread(v, 2, " s")] for k, v in r["steps"].items()])]
    cpu = r.get("thread_cpu") or {}
    if cpu:
        shown = [w for w in cols if w in cpu]
        out.append(table(["CPU seconds per run", *shown],
                         [[label, *[spread(cpu[w][group], 2, " s") for w in shown]] for group, label in CPU_LABELS.items()]))
    profile = r.get("task_samples_per_run") or {}
    if not profile.get("b"):
        return out + ["No profile was recorded (the benchmark's log says why)."]
    base = sum(n for part, n in profile["b"].items() if part != "driver") or 1.0
    shown = [w for w in cols if w in profile]
    rows = [[PART_LABELS.get(part, part), *[f"{100 * profile[w].get(part, 0.0) / base:.0f}" for w in shown]]
            for part in [*r.get("task_parts", []), "other", "driver"]]
    return out + [table(["samples (b's tasks = 100)", *shown], rows)]


if __name__ == "__main__":
    benchmark("bookkeeping_cost", __doc__, measure, child, records=2_000_000, per_file=100_000, reps=MIN_PAIRS, driver_memory="4g", work="")
