"""Benchmark 1: what per-record error handling costs on the data path (method: docs/benchmarks.md)."""

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from bench.common import (MIN_PAIRS, Stopwatch, at, benchmark, by_way, facts_table, figure_table, file_dlq, measure_ways, pipeline_yaml,
                          ratio, run_pipeline, spark_session, step, summary, table, with_required, workdir, write_lines)

TITLE = "1. Cost of error handling on the data path"
SCHEMA_DDL = "id BIGINT NOT NULL, customer STRING NOT NULL, amount DOUBLE, currency STRING, ts TIMESTAMP"
NULLABLE_DDL = SCHEMA_DDL.replace(" NOT NULL", "")  # how the floors read it (with_required drops the rows without those fields)
BAD_KINDS = ("malformed", "wrong_type_amount", "wrong_type_id", "missing_customer")
RUNNER_WAYS = ("a", "t")
ENRICH = ["*", "round(amount * 100) AS amount_cents", "to_date(ts) AS order_date"]


def kind_of(i: int, bad: bool = True) -> str:
    """1 % bad (BAD_KINDS in turn), 0.4 % test orders (filtered), the rest good."""
    return BAD_KINDS[(i // 100) % len(BAD_KINDS)] if bad and i % 100 == 37 else ("test" if i % 250 == 3 else "good")


def record_line(i: int, bad: bool = True) -> str:
    customer = "test" if i % 250 == 3 else f"c{i % 50_000:05d}"
    amount, currency = (i * 7919 % 100_000) / 100.0, '"EUR"' if i % 3 else ('"USD"' if i % 2 else "null")
    ts = f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}Z"
    fields = {"id": i, "customer": f'"{customer}"', "amount": amount, "currency": currency, "ts": f'"{ts}"'}
    kind = kind_of(i, bad)
    if kind == "malformed":
        return f'{{"id": {i}, "customer": "{customer}", "amount": {amount}, "curr'
    fields.update({"wrong_type_amount": {"amount": '"twelve"'}, "wrong_type_id": {"id": f'"n{i}"'}}.get(kind, {}))
    if kind == "missing_customer":
        del fields["customer"]
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"


def generate(folder: Path, records: int, per_file: int, *, bad: bool = True) -> dict[str, int]:
    """The orders files; how many records of each kind they hold."""
    write_lines(folder, records, per_file, lambda i: record_line(i, bad))
    return dict(Counter(kind_of(i, bad) for i in range(records)))


def expected(counts: dict[str, int]) -> dict[str, int]:
    return {"written": counts.get("good", 0), "filtered": counts.get("test", 0), "bad": sum(counts.get(k, 0) for k in BAD_KINDS)}


def runner_spec(data: Path, root: Path, files_per_batch: int = 0) -> str:
    """The orders pipeline, its lake and DLQ under ``root``."""
    source = step("orders-in", "builtin:file", path=data, format="json", schema=SCHEMA_DDL,
                  **({"max_files_per_trigger": files_per_batch} if files_per_batch else {}))
    source["processors"] = [step("default-currency", "field.set", field="currency", value="coalesce(currency, 'EUR')")]
    return pipeline_yaml("bench-orders", [source], [step("lake", "builtin:file", path=root / "lake", format="parquet")],
                         [step("drop-test-orders", "filter", condition="customer <> 'test'"), step("enrich", "sql", select=ENRICH)],
                         file_dlq(root / "dlq", window_size=10_000, window_nack_threshold=1_000))


def transforms(df):
    from pyspark.sql import functions as F

    df = df.withColumn("currency", F.coalesce(F.col("currency"), F.lit("EUR"))).where(F.col("customer") != F.lit("test"))
    return df.selectExpr(*ENRICH)


def streaming_floor(spark, data: Path, root: Path, ddl: str, transform: Callable, *, as_runner: bool = True, files_per_trigger: int = 0) -> dict[str, Any]:
    """Spark's streaming JSON source, one foreachBatch writing the good rows to Parquet; no DLQ, no bookkeeping.
    ``as_runner``: each file its own partition and the batch in one task per core, as the runner reads."""
    import contextlib

    from pyspark.sql import functions as F

    from airflow_conduit.spark.batch_pass import in_tasks_per_core
    from airflow_conduit.spark.runner import files_read_one_per_partition

    batch_ids: list[int] = []

    def write_good(batch, batch_id: int) -> None:
        batch_ids.append(batch_id)
        good = with_required((in_tasks_per_core(batch) if as_runner else batch).where(F.col("_corrupt").isNull()), ddl)
        transform(good.drop("_corrupt")).write.mode("overwrite").parquet(str(root / "lake" / f"batch={batch_id}"))

    with files_read_one_per_partition(spark) if as_runner else contextlib.nullcontext(), Stopwatch() as sw:
        reader = spark.readStream.schema(ddl.replace(" NOT NULL", "") + ", _corrupt STRING").option("mode", "PERMISSIVE") \
            .option("columnNameOfCorruptRecord", "_corrupt")
        if files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", files_per_trigger)
        query = reader.json(str(data)).writeStream.foreachBatch(write_good).option("checkpointLocation", str(root / "checkpoint")) \
            .trigger(availableNow=True).start()
        query.awaitTermination()
    return {"seconds": sw.seconds, "batches": len(batch_ids), "lake": root / "lake", "trigger_ms": trigger_ms(query)}


def run_b(spark, data: Path, root: Path) -> dict[str, Any]:
    """Plain PySpark: bad rows dropped by the reader or the NOT NULL filter."""
    with Stopwatch() as sw:
        df = spark.read.schema(NULLABLE_DDL).option("mode", "DROPMALFORMED").json(str(data))
        transforms(with_required(df, SCHEMA_DDL)).write.mode("overwrite").parquet(str(root / "lake"))
    return {"seconds": sw.seconds, "lake": root / "lake"}


def parse_with_try(line: str):
    """The hand-written alternative: json.loads and type checks, try/except -> (value, error)."""
    from datetime import datetime

    try:
        obj = json.loads(line)
        rid, customer, amount, currency, ts = (obj.get(k) for k in ("id", "customer", "amount", "currency", "ts"))
        if not isinstance(rid, int) or isinstance(rid, bool) or not isinstance(customer, str):
            raise TypeError("id must be an integer and customer a string")
        if amount is not None and (not isinstance(amount, (int, float)) or isinstance(amount, bool)):
            raise TypeError(f"amount: expected a number, got {type(amount).__name__}")
        if currency is not None and not isinstance(currency, str):
            raise TypeError("currency: expected a string")
        return (rid, customer, None if amount is None else float(amount), currency, ts and datetime.fromisoformat(ts)), None
    except Exception as exc:  # noqa: BLE001 - the point of the pattern
        return None, f"{type(exc).__name__}: {exc}"


def run_c(spark, data: Path, root: Path) -> dict[str, Any]:
    """A Python UDF with try/except; parsed rows persisted so the UDF runs once for both writes."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    parse = F.udf(parse_with_try, f"value STRUCT<{NULLABLE_DDL}>, error STRING")
    with Stopwatch() as sw:
        lines = spark.read.text(str(data)).where(F.trim(F.col("value")) != F.lit(""))
        parsed = lines.select(F.col("value").alias("raw"), parse(F.col("value")).alias("r")).persist(StorageLevel.MEMORY_AND_DISK)
        transforms(parsed.where(F.col("r.error").isNull()).select("r.value.*")).write.mode("overwrite").parquet(str(root / "lake"))
        parsed.where(F.col("r.error").isNotNull()).select("raw", F.col("r.error").alias("error")).write.mode("overwrite") \
            .parquet(str(root / "dlq"))
        parsed.unpersist()
    return {"seconds": sw.seconds, "lake": root / "lake", "dlq": root / "dlq"}


def ways(tuned: int = 0) -> dict[str, Callable[[Any, Path, Path], dict[str, Any]]]:
    """The ways by letter: a and p at the default batch size, b, c, f, and with ``tuned``, t and pt at that many files per batch."""
    def runner(n: int):
        return lambda spark, data, root: run_pipeline(spark, runner_spec(data, root, n), root)

    def floor(n: int, as_runner: bool = True):
        return lambda spark, data, root: streaming_floor(spark, data, root, SCHEMA_DDL, transforms, as_runner=as_runner,
                                                         files_per_trigger=n)

    return {"a": runner(0), "b": run_b, "c": run_c, "f": floor(0, False), "p": floor(0), **({"t": runner(tuned), "pt": floor(tuned)} if tuned else {})}


def small_batch_ways() -> dict[str, Callable[[Any, Path, Path], dict[str, Any]]]:
    """s: the runner, one file per micro-batch, each batch's time from Spark's progress; ps: the floor the same way."""
    def runner(spark, data: Path, root: Path) -> dict[str, Any]:
        queries: list[Any] = []
        result = run_pipeline(spark, runner_spec(data, root, 1), root, on_runner=queries.append)
        return {**result, "trigger_ms": trigger_ms(queries[0].query)}

    return {"s": runner, "ps": lambda spark, data, root: streaming_floor(spark, data, root, SCHEMA_DDL, transforms, files_per_trigger=1)}


def fixed_cost_regression(times: dict[str, list[float]], batches: dict[str, int]) -> dict[str, Any]:
    """((t - pt) - (a - p)) / (t's batches - a's): the runner's cost per extra batch over p at the same records."""
    extra = batches.get("t", 0) - batches.get("a", 0)
    if extra <= 0 or batches.get("pt") != batches.get("t") or batches.get("p") != batches.get("a"):
        return {}
    excess_t = [t - q for t, q in zip(times["t"], times["pt"])]
    return {"fixed_cost_regression_ms": summary(1000 * (xt - a + p) / extra for xt, a, p in zip(excess_t, times["a"], times["p"])),
            "fixed_cost_upper_ms": summary(1000 * xt / batches["t"] for xt in excess_t)}


def trigger_ms(query) -> list[int]:
    """Each micro-batch's time in Spark's own progress (``triggerExecution``: offsets, planning, the batch, commits)."""
    return [int(progress.durationMs["triggerExecution"]) for progress in query.recentProgress if progress.numInputRows]


def fixed_cost(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per repetition, the median small batch's time of the runner (s) minus the floor's (ps), the first batch of each
    left out (it also builds what later batches reuse): what a micro-batch costs over p when it holds few records."""
    def later(run: dict[str, Any]) -> list[int]:
        return run["trigger_ms"][1:] or run["trigger_ms"]

    if not runs.get("s") or not runs.get("ps"):
        return {}
    return {"fixed_cost_ms": summary(statistics.median(later(s)) - statistics.median(later(ps)) for s, ps in zip(runs["s"], runs["ps"])),
            "small_batch_ms": {w: summary(statistics.median(later(r)) for r in runs[w]) for w in ("s", "ps")},
            "small_batches": {w: runs[w][-1]["batches"] for w in ("s", "ps")}}


def measure(args) -> dict[str, Any]:
    with workdir("eh") as work:
        counts = generate(work / "data", args.records, args.per_file)
        data_bytes = sum(p.stat().st_size for p in (work / "data").iterdir())
        spark = spark_session("airflow-conduit-bench-error-handling", args.driver_memory)
        runs = measure_ways(spark, work, work / "data", ways(args.tuned_files_per_batch), args.reps)
        generate(work / "small", args.small_files * args.small_per_file, args.small_per_file)
        small = measure_ways(spark, work, work / "small", small_batch_ways(), args.reps, label="small batches: ")
        generate(work / "clean", min(args.records, 3 * args.per_file), args.per_file, bad=False)
        clean = run_pipeline(spark, runner_spec(work / "clean", work / "cl", 1), work / "cl")
        spark.stop()
    batches = {w: r[-1]["batches"] for w, r in runs.items() if "batches" in r[-1]}
    return {
        "records": args.records, "per_file": args.per_file, "files": -(-args.records // args.per_file), "data_bytes": data_bytes,
        "kinds": counts, "reps": args.reps, "batches": batches,
        "tuned_files_per_batch": args.tuned_files_per_batch if "t" in runs else None,
        "counts": {w: [{"written": x["written"], "bad": x["bad"]} for x in r] for w, r in runs.items()},
        "seconds": by_way(runs), "seconds_in_jobs": by_way(runs, "in_jobs"), "seconds_outside_jobs": by_way(runs, "outside_jobs"),
        "cpu_ratio_a_p": ratio(runs, "a", "p", "cpu"), "cpu_ratio_a_b": ratio(runs, "a", "b", "cpu"),
        "jobs_per_batch": {"with_bad": summary(x["jobs"] / x["batches"] for w in RUNNER_WAYS for x in runs.get(w, []) if x["batches"]),
                           "without_bad": summary([clean["jobs"] / clean["batches"]] if clean["batches"] and not clean["bad"] else [])},
        **fixed_cost(small), "small_per_file": args.small_per_file,
        **fixed_cost_regression({w: [x["seconds"] for x in r] for w, r in runs.items()}, batches),
        **{f"ratio_{num}_{den}": ratio(runs, num, den) for num, den in (pair.split("/") for pair in RATIOS) if {num, den} <= set(runs)}}


WAY_NAMES = {"a": "a: runner, default batch size", "t": "t: runner, max-files-per-trigger {t}", "p": "p: streaming floor, default batch size",
             "pt": "pt: streaming floor, max-files-per-trigger {t}", "f": "f: streaming floor, Spark's file packing",
             "b": "b: plain PySpark batch job", "c": "c: Python UDF with try/except"}
RATIOS = ("a/p", "t/pt", "a/c", "a/b", "p/b", "p/f", "f/b", "c/b", "t/a")  # figure ratio_<num>_<den>
CPU_RATIOS = {"cpu_ratio_a_p": "a/p in CPU time (driver JVM and Python)", "cpu_ratio_a_b": "a/b in CPU time"}
PER_BATCH = (("fixed cost over p: small batches, s − ps", at("fixed_cost_ms"), 0, " ms"),
             ("small batch, s: runner", at("small_batch_ms", "s"), 0, " ms"),
             ("small batch, ps: streaming floor", at("small_batch_ms", "ps"), 0, " ms"),
             ("fixed cost over p: regression on batch count, a and t", at("fixed_cost_regression_ms"), 0, " ms"),
             ("(t − pt) ÷ t's batches (upper bound)", at("fixed_cost_upper_ms"), 0, " ms"),
             ("Spark jobs, batches with bad records", at("jobs_per_batch", "with_bad"), 1),
             ("Spark jobs, batches without bad records", at("jobs_per_batch", "without_bad"), 1))


def rows_out(counts: list[dict[str, Any]]) -> str:
    """Rows written and sent to the DLQ by a way, the same in every repetition (or said otherwise)."""
    text = f"{counts[0]['written']:,}" + (f", {counts[0]['bad']:,}" if counts[0].get("bad") is not None else "")
    return text if all(c == counts[0] for c in counts) else text + " (varied between repetitions!)"


def small_batches(r: dict[str, Any]) -> str:
    counts = r.get("small_batches")
    return f"{counts['s']} × {r['small_per_file']:,}" if counts else "–"


def tables(r: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(r["kinds"].items()))
    per_way = (("way", lambda w: WAY_NAMES[w].format(t=r["tuned_files_per_batch"])), ("seconds", lambda w: r["seconds"][w], 1),
               ("in Spark jobs", lambda w: r["seconds_in_jobs"].get(w), 1),
               ("outside Spark jobs (driver)", lambda w: r["seconds_outside_jobs"].get(w), 1),
               ("batches", lambda w: str(r["batches"].get(w, "–"))), ("rows written, to the DLQ", lambda w: rows_out(r["counts"][w])))
    ratio_keys = {**{"ratio_" + p.replace("/", "_"): p for p in RATIOS}, **CPU_RATIOS}
    return [
        table(["records", "files × records", "MB", "kinds", "batches (a, t)", "small batches (s, ps): batches × records"],
              [[f"{r['records']:,}", f"{r['files']} × {r['per_file']:,}", f"{r['data_bytes'] / 1e6:,.0f}", kinds,
                ", ".join(str(r["batches"].get(w, "–")) for w in RUNNER_WAYS), small_batches(r)]]),
        figure_table([w for w in WAY_NAMES if w in r["seconds"]], per_way),
        facts_table(r, [(label, at(key)) for key, label in ratio_keys.items() if key in r], ("ratio", "median (min–max)")),
        facts_table(r, PER_BATCH, ("per micro-batch", "value"))]


if __name__ == "__main__":
    benchmark("error_handling", __doc__, measure, records=2_000_000, per_file=100_000, tuned_files_per_batch=5, reps=MIN_PAIRS,
              small_files=20, small_per_file=10_000,
              driver_memory="4g")
