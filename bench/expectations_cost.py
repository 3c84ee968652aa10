"""Benchmark 7: what the ``expect`` processor costs on the data path, A with rules against B without (method: docs/benchmarks.md)."""

import json
from pathlib import Path
from typing import Any

from bench.common import (MIN_PAIRS, alternate, benchmark, by_way, column, file_dlq, pipeline_yaml, ratio, run_pipeline, spark_session, spread,
                          step, table, workdir, write_lines)

TITLE = "7. Cost of expectations"
RULES = [{"name": "has-customer", "condition": "customer IS NOT NULL", "action": "warn"},
         {"name": "known-currency", "condition": "currency IN ('EUR', 'USD')", "action": "warn"},
         {"name": "small", "condition": "amount < 900", "action": "warn"},
         {"name": "positive", "condition": "amount > 0", "action": "drop"},
         {"name": "has-id", "condition": "id IS NOT NULL", "action": "fail"}]


def write_input(folder: Path, records: int, per_file: int) -> None:
    """0.5 % dropped by ``positive``, 0.5 % a string where a number is expected (a source error: the DLQ in both)."""
    write_lines(folder, records, per_file, lambda i: json.dumps({
        "id": i, "customer": f"c{i % 5000}", "currency": "GBP" if i % 50 == 3 else "EUR",
        "amount": "n/a" if i % 200 == 11 else -1.0 if i % 200 == 7 else (i * 7919 % 100_000) / 100.0}))


def spec(data: Path, root: Path, with_rules: bool) -> str:
    processors = [step("eur", "field.set", field="currency", value="coalesce(currency, 'EUR')"),
                  *([step("quality", "expect", rules=RULES)] if with_rules else [])]
    source = step("in", "file", path=data, format="json", schema="id BIGINT NOT NULL, customer STRING, amount DOUBLE, currency STRING")
    return pipeline_yaml("expectations-bench", [source], [step("lake", "file", path=root / "out", format="parquet")], processors,
                         file_dlq(root / "dlq", "json", "file", window_size=0))


def measure(args) -> dict[str, Any]:
    spark = spark_session("bench-expectations")

    def run(kind: str, folder: Path) -> dict[str, Any]:
        result = run_pipeline(spark, spec(root / "in", folder, kind == "with"), folder)
        return {"seconds": result["seconds"], "jobs_per_batch": result["jobs"] / max(1, result["batches"]), "totals": result["totals"]}

    with workdir("expect") as root:
        write_input(root / "in", args.records, args.per_file)
        runs = alternate(["with", "without"], args.pairs, run, work=root)
    spark.stop()
    seconds = by_way(runs)
    return {
        "records": args.records, "per_file": args.per_file, "rules": RULES, "seconds_with": seconds["with"],
        "seconds_without": seconds["without"], "ratio_with_over_without": ratio(runs, "with", "without"),
        "jobs_per_batch_with": column(runs["with"], "jobs_per_batch"), "jobs_per_batch_without": column(runs["without"], "jobs_per_batch"),
        "totals_with": runs["with"][-1]["totals"], "totals_without": runs["without"][-1]["totals"]}


def tables(r: dict[str, Any]) -> list[str]:
    tw, to = r["totals_with"], r["totals_without"]
    same = sorted(set(r["jobs_per_batch_with"])) == sorted(set(r["jobs_per_batch_without"]))
    counted = [[f"{proc} / {name}", f"{c['passed']:,}", f"{c['failed']:,}"]
               for proc, by_rule in (tw.get("expectations") or {}).items() for name, c in by_rule.items()]
    return [f"{r['records']:,} records, {r['per_file']:,} per file. Time A ÷ B: **{spread(r['ratio_with_over_without'])}**; "
            f"Spark jobs per batch {'the same' if same else '**differ**'}.",
            table(["measure", "A (with rules)", "B (without)"], [
                ["seconds", spread(r["seconds_with"], 1, " s"), spread(r["seconds_without"], 1, " s")],
                ["Spark jobs per batch", r["jobs_per_batch_with"], r["jobs_per_batch_without"]],
                ["written, to the DLQ", f"{sum((tw.get('written') or {}).values()):,}, {tw.get('dlq', 0):,}",
                 f"{sum((to.get('written') or {}).values()):,}, {to.get('dlq', 0):,}"]]),
            table(["rule", "condition", "action"], [[x["name"], f"`{x['condition']}`", x["action"]] for x in r["rules"]]),
            *([table(["processor / rule", "passed", "failed"], counted)] if counted else [])]


if __name__ == "__main__":
    benchmark("expectations_cost", __doc__, measure, records=200_000, per_file=50_000, pairs=MIN_PAIRS)
