"""Benchmark 1b: the runner on a wide schema, with and without the JIT option of spark/jvm.py.

Spark compiles the pass's first stage into one generated method whose size grows with the schema's fields;
HotSpot does not JIT-compile a method over 8,000 bytes of bytecode unless told to
(``-XX:-DontCompileHugeMethods``, which the runner's launchers now pass). Two child processes, one JVM each:
``default`` (the JVM's defaults) and ``jit`` (spark/jvm.py's options); in each, a (the runner, in-process:
Parquet destination, Parquet DLQ) and b (plain PySpark: ``read.json`` DROPMALFORMED, NULL required fields
dropped) alternate on the same data, and the ratio a/b is taken per repetition, side by side. The largest
generated method is read from Spark's codegen metrics.

    python -m bench.wide_schema --out bench/results/wide_schema.json
    python -m bench.wide_schema --records 40000 --reps 2        # quick
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import Stopwatch, add_child_process_arguments, log, paired_ratios, rotated, run_child, setup_environment, summary, write_result

JIT_LIMIT_BYTES = 8_000  # HotSpot's HugeMethodLimit: larger methods stay interpreted by default
BAD_EVERY = 100


def schema_ddl(fields: int) -> str:
    """``fields`` fields: id and name (NOT NULL), then alternately DOUBLE and STRING ``f00``, ``f01``, ..."""
    extra = [f"f{i:02d} {'STRING' if i % 2 else 'DOUBLE'}" for i in range(fields - 2)]
    return ", ".join(["id BIGINT NOT NULL", "name STRING NOT NULL", *extra])


def record_line(i: int, fields: int) -> str:
    """A JSON line; every BAD_EVERY-th is bad: malformed or a string in a DOUBLE field, alternately."""
    record: dict[str, Any] = {"id": i, "name": f"n{i % 5000}"}
    for j in range(fields - 2):
        record[f"f{j:02d}"] = f"s{i % 997}-{j}" if j % 2 else (i * 7919 + j) % 100_000 / 100.0
    if i % BAD_EVERY == 37:
        if (i // BAD_EVERY) % 2:
            return json.dumps(record)[:60]
        record[f"f{2 * ((i // BAD_EVERY) % ((fields - 2) // 2)):02d}"] = "not a number"
    return json.dumps(record)


def generate(folder: Path, records: int, per_file: int, fields: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for start in range(0, records, per_file):
        lines = [record_line(i, fields) for i in range(start, min(start + per_file, records))]
        (folder / f"part-{start:09d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return sum(1 for i in range(records) if i % BAD_EVERY == 37)


def _spec(root: Path, data: Path, fields: int):
    from airflow_conduit.pipeline import load_pipeline_from_string

    text = f"""
version: "1"
pipeline:
  id: bench-wide
  mode: available-now
  sources:
    - id: wide-in
      plugin: builtin:file
      settings: {{path: {json.dumps(str(data))}, format: json, schema: "{schema_ddl(fields)}"}}
  processors:
    - id: cents
      plugin: sql
      settings: {{select: ["*", "round(f00 * 100) AS f00_cents"]}}
  destinations:
    - id: lake
      plugin: builtin:file
      settings: {{path: {json.dumps(str(root / 'lake'))}, format: parquet}}
  dead-letter-queue:
    plugin: builtin:file
    settings: {{path: {json.dumps(str(root / 'dlq'))}, format: parquet}}
    window-size: 10000
    window-nack-threshold: 1000
"""
    return load_pipeline_from_string(text, str(root / "pipeline.yaml"), base_dir=str(root))


def run_a(spark, work: Path, data: Path, fields: int, tag: str) -> tuple[float, dict[str, int]]:
    from airflow_conduit.spark.runner import execute

    root = work / f"a-{tag}"
    spec = _spec(root, data, fields)
    with Stopwatch() as sw:
        code, report = execute(spark, spec, state_dir=root / "state", run_id="bench")
    if code != 0:
        raise RuntimeError(f"runner exited {code}: {report.error}")
    shutil.rmtree(root, ignore_errors=True)
    return sw.seconds, {"written": int(report.totals["written"]["lake"]), "bad": int(report.totals["dlq"])}


def run_b(spark, work: Path, data: Path, fields: int, tag: str) -> tuple[float, dict[str, int]]:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    root = work / f"b-{tag}"
    schema = T.StructType([T.StructField(f.name, f.dataType, True) for f in T.StructType.fromDDL(schema_ddl(fields)).fields])
    with Stopwatch() as sw:
        df = spark.read.schema(schema).option("mode", "DROPMALFORMED").json(str(data))
        df = df.where(F.col("id").isNotNull() & F.col("name").isNotNull())
        df.selectExpr("*", "round(f00 * 100) AS f00_cents").write.mode("overwrite").parquet(str(root / "lake"))
    written = spark.read.parquet(str(root / "lake")).count()
    shutil.rmtree(root, ignore_errors=True)
    return sw.seconds, {"written": written}


def child(args: argparse.Namespace) -> int:
    """One JVM: a and b alternating; writes times, counts and the largest generated method to ``args.out``."""
    from bench.error_handling import build_spark

    setup_environment()
    spark = build_spark(args.driver_memory, jit_options=bool(args.jit), app_name="airflow-conduit-bench-wide")
    methods = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_GENERATED_METHOD_BYTECODE_SIZE()
    work, data = Path(args.work), Path(args.data)
    ways = {"a": run_a, "b": run_b}
    times: dict[str, list[float]] = {w: [] for w in ways}
    counts: dict[str, dict[str, int]] = {}
    for rep in range(args.reps + 1):  # the first round warms up, uncounted
        for way in rotated(list(ways), rep):
            seconds, counts[way] = ways[way](spark, work, data, args.fields, f"{'jit' if args.jit else 'default'}{rep}")
            if rep:
                times[way].append(seconds)
            log(f"  {'jit' if args.jit else 'default'} rep {rep}{' (warm-up)' if not rep else ''} {way}: {seconds:.2f}s {counts[way]}")
    largest = int(methods.getSnapshot().getMax())
    spark.stop()
    Path(args.out).write_text(json.dumps({"times": times, "counts": counts, "largest_method_bytes": largest}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fields", type=int, default=25)
    add_child_process_arguments(parser, records=400_000, per_file=40_000)
    parser.add_argument("--jit", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    setup_environment()
    work = Path(tempfile.mkdtemp(prefix="conduit-bench-wide-"))
    try:
        log(f"generating {args.records:,} records of {args.fields} fields ({args.per_file:,} per file)")
        bad = generate(work / "data", args.records, args.per_file, args.fields)
        settings: dict[str, Any] = {}
        for name, jit in (("default", 0), ("jit", 1)):
            log(f"JVM options: {name}")
            child_result = run_child("bench.wide_schema", args, work, work / f"{name}.json", "--jit", str(jit), "--fields", str(args.fields))
            times = child_result["times"]
            settings[name] = {
                **child_result,
                "seconds": {w: summary(v) for w, v in times.items()},
                "ratio_a_b": paired_ratios(times["a"], times["b"]),
            }
            log(f"  {name}: a/b {settings[name]['ratio_a_b']['median']:.2f}, largest generated method "
                f"{child_result['largest_method_bytes']:,} bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"fields": args.fields, "records": args.records, "per_file": args.per_file, "bad": bad,
              "reps": args.reps, "jit_limit_bytes": JIT_LIMIT_BYTES, "settings": settings}
    write_result("wide_schema", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
