"""Benchmark: what expectations (the ``expect`` processor) cost on the data path.

The same generated JSON lines go through the same pipeline (runner in-process,
file DLQ, Parquet destination) twice per pair, A and B alternating: A with an
``expect`` processor of 5 rules (3 warn, 1 drop, 1 fail that never fails),
B without it. The figure is the per-pair ratio time_A / time_B (median, min,
max of at least 5 pairs) and the Spark jobs of both (the rules must add none).

The input holds 0.5 % lines that fail parsing in both pipelines, so both write
to the DLQ: a batch with DLQ records runs one more Spark job (the DLQ write of
the records the pass collected) whatever sent them there. An earlier version
had no such lines: B then wrote no DLQ record and ran 1 job per batch, A ran 2
(the DLQ write of the records the ``drop`` rule quarantined), which read as if
the rules cost a job; they do not (tests/spark/test_jobs_per_batch.py).

    python -m bench.expectations_cost --out bench/results/expectations_cost.json
    python -m bench.expectations_cost --records 20000 --pairs 2      # quick
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.common import MIN_PAIRS, Stopwatch, log, paired_ratios, rotated, setup_environment, summary, write_result

SCHEMA = "id BIGINT NOT NULL, customer STRING, amount DOUBLE, currency STRING"
RULES = [
    {"name": "has-customer", "condition": "customer IS NOT NULL", "action": "warn"},
    {"name": "known-currency", "condition": "currency IN ('EUR', 'USD')", "action": "warn"},
    {"name": "small", "condition": "amount < 900", "action": "warn"},
    {"name": "positive", "condition": "amount > 0", "action": "drop"},
    {"name": "has-id", "condition": "id IS NOT NULL", "action": "fail"},
]


def write_input(folder: Path, records: int, per_file: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for start in range(0, records, per_file):
        lines = []
        for i in range(start, min(start + per_file, records)):
            amount = -1.0 if i % 200 == 7 else (i * 7919 % 100_000) / 100.0  # 0.5% dropped by `positive`
            currency = "GBP" if i % 50 == 3 else "EUR"
            if i % 200 == 11:  # 0.5% a string where a number is expected: a source error (DLQ) in both pipelines
                amount = "n/a"
            lines.append(json.dumps({"id": i, "customer": f"c{i % 5000}", "amount": amount, "currency": currency}))
        (folder / f"part-{start:09d}.json").write_text("\n".join(lines) + "\n")


def spec(root: Path, with_rules: bool):
    from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec, PipelineSpec, ProcessorSpec, SourceSpec

    processors = [ProcessorSpec("eur", "field.set", {"field": "currency", "value": "coalesce(currency, 'EUR')"})]
    if with_rules:
        processors.append(ProcessorSpec("quality", "expect", {"rules": RULES}))
    return PipelineSpec(
        id="expectations-bench",
        sources=(SourceSpec("in", "file", {"path": str(root / "in"), "format": "json", "schema": SCHEMA}),),
        destinations=(DestinationSpec("lake", "file", {"path": str(root / "out"), "format": "parquet"}),),
        processors=tuple(processors),
        dead_letter_queue=DeadLetterQueueSpec(plugin="file", settings={"path": str(root / "dlq"), "format": "json"},
                                              window_size=0),
    )


def run_once(spark, root: Path, with_rules: bool, tag: str) -> tuple[float, int, dict]:
    from airflow_conduit.spark.runner import execute

    for name in ("out", "dlq", f"state-{tag}"):
        shutil.rmtree(root / name, ignore_errors=True)
    runners = []
    with Stopwatch() as watch:
        code, report = execute(spark, spec(root, with_rules), state_dir=root / f"state-{tag}", run_id="bench",
                               on_runner=runners.append)
    if code != 0:
        raise RuntimeError(f"run failed: {report.error}")
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(str(runners[0].query.runId)))
    return watch.seconds, jobs / max(1, len(report.batches)), report.totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--per-file", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=MIN_PAIRS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_environment()
    from airflow_conduit.spark.session import build_session

    root = Path(tempfile.mkdtemp(prefix="conduit-bench-expect-"))
    write_input(root / "in", args.records, args.per_file)
    spark = build_session("bench-expectations", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run_once(spark, root, True, "warmup")  # JIT and caches: not measured
        times: dict[str, list[float]] = {"with": [], "without": []}
        jobs: dict[str, list[float]] = {"with": [], "without": []}
        totals = {}
        for rep in range(args.pairs):
            for kind in rotated(["with", "without"], rep):
                seconds, n_jobs, totals[kind] = run_once(spark, root, kind == "with", f"{kind}-{rep}")
                times[kind].append(seconds)
                jobs[kind].append(n_jobs)
                log(f"pair {rep + 1}/{args.pairs} {kind} expectations: {seconds:.1f}s, {n_jobs:g} Spark jobs per batch")
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "records": args.records,
        "per_file": args.per_file,
        "rules": RULES,
        "seconds_with": summary(times["with"]),
        "seconds_without": summary(times["without"]),
        "ratio_with_over_without": paired_ratios(times["with"], times["without"]),
        "jobs_per_batch_with": jobs["with"],
        "jobs_per_batch_without": jobs["without"],
        "totals_with": totals.get("with"),
        "totals_without": totals.get("without"),
        "expectation_totals": totals.get("with", {}).get("expectations"),
    }
    ratio = result["ratio_with_over_without"]
    log(f"expectations cost: time with / without = {ratio['median']:.3f} (min {ratio['min']:.3f}, max {ratio['max']:.3f}); "
        f"Spark jobs per batch {jobs['with']} vs {jobs['without']}")
    write_result("expectations_cost", result, args.out)
    return 0


# -- the report's section ------------------------------------------------------------------------------

TITLE = "7. Cost of expectations"
ABOUT = """
The same generated JSON lines (0.5 % unparsable, so both pipelines write to the DLQ) through the same pipeline
(the runner in-process on `local[2]`, one `field.set`, a Parquet destination, a file DLQ), A with an `expect`
processor, B without it, alternating in rotated order after a warm-up run; time A ÷ time B per pair. The rules
are evaluated and counted in the batch's one pass (an observation): the Spark jobs per batch should be the same.
"""


def section(r: dict[str, Any]) -> str:
    from bench.markdown import section_text, spread, table

    tw, to = r.get("totals_with") or {}, r.get("totals_without") or {}
    same = sorted(set(r["jobs_per_batch_with"])) == sorted(set(r["jobs_per_batch_without"]))
    facts = table(["measure", "A (with rules)", "B (without)"], [
        ["seconds", spread(r["seconds_with"], 1, " s"), spread(r["seconds_without"], 1, " s")],
        ["Spark jobs per batch", r["jobs_per_batch_with"], r["jobs_per_batch_without"]],
        ["written, to the DLQ", f"{sum((tw.get('written') or {}).values()):,}, {tw.get('dlq', 0):,}",
         f"{sum((to.get('written') or {}).values()):,}, {to.get('dlq', 0):,}"],
    ])
    ratio = (f"{r['records']:,} records, {r['per_file']:,} per file. Time A ÷ B: **{spread(r['ratio_with_over_without'])}**; "
             f"Spark jobs per batch {'the same' if same else '**differ**'}.")
    rules = table(["rule", "condition", "action"], [[x["name"], f"`{x['condition']}`", x["action"]] for x in r["rules"]])
    counted = [[f"{proc} / {name}", f"{c['passed']:,}", f"{c['failed']:,}"]
               for proc, by_rule in (r.get("expectation_totals") or {}).items() for name, c in by_rule.items()]
    return section_text(TITLE, ABOUT, ratio, facts, rules, table(["processor / rule", "passed", "failed"], counted) if counted else "")


if __name__ == "__main__":
    raise SystemExit(main())
