"""Benchmark 1c: where the tasks' CPU goes in the runner, the streaming floor and plain Spark.

Benchmark 1's data and three of its ways, in one JVM, alternating: a (the runner), p (the streaming floor:
Spark's streaming JSON source, one ``foreachBatch``, one Parquet write; nothing the runner adds) and b (plain
PySpark). ``a - p`` is what the runner adds to the floor, ``p - b`` what Structured Streaming costs. Every
way's output is counted after its run, outside the timing.

The JVM runs with Java Flight Recorder's sampler: each way's samples on Spark's task threads are
attributed to Spark's JSON reader, Parquet writer, the generated code of the stages, or the observation
(the first of these found from the sampled frame down its stack). CPU attributed this way is unit-free
(samples), so the report gives it relative to b's total.

    python -m bench.bookkeeping_cost --out bench/results/bookkeeping_cost.json
    python -m bench.bookkeeping_cost --records 50000 --per-file 10000 --reps 2     # quick
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from bench.common import add_child_process_arguments, log, paired_ratios, rotated, run_child, setup_environment, summary, write_result

WAYS = ("a", "p", "b")
# Where a task thread's sample is attributed: the first of these (a substring of "class.method") found from the
# sampled frame down its stack. A frame of the generated code that pulls rows from the reader counts as the reader's
# when the sample is inside the reader.
TASK_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("observation", ("AggregatingAccumulator", "CollectMetricsExec")),
    ("json_reader", ("fasterxml", "JacksonParser", "FailureSafeParser", "TextInputJsonDataSource")),
    ("line_reader", ("LineReader", "HadoopLineRecordReader")),
    ("parquet_writer", ("parquet", "Parquet")),
    ("generated_code", ("GeneratedClass", "UnsafeWriter", "UnsafeRowWriter", "UnsafeProjection")),
)
TASK_THREAD = "Executor task launch"
STACK_DEPTH = 32  # frames printed per sample: deep enough to reach the part from the sampled frame
RECORDER_OPTIONS = "-XX:StartFlightRecording=settings=profile -XX:FlightRecorderOptions:stackdepth=64"


def ways(args: argparse.Namespace) -> dict[str, Callable[..., dict[str, Any]]]:
    from bench import error_handling as eh

    all_ways = eh.ways(args)
    return {w: all_ways[w] for w in WAYS}


# -- the profile ----------------------------------------------------------------------------------------


def task_part(frames: list[dict[str, Any]]) -> str:
    """The part a task thread's sample belongs to (``TASK_PARTS``), from its frames, sampled frame first."""
    for frame in frames:
        name = f"{frame['method']['type']['name']}.{frame['method']['name']}"
        for part, markers in TASK_PARTS:
            if any(marker in name for marker in markers):
                return part
    return "other"


def _timestamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def attribute(samples: list[dict[str, Any]], windows: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """Samples per run of each way, by part: task threads by ``TASK_PARTS``, every other JVM thread as ``driver``."""
    spans = sorted((start, end, way) for way, runs in windows.items() for start, end in runs)
    per_way: dict[str, Counter] = {way: Counter() for way in windows}
    for event in samples:
        values = event["values"]
        at = _timestamp(values["startTime"])
        way = next((w for start, end, w in spans if start <= at <= end), None)
        if way is None:
            continue
        thread = (values.get("sampledThread") or {}).get("javaName") or ""
        frames = (values.get("stackTrace") or {}).get("frames") or []
        per_way[way][task_part(frames) if TASK_THREAD in thread else "driver"] += 1
    return {way: {part: n / max(len(windows[way]), 1) for part, n in counts.items()} for way, counts in per_way.items()}


def dump_recording(jvm, path: Path) -> None:
    """Write the JVM's flight recording to ``path`` now: the JVM PySpark started is not waited for when Python
    exits, so a dump at the JVM's exit may still be under way when the parent reads it."""
    for recording in jvm.jdk.jfr.FlightRecorder.getFlightRecorder().getRecordings():
        recording.dump(jvm.java.io.File(str(path)).toPath())


def read_samples(jfr_tool: Path, recording: Path) -> list[dict[str, Any]]:
    printed = subprocess.run(
        [str(jfr_tool), "print", "--json", "--stack-depth", str(STACK_DEPTH), "--events", "jdk.ExecutionSample", str(recording)],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(printed)["recording"]["events"]


# -- the run ----------------------------------------------------------------------------------------


def lake_rows(spark, result: dict[str, Any]) -> int:
    lake = result.get("lake") or result["out"][0]
    return spark.read.parquet(str(lake)).count()


def child(args: argparse.Namespace) -> int:
    """One JVM with the recorder: the ways alternating; writes times, windows, row counts and the JVM's home."""
    import time

    from bench import error_handling as eh

    setup_environment()
    spark = eh.build_spark(args.driver_memory, app_name="airflow-conduit-bench-bookkeeping",
                        java_options=RECORDER_OPTIONS)
    run_args = argparse.Namespace(files_per_batch=0, tuned_files_per_batch=-1, window_size=eh.WINDOW_SIZE,
                                  window_threshold=eh.WINDOW_NACK_THRESHOLD)
    todo = ways(run_args)
    work, data = Path(args.work), Path(args.data)
    times: dict[str, list[float]] = {w: [] for w in todo}
    windows: dict[str, list[tuple[float, float]]] = {w: [] for w in todo}
    rows: dict[str, int] = {}
    for rep in range(args.reps + 1):  # the first round warms up, uncounted
        for way in rotated(list(todo), rep):
            started = time.time()
            result = todo[way](spark, work, data, f"{way}{rep}", run_args)
            ended = time.time()
            rows[way] = lake_rows(spark, result)
            shutil.rmtree(result["root"], ignore_errors=True)
            if rep:
                times[way].append(result["seconds"])
                windows[way].append((started, ended))
            log(f"  rep {rep}{' (warm-up)' if not rep else ''} {way}: {result['seconds']:.2f}s, {rows[way]:,} rows written")
    jvm = spark.sparkContext._jvm
    java_home = str(jvm.java.lang.System.getProperty("java.home"))
    dump_recording(jvm, Path(args.recording))
    spark.stop()
    Path(args.out).write_text(json.dumps({"times": times, "windows": windows, "rows": rows, "java_home": java_home}))
    return 0


def main(argv: list[str] | None = None) -> int:
    from bench import error_handling as eh

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_child_process_arguments(parser, records=2_000_000, per_file=100_000)
    parser.add_argument("--recording", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    setup_environment()
    work = Path(tempfile.mkdtemp(prefix="conduit-bench-bookkeeping-"))
    try:
        log(f"generating {args.records:,} records ({args.per_file:,} per file)")
        kinds = eh.generate(work / "data", args.records, args.per_file)
        recording = work / "ways.jfr"
        measured = run_child("bench.bookkeeping_cost", args, work, work / "child.json", "--recording", str(recording))
        times = measured["times"]
        jfr_tool = Path(measured["java_home"]) / "bin" / "jfr"
        profile: dict[str, dict[str, float]] = {}
        try:
            profile = attribute(read_samples(jfr_tool, recording), measured["windows"])
        except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:  # the times stand without it
            log(f"no profile: {jfr_tool} could not read {recording}: {getattr(exc, 'stderr', None) or exc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "records": args.records, "per_file": args.per_file, "kinds": kinds, "reps": args.reps,
        "rows_written": measured["rows"],
        "seconds": {w: summary(v) for w, v in times.items()},
        "ratio_to_b": {w: paired_ratios(v, times["b"]) for w, v in times.items()},
        "steps": {  # paired differences, seconds
            "runner_over_p": summary(x - y for x, y in zip(times["a"], times["p"])),
            "structured_streaming": summary(x - y for x, y in zip(times["p"], times["b"])),
        },
        "task_samples_per_run": profile,
        "task_parts": [part for part, _ in TASK_PARTS],
    }
    for way in WAYS:
        log(f"  {way}: {result['seconds'][way]['median']:.2f}s, /b {result['ratio_to_b'][way]['median']:.2f}")
    write_result("bookkeeping_cost", result, args.out)
    return 0


# -- the report's section ------------------------------------------------------------------------------

TITLE = "1c. Where the tasks' CPU goes"
ABOUT = """
Benchmark 1's data and three of its ways (a: the runner; p: the streaming floor; b: plain PySpark) in one JVM,
alternating after a warm-up round, with Java Flight Recorder's sampler on. Every way's output is counted after
its run. The steps are paired differences of the same repetition: a − p is what the runner adds to the floor,
p − b what Structured Streaming costs. In the profile, a task thread's sample belongs to the first part found
from the sampled frame down its stack; every other JVM thread's sample counts as the driver's; b's task samples
are 100 (Python's own time on the driver is not sampled).
"""
PART_LABELS = {
    "json_reader": "Spark's JSON reader", "line_reader": "reading lines", "parquet_writer": "Spark's Parquet writer",
    "generated_code": "generated code (projections, flags, transforms, row copies)", "observation": "the observation's aggregates",
    "other": "other task work", "driver": "driver JVM threads (planning, scheduling, commits)",
}
STEP_LABELS = {"runner_over_p": "the runner over the floor (a − p)", "structured_streaming": "Structured Streaming (p − b)"}


def section(r: dict[str, Any]) -> str:
    from bench.markdown import section_text, spread, table

    cols = [w for w in WAYS if w in r["seconds"]]
    ways_table = table(["way", "seconds", "÷ b", "rows written"],
                       [[w, spread(r["seconds"][w], 2, " s"), spread(r["ratio_to_b"][w]), f"{r['rows_written'][w]:,}"] for w in cols])
    steps = table(["step", "seconds"], [[STEP_LABELS.get(k, k), spread(v, 2, " s")] for k, v in r["steps"].items()])
    profile = r.get("task_samples_per_run") or {}
    if not profile.get("b"):
        return section_text(TITLE, ABOUT, ways_table, steps, "No profile was recorded (the benchmark's log says why).")
    base = sum(n for part, n in profile["b"].items() if part != "driver") or 1.0
    parts = [*r.get("task_parts", []), "other", "driver"]
    rows = [[PART_LABELS.get(part, part), *[f"{100 * profile[w].get(part, 0.0) / base:.0f}" for w in cols if w in profile]]
            for part in parts]
    return section_text(TITLE, ABOUT, ways_table, steps, table(["samples (b's tasks = 100)", *[w for w in cols if w in profile]], rows))


if __name__ == "__main__":
    sys.exit(main())
