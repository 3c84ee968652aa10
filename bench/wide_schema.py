"""Benchmark 1b: the runner on wide records (25, 50 and 100 fields) against the streaming floor p.

Records mix strings, numbers (DOUBLE, BIGINT), timestamps and a nested struct; 1 % are bad (malformed, or a
string in a number field). For each width one child process (one JVM, with the JVM options the runner's
launchers pass, spark/jvm.py) alternates a (the runner, in-process: ``sql`` processor, Parquet destination,
Parquet DLQ) and p (Spark's streaming JSON source, each file its own partition, one task per core, one
``foreachBatch`` writing the good rows to Parquet), after an uncounted warm-up round; a/p is taken per
repetition. Every width gets the same volume of field values (records = ``--field-values`` / width), in 10 files.

The driver's time outside Spark jobs per batch (wall time minus the union of the way's jobs' submission ->
completion spans, from Spark's status store, divided by its batches) is recorded for both ways: a's minus p's is
what the runner's own planning and bookkeeping cost the driver per batch. One more child at the narrowest width
runs with the JVM's default options, to show what ``-XX:-DontCompileHugeMethods`` changes.

    python -m bench.wide_schema --out bench/results/wide_schema.json
    python -m bench.wide_schema --widths 25,50 --field-values 400000 --reps 2     # quick
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
FILES = 10
LEADING = ["id BIGINT NOT NULL", "name STRING NOT NULL", "ts TIMESTAMP", "addr STRUCT<street: STRING, city: STRING, zip: STRING>"]
CYCLE = ("DOUBLE", "STRING", "BIGINT", "TIMESTAMP")  # the types of f00, f01, ... in turn


def schema_ddl(fields: int) -> str:
    """``fields`` top-level fields: id, name (NOT NULL), a timestamp, a nested struct, then f00, f01, ... of CYCLE's types."""
    return ", ".join([*LEADING, *(f"f{j:02d} {CYCLE[j % len(CYCLE)]}" for j in range(fields - len(LEADING)))])


def _value(i: int, j: int) -> Any:
    kind = CYCLE[j % len(CYCLE)]
    if kind == "DOUBLE":
        return (i * 7919 + j) % 100_000 / 100.0
    if kind == "BIGINT":
        return i * 31 + j
    if kind == "TIMESTAMP":
        return f"2026-11-{1 + (i + j) % 28:02d}T{i % 24:02d}:{j % 60:02d}:00Z"
    return f"s{i % 997}-{j}"


def record_line(i: int, fields: int) -> str:
    """A JSON line; every BAD_EVERY-th is bad: malformed, or a string in f00 (a DOUBLE), alternately."""
    record: dict[str, Any] = {"id": i, "name": f"n{i % 5000}", "ts": f"2026-11-{1 + i % 28:02d}T10:00:00Z",
                              "addr": {"street": f"{i % 300} Main St", "city": f"c{i % 40}", "zip": f"{10000 + i % 9000}"}}
    record.update({f"f{j:02d}": _value(i, j) for j in range(fields - len(LEADING))})
    if i % BAD_EVERY == 37:
        if (i // BAD_EVERY) % 2:
            return json.dumps(record)[:60]
        record["f00"] = "not a number"
    return json.dumps(record)


def generate(folder: Path, records: int, fields: int) -> tuple[int, int]:
    """``records`` lines in FILES files; (records per file, bad records)."""
    folder.mkdir(parents=True, exist_ok=True)
    per_file = max(1, -(-records // FILES))
    for start in range(0, records, per_file):
        lines = [record_line(i, fields) for i in range(start, min(start + per_file, records))]
        (folder / f"part-{start:09d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return per_file, sum(1 for i in range(records) if i % BAD_EVERY == 37)


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


def run_a(spark, work: Path, data: Path, fields: int, tag: str) -> tuple[float, int, dict[str, int]]:
    from airflow_conduit.spark.runner import execute

    root = work / f"a-{tag}"
    spec = _spec(root, data, fields)
    with Stopwatch() as sw:
        code, report = execute(spark, spec, state_dir=root / "state", run_id="bench")
    if code != 0:
        raise RuntimeError(f"runner exited {code}: {report.error}")
    shutil.rmtree(root, ignore_errors=True)
    return sw.seconds, len(report.batches), {"written": int(report.totals["written"]["lake"]), "bad": int(report.totals["dlq"])}


def run_p(spark, work: Path, data: Path, fields: int, tag: str) -> tuple[float, int, dict[str, Any]]:
    """The streaming floor: read as the runner reads, good rows only, nothing the runner adds."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from airflow_conduit.spark.batch_pass import in_tasks_per_core
    from airflow_conduit.spark.runner import files_read_one_per_partition

    root = work / f"p-{tag}"
    schema = T.StructType([T.StructField(f.name, f.dataType, True) for f in T.StructType.fromDDL(schema_ddl(fields)).fields])
    schema = schema.add("_corrupt", T.StringType(), True)
    batch_ids: list[int] = []

    def write_good(batch, batch_id: int) -> None:
        batch_ids.append(batch_id)
        good = in_tasks_per_core(batch).where(F.col("_corrupt").isNull() & F.col("id").isNotNull() & F.col("name").isNotNull())
        good.drop("_corrupt").selectExpr("*", "round(f00 * 100) AS f00_cents").write.mode("overwrite").parquet(
            str(root / "lake" / f"batch={batch_id}"))

    with files_read_one_per_partition(spark), Stopwatch() as sw:
        stream = (spark.readStream.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", "_corrupt")
                  .json(str(data)))
        query = (stream.writeStream.foreachBatch(write_good).option("checkpointLocation", str(root / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    return sw.seconds, len(batch_ids), {"lake": str(root / "lake")}


def count_and_remove(spark, counts: dict[str, Any]) -> dict[str, int]:
    """p's rows written, counted after its Spark jobs were timed; its output removed."""
    if "lake" not in counts:
        return counts
    written = spark.read.parquet(counts["lake"]).count()
    shutil.rmtree(Path(counts["lake"]).parent, ignore_errors=True)
    return {"written": written}


def child(args: argparse.Namespace) -> int:
    """One JVM: a and p alternating; writes times, driver time outside Spark jobs, batches, counts and the largest
    generated method to ``args.out``."""
    from bench.error_handling import _next_job_id, build_spark, seconds_in_jobs

    setup_environment()
    spark = build_spark(args.driver_memory, jit_options=bool(args.jit), app_name="airflow-conduit-bench-wide")
    methods = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_GENERATED_METHOD_BYTECODE_SIZE()
    work, data = Path(args.work), Path(args.data)
    ways = {"a": run_a, "p": run_p}
    times: dict[str, list[float]] = {w: [] for w in ways}
    outside: dict[str, list[float]] = {w: [] for w in ways}
    batches: dict[str, int] = {}
    counts: dict[str, dict[str, int]] = {}
    for rep in range(args.reps + 1):  # the first round warms up, uncounted
        for way in rotated(list(ways), rep):
            first = _next_job_id(spark)
            seconds, batches[way], counts[way] = ways[way](spark, work, data, args.fields, f"{args.fields}-{rep}")
            in_jobs = seconds_in_jobs(spark, first, _next_job_id(spark))
            counts[way] = count_and_remove(spark, counts[way])
            if rep:
                times[way].append(seconds)
                outside[way].append((seconds - in_jobs) / max(batches[way], 1))
            log(f"  {args.fields} fields rep {rep}{' (warm-up)' if not rep else ''} {way}: {seconds:.2f}s, "
                f"{batches[way]} batch(es), {seconds - in_jobs:.2f}s outside Spark jobs {counts[way]}")
    largest = int(methods.getSnapshot().getMax())
    spark.stop()
    Path(args.out).write_text(json.dumps({"times": times, "outside_per_batch": outside, "batches": batches, "counts": counts,
                                          "largest_method_bytes": largest}))
    return 0


def measure_width(args: argparse.Namespace, work: Path, fields: int, jit: bool) -> dict[str, Any]:
    """One child process at ``fields`` fields; its result with the ratios and summaries."""
    records = max(FILES, args.field_values // fields)
    folder = work / str(fields)  # the data of a width is shared by its children
    per_file, bad = generate(folder / "data", records, fields)
    log(f"{fields} fields: {records:,} records, JVM options: {'the launchers' if jit else 'the JVM defaults'}")
    measured = run_child("bench.wide_schema", args, folder, folder / f"child-{int(jit)}.json", "--jit", str(int(jit)),
                         "--fields", str(fields))
    times, outside = measured["times"], measured["outside_per_batch"]
    result = {
        "fields": fields, "records": records, "per_file": per_file, "bad": bad, "jit_options": jit,
        "batches": measured["batches"], "counts": measured["counts"], "largest_method_bytes": measured["largest_method_bytes"],
        "seconds": {w: summary(v) for w, v in times.items()},
        "ratio_a_p": paired_ratios(times["a"], times["p"]),
        "outside_jobs_per_batch": {w: summary(v) for w, v in outside.items()},
        "planning_per_batch_over_p": summary(x - y for x, y in zip(outside["a"], outside["p"])),
    }
    log(f"  {fields} fields: a/p {result['ratio_a_p']['median']:.2f}; driver outside Spark jobs per batch over p "
        f"{result['planning_per_batch_over_p']['median']:.2f}s; largest generated method {result['largest_method_bytes']:,} bytes")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="25,50,100", help="comma-separated field counts")
    parser.add_argument("--field-values", type=int, default=10_000_000, help="records × fields at every width")
    parser.add_argument("--jvm-defaults-at", type=int, default=25, help="a width also run with the JVM's default options; 0: none")
    parser.add_argument("--fields", type=int, default=25, help=argparse.SUPPRESS)
    parser.add_argument("--jit", type=int, default=1, help=argparse.SUPPRESS)
    add_child_process_arguments(parser, records=0, per_file=0)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    setup_environment()
    widths = [int(w) for w in args.widths.split(",")]
    if min(widths) <= len(LEADING):
        parser.error(f"--widths: every width must be over {len(LEADING)} (the leading fields)")
    work = Path(tempfile.mkdtemp(prefix="conduit-bench-wide-"))
    try:
        by_width = {str(w): measure_width(args, work, w, jit=True) for w in widths}
        defaults = measure_width(args, work, args.jvm_defaults_at, jit=False) if args.jvm_defaults_at else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"widths": by_width, "jvm_defaults": defaults, "reps": args.reps, "field_values": args.field_values,
              "jit_limit_bytes": JIT_LIMIT_BYTES, "schema_example": schema_ddl(widths[0])}
    write_result("wide_schema", result, args.out)
    return 0


# -- the report's section ------------------------------------------------------------------------------

TITLE = "1b. Wide records"
ABOUT = """
The runner (a) against the streaming floor (p: Spark's streaming JSON source read as the runner reads, one
`foreachBatch` writing the good rows to Parquet, no DLQ) on records of 25, 50 and 100 fields: `id`, `name`, a
timestamp, a nested struct of three strings, then DOUBLE, STRING, BIGINT and TIMESTAMP fields in turn; 1 % bad
(malformed, or a string in a number field); an `sql` processor, a Parquet lake and DLQ. Each width has the same
volume of field values, in 10 files read as one micro-batch, and runs in a JVM of its own with the JVM options
the runner's launchers pass; a and p alternate after a warm-up round, a/p per repetition, median (min–max).
**Driver time per batch** is a way's wall time minus the span covered by its Spark jobs (Spark's status store),
divided by its batches: a's minus p's is the runner's own planning and bookkeeping on the driver (with one batch
per run it also holds the run's set-up, so it bounds the planning from above). The last row runs the narrowest
width with the JVM's defaults: HotSpot leaves a generated method over 8,000 bytes to its interpreter unless
`-XX:-DontCompileHugeMethods` (spark/jvm.py) is given.
"""


def section(r: dict[str, Any]) -> str:
    from bench.markdown import section_text, spread, table

    def row(w: dict[str, Any], label: str) -> list[str]:
        outside = w["outside_jobs_per_batch"]
        return [label, f"{w['records']:,}", spread(w["ratio_a_p"]), spread(w["seconds"]["a"], 1, " s"), spread(w["seconds"]["p"], 1, " s"),
                spread(outside["a"], 2, " s"), spread(outside["p"], 2, " s"), spread(w["planning_per_batch_over_p"], 2, " s"),
                f"{w['largest_method_bytes']:,}"]

    rows = [row(w, f"{w['fields']} fields") for _, w in sorted(r["widths"].items(), key=lambda kv: int(kv[0]))]
    if r.get("jvm_defaults"):
        rows.append(row(r["jvm_defaults"], f"{r['jvm_defaults']['fields']} fields, the JVM's default options"))
    header = ["width", "records", "a/p", "a", "p", "a: driver time per batch", "p: driver time per batch",
              "a − p per batch (runner's planning)", "largest generated method (bytes)"]
    return section_text(TITLE, ABOUT, table(header, rows))


if __name__ == "__main__":
    sys.exit(main())
