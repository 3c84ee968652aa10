"""Benchmark 1b: the runner against the streaming floor on records of 25, 50 and 100 fields (method: docs/benchmarks.md)."""

import json
from pathlib import Path
from typing import Any

from bench.common import (MIN_PAIRS, at, benchmark, by_way, figure_table, file_dlq, measure_ways, pipeline_yaml, ratio, run_child, run_pipeline,
                          spark_session, step, summary, workdir, write_lines)
from bench.error_handling import streaming_floor

TITLE = "1b. Wide records"
FILES = 10
LEADING = ["id BIGINT NOT NULL", "name STRING NOT NULL", "ts TIMESTAMP", "addr STRUCT<street: STRING, city: STRING, zip: STRING>"]
CENTS = ["*", "round(f00 * 100) AS f00_cents"]
CYCLE = ("DOUBLE", "STRING", "BIGINT", "TIMESTAMP")  # the types of f00, f01, ... in turn


def schema_ddl(fields: int) -> str:
    return ", ".join([*LEADING, *(f"f{j:02d} {CYCLE[j % len(CYCLE)]}" for j in range(fields - len(LEADING)))])


def record_line(i: int, fields: int) -> str:
    """A JSON line; 1 % bad: cut off, or a string in f00 (a DOUBLE), alternately."""
    values = {"DOUBLE": lambda j: (i * 7919 + j) % 100_000 / 100.0, "BIGINT": lambda j: i * 31 + j, "STRING": lambda j: f"s{i % 997}-{j}",
              "TIMESTAMP": lambda j: f"2026-11-{1 + (i + j) % 28:02d}T{i % 24:02d}:{j % 60:02d}:00Z"}
    record: dict[str, Any] = {"id": i, "name": f"n{i % 5000}", "ts": f"2026-11-{1 + i % 28:02d}T10:00:00Z",
                              "addr": {"street": f"{i % 300} Main St", "city": f"c{i % 40}", "zip": f"{10000 + i % 9000}"}}
    record.update({f"f{j:02d}": values[CYCLE[j % len(CYCLE)]](j) for j in range(fields - len(LEADING))})
    if i % 100 == 37:
        if (i // 100) % 2:
            return json.dumps(record)[:60]
        record["f00"] = "not a number"
    return json.dumps(record)


def spec(data: Path, root: Path, fields: int) -> str:
    return pipeline_yaml("bench-wide", [step("wide-in", "builtin:file", path=data, format="json", schema=schema_ddl(fields))],
                         [step("lake", "builtin:file", path=root / "lake", format="parquet")], [step("cents", "sql", select=CENTS)],
                         file_dlq(root / "dlq", window_size=10000, window_nack_threshold=1000))


def child(args) -> dict[str, Any]:
    """One JVM: a and p alternating; time and driver time outside Spark jobs per batch; the largest generated method."""
    spark = spark_session("airflow-conduit-bench-wide", args.driver_memory, jit=bool(args.jit))
    methods = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_GENERATED_METHOD_BYTECODE_SIZE()
    work, fields = Path(args.work), args.fields
    ways = {"a": lambda spark, data, root: run_pipeline(spark, spec(data, root, fields), root),
            "p": lambda spark, data, root: streaming_floor(spark, data, root, schema_ddl(fields), lambda df: df.selectExpr(*CENTS))}
    runs = measure_ways(spark, work, work / "data", ways, args.reps, label=f"{fields} fields ")
    largest = int(methods.getSnapshot().getMax())
    spark.stop()
    return {"runs": runs, "largest_method_bytes": largest}


def measure_width(args, work: Path, fields: int, jit: bool) -> dict[str, Any]:
    records = max(FILES, args.field_values // fields)
    folder, per_file = work / str(fields), max(1, -(-records // FILES))
    write_lines(folder / "data", records, per_file, lambda i: record_line(i, fields))
    out = run_child("bench.wide_schema", folder / f"child-{int(jit)}.json", jit=int(jit), fields=fields, work=folder, reps=args.reps,
                    driver_memory=args.driver_memory)
    outside = {way: [x["outside_jobs"] / max(x["batches"], 1) for x in runs] for way, runs in out["runs"].items()}
    return {"fields": fields, "records": records, "largest_method_bytes": out["largest_method_bytes"],
            "seconds": by_way(out["runs"]), "ratio_a_p": ratio(out["runs"], "a", "p"),
            "outside_jobs_per_batch": {way: summary(v) for way, v in outside.items()},
            "planning_per_batch_over_p": summary(x - y for x, y in zip(outside["a"], outside["p"]))}


def measure(args) -> dict[str, Any]:
    widths = [int(w) for w in args.widths.split(",")]
    with workdir("wide") as work:
        by_width = {str(w): measure_width(args, work, w, jit=True) for w in widths}
        defaults = measure_width(args, work, args.jvm_defaults_at, jit=False) if args.jvm_defaults_at else None
    return {"widths": by_width, "jvm_defaults": defaults, "reps": args.reps, "field_values": args.field_values}


COLUMNS = (("width", at("label")), ("records", lambda w: f"{w['records']:,}"), ("a/p", at("ratio_a_p")),
           ("a", at("seconds", "a"), 1, " s"), ("p", at("seconds", "p"), 1, " s"),
           ("a: driver time per batch", at("outside_jobs_per_batch", "a"), 2, " s"),
           ("p: driver time per batch", at("outside_jobs_per_batch", "p"), 2, " s"),
           ("a − p per batch (runner's planning)", at("planning_per_batch_over_p"), 2, " s"),
           ("largest generated method (bytes)", lambda w: f"{w['largest_method_bytes']:,}"))


def tables(r: dict[str, Any]) -> list[str]:
    widths = [{**w, "label": f"{w['fields']} fields"} for _, w in sorted(r["widths"].items(), key=lambda kv: int(kv[0]))]
    if r.get("jvm_defaults"):
        widths.append({**r["jvm_defaults"], "label": f"{r['jvm_defaults']['fields']} fields, the JVM's default options"})
    return [figure_table(widths, COLUMNS)]


if __name__ == "__main__":
    benchmark("wide_schema", __doc__, measure, child, widths="25,50,100", field_values=10_000_000, jvm_defaults_at=25, reps=MIN_PAIRS,
              driver_memory="4g", work="", fields=25, jit=1)
