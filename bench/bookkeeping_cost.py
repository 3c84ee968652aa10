"""Benchmark 1c: what each of the runner's steps costs over plain Spark, and where the tasks' CPU goes.

Benchmark 1's data and ways, in one JVM, alternating: a (the runner), p (the streaming floor: Spark's
streaming JSON source, one ``foreachBatch``, one Parquet write; nothing the runner adds) and b (plain
PySpark), plus two **upper bounds that are not product variants**: the runner with steps switched off,
each of which a real pipeline needs:

- ``a_without_dlq``: the DLQ write skipped (the bad records are lost; its commit marker is not written);
- ``a_without_bookkeeping``: also no observation and no nack window (no counts, no DLQ rows, no window:
  the records still get their fates and the good ones are written).

So ``a - a_without_dlq`` is what the DLQ write costs, ``a_without_dlq - a_without_bookkeeping`` what the
observation and the window cost, ``a_without_bookkeeping - p`` what the runner's own plan costs (record
columns, positions, fates, commit markers, the report), ``p - b`` what Structured Streaming costs. Every
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
import contextlib
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.common import add_child_process_arguments, log, paired_ratios, rotated, run_child, setup_environment, summary, write_result

WAYS = ("a", "a_without_dlq", "a_without_bookkeeping", "p", "b")
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


# -- the upper bounds -----------------------------------------------------------------------------------


@contextlib.contextmanager
def without_dlq_write() -> Iterator[None]:
    """The runner with its DLQ write skipped: an upper bound, not a product variant."""
    from airflow_conduit.spark.batch_pass import BatchPass

    original = BatchPass._write_dlq
    BatchPass._write_dlq = lambda self, metrics, nacked: nacked  # type: ignore[method-assign]
    try:
        yield
    finally:
        BatchPass._write_dlq = original  # type: ignore[method-assign]


class _NoMetrics:
    """What ``ObservedMetrics`` would hold for a batch of nothing: the counts read as zero."""

    heavy: tuple[str, ...] = ()

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        self.values: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        return 0

    def get(self, name: str, default: Any = None) -> Any:
        return default


@contextlib.contextmanager
def without_bookkeeping() -> Iterator[None]:
    """The runner without its observation, nack window and DLQ write: an upper bound, not a product variant."""
    from pyspark.sql.classic.dataframe import DataFrame

    from airflow_conduit.spark import batch_pass

    saved = (DataFrame.observe, batch_pass.ObservedMetrics, batch_pass.BatchPass._advance_window)
    DataFrame.observe = lambda self, observation, *exprs: self  # type: ignore[method-assign]
    batch_pass.ObservedMetrics = _NoMetrics  # type: ignore[assignment,misc]
    batch_pass.BatchPass._advance_window = lambda self, metrics, counts, saved: (None, False, None)  # type: ignore[method-assign]
    try:
        with without_dlq_write():
            yield
    finally:
        DataFrame.observe, batch_pass.ObservedMetrics, batch_pass.BatchPass._advance_window = saved  # type: ignore[method-assign,misc]


def ways(args: argparse.Namespace) -> dict[str, Callable[..., dict[str, Any]]]:
    from bench import error_handling as eh

    def switched_off(context: Callable[[], contextlib.AbstractContextManager[None]]) -> Callable[..., dict[str, Any]]:
        def run(*a: Any, **k: Any) -> dict[str, Any]:
            with context():
                return eh.run_a(*a, **k)

        return run

    all_ways = eh.ways(args)
    return {"a": all_ways["a"], "a_without_dlq": switched_off(without_dlq_write),
            "a_without_bookkeeping": switched_off(without_bookkeeping), "p": all_ways["p"], "b": all_ways["b"]}


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
        "records": args.records, "per_file": args.per_file, "kinds": kinds, "reps": args.reps, "target_a_b": eh.TARGET_A_B,
        "rows_written": measured["rows"],
        "seconds": {w: summary(v) for w, v in times.items()},
        "ratio_to_b": {w: paired_ratios(v, times["b"]) for w, v in times.items()},
        "steps": {  # paired differences, seconds: what each step adds to the one below it
            "bookkeeping": summary(x - y for x, y in zip(times["a"], times["a_without_bookkeeping"])),
            "dlq_write": summary(x - y for x, y in zip(times["a"], times["a_without_dlq"])),
            "observation_and_window": summary(x - y for x, y in zip(times["a_without_dlq"], times["a_without_bookkeeping"])),
            "runner_plan": summary(x - y for x, y in zip(times["a_without_bookkeeping"], times["p"])),
            "structured_streaming": summary(x - y for x, y in zip(times["p"], times["b"])),
        },
        "task_samples_per_run": profile,
        "task_parts": [part for part, _ in TASK_PARTS],
    }
    for way in WAYS:
        log(f"  {way}: {result['seconds'][way]['median']:.2f}s, /b {result['ratio_to_b'][way]['median']:.2f}")
    write_result("bookkeeping_cost", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
