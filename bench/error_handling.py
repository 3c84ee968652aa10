"""Benchmark 1: what per-record error handling costs on the data path.

The same generated JSON lines (1% bad: malformed, wrong-typed, missing a
required field) go through the same transforms into Parquet, several ways, in
one process and one SparkSession:

  a  this project's runner (``airflow_conduit.spark.runner.execute``, in-process, the same code
     spark-submit runs): DLQ, nack window, per-batch commit markers, run report; at the micro-batch
     size a user gets by default (no ``max-files-per-trigger``: every available file in one batch);
  t  the same runner with ``max-files-per-trigger`` set (``--tuned-files-per-batch``, default 5),
     measured beside a in the same repetitions;
  b  plain PySpark, no error handling: ``read.json`` with DROPMALFORMED, drop NULL required fields
     (bad rows vanish: the physical reference);
  c  the usual hand-written alternative: a Python UDF with try/except returning a value-or-error
     struct, good rows to Parquet, bad rows to a Parquet DLQ.

The streaming floors, against which the runner is judged at the same batch size:

  f  the floor of any Structured Streaming design: Spark's streaming JSON source (PERMISSIVE, corrupt-record
     column), one ``foreachBatch``, good rows transformed to Parquet; no DLQ, no positions, no bookkeeping;
  p  f with each input file read as its own partition, as the runner reads them (a DLQ record's line number
     is its index in the file's partition), and the batch run in at most one task per core, as the runner runs it;
  pt p at t's batch size (``maxFilesPerTrigger``).

``fixed_cost`` turns a, p, t and pt into the runner's fixed cost per micro-batch over p; one more run of the
runner on data without bad records counts its Spark jobs per batch when no record goes to the DLQ.

Transforms: currency = coalesce(currency, 'EUR'); keep customer <> 'test';
amount_cents = round(amount * 100); order_date = to_date(ts).

Each repetition runs every way in a rotated order; ratios are per repetition
(time_a / time_b, time_a / time_c: above 1 means a is slower). The runner's Spark jobs are
counted per run from Spark's status tracker (the query's runId is the job group of its batches).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from bench.common import (
    MIN_PAIRS,
    Stopwatch,
    log,
    paired_ratios,
    rotated,
    setup_environment,
    summary,
    write_result,
)

SCHEMA_DDL = "id BIGINT NOT NULL, customer STRING NOT NULL, amount DOUBLE, currency STRING, ts TIMESTAMP"
BAD_EVERY = 100  # 1% of the records are bad
TEST_EVERY = 250  # 0.4% are test orders (filtered, acked)
BAD_KINDS = ("malformed", "wrong_type_amount", "wrong_type_id", "missing_customer")
WINDOW_SIZE = 10_000  # the runner's DLQ window-size: evaluated, never exceeded by 1% bad records
WINDOW_NACK_THRESHOLD = 1_000


# -- data ---------------------------------------------------------------------------------------------


def record_line(i: int, bad: bool = True) -> tuple[str, str]:
    """The i-th input line and its kind: good, test (filtered) or, when ``bad``, one of BAD_KINDS."""
    customer = "test" if i % TEST_EVERY == 3 else f"c{i % 50_000:05d}"
    amount = (i * 7919 % 100_000) / 100.0
    currency = '"EUR"' if i % 3 else ('"USD"' if i % 2 else "null")
    ts = f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}Z"
    if bad and i % BAD_EVERY == 37:
        kind = BAD_KINDS[(i // BAD_EVERY) % len(BAD_KINDS)]
        if kind == "malformed":
            return f'{{"id": {i}, "customer": "{customer}", "amount": {amount}, "curr', kind
        if kind == "wrong_type_amount":
            return f'{{"id": {i}, "customer": "{customer}", "amount": "twelve", "currency": {currency}, "ts": "{ts}"}}', kind
        if kind == "wrong_type_id":
            return f'{{"id": "n{i}", "customer": "{customer}", "amount": {amount}, "currency": {currency}, "ts": "{ts}"}}', kind
        return f'{{"id": {i}, "amount": {amount}, "currency": {currency}, "ts": "{ts}"}}', kind
    line = f'{{"id": {i}, "customer": "{customer}", "amount": {amount}, "currency": {currency}, "ts": "{ts}"}}'
    return line, ("test" if customer == "test" else "good")


def generate(folder: Path, records: int, per_file: int, *, bad: bool = True) -> dict[str, int]:
    """Write ``records`` JSON lines in files of ``per_file`` (1% bad unless ``bad`` is False); the count of each kind."""
    folder.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for start in range(0, records, per_file):
        lines = []
        for i in range(start, min(start + per_file, records)):
            line, kind = record_line(i, bad)
            counts[kind] = counts.get(kind, 0) + 1
            lines.append(line)
        (folder / f"orders-{start // per_file:05d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return counts


def expected(counts: dict[str, int]) -> dict[str, int]:
    bad = sum(counts.get(k, 0) for k in BAD_KINDS)
    return {"written": counts.get("good", 0), "filtered": counts.get("test", 0), "bad": bad}


# -- the three ways -----------------------------------------------------------------------------------


def runner_spec(data: Path, out: Path, dlq: Path, files_per_batch: int, window_size: int, threshold: int) -> str:
    """The bench pipeline; ``files_per_batch`` 0 leaves ``max-files-per-trigger`` out (the default: every
    available file in one micro-batch)."""
    max_files = f"\n        max-files-per-trigger: {files_per_batch}" if files_per_batch else ""
    return f"""
version: "1"
pipeline:
  id: bench-orders
  mode: available-now
  sources:
    - id: orders-in
      plugin: builtin:file
      settings:
        path: {json.dumps(str(data))}
        format: json
        schema: "{SCHEMA_DDL}"{max_files}
      processors:
        - id: default-currency
          plugin: field.set
          settings: {{field: currency, value: "coalesce(currency, 'EUR')"}}
  processors:
    - id: drop-test-orders
      plugin: filter
      settings: {{condition: "customer <> 'test'"}}
    - id: enrich
      plugin: sql
      settings:
        select: ["*", "round(amount * 100) AS amount_cents", "to_date(ts) AS order_date"]
  destinations:
    - id: lake
      plugin: builtin:file
      settings: {{path: {json.dumps(str(out))}, format: parquet}}
  dead-letter-queue:
    plugin: builtin:file
    settings: {{path: {json.dumps(str(dlq))}, format: parquet}}
    window-size: {window_size}
    window-nack-threshold: {threshold}
"""


def spark_jobs(spark, runner) -> int | None:
    """Spark jobs the run's query ran (its runId is the job group of every batch job); None if unknown."""
    query = getattr(runner, "query", None)
    if query is None:
        return None
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId)))


def run_a(spark, work: Path, data: Path, tag: str, args: argparse.Namespace, files_per_batch: int = 0) -> dict[str, Any]:
    """This project's runner, in-process: the code the entry point runs under spark-submit."""
    from airflow_conduit.pipeline import load_pipeline_from_string
    from airflow_conduit.spark.runner import execute

    root = work / f"a{files_per_batch}-{tag}"
    out, dlq, state = root / "lake", root / "dlq", root / "state"
    text = runner_spec(data, out, dlq, files_per_batch, args.window_size, args.window_threshold)
    spec = load_pipeline_from_string(text, str(root / "pipeline.yaml"), base_dir=str(root))
    runners: list[Any] = []
    with Stopwatch() as sw:
        code, report = execute(spark, spec, state_dir=state, run_id="bench", faults=None, on_runner=runners.append)
    if code != 0:
        raise RuntimeError(f"runner exited {code}: {report.error}")
    totals = report.totals
    return {
        "seconds": sw.seconds,
        "written": int((totals.get("written") or {}).get("lake", 0)),
        "filtered": int(totals.get("filtered", 0)),
        "bad": int(totals.get("dlq", 0)),
        "batches": len(report.batches),
        "jobs": spark_jobs(spark, runners[0]) if runners else None,
        "out": [out, dlq],
        "root": root,
    }


def _read_schema():
    """SCHEMA_DDL with every field nullable: what a reader without error handling is given."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, f.dataType, True) for f in T.StructType.fromDDL(SCHEMA_DDL).fields])


def _required_present():
    """The NOT NULL fields of SCHEMA_DDL are present (plain Spark drops the rows where they are not)."""
    from pyspark.sql import functions as F

    return F.col("id").isNotNull() & F.col("customer").isNotNull()


def _transforms(df):
    from pyspark.sql import functions as F

    df = df.withColumn("currency", F.coalesce(F.col("currency"), F.lit("EUR")))
    df = df.where(F.col("customer") != F.lit("test"))
    return df.selectExpr("*", "round(amount * 100) AS amount_cents", "to_date(ts) AS order_date")


def run_b(spark, work: Path, data: Path, tag: str, args: argparse.Namespace) -> dict[str, Any]:
    """Plain PySpark, no error handling: bad rows are dropped by the reader or the NOT NULL filter."""
    root = work / f"b-{tag}"
    out = root / "lake"
    with Stopwatch() as sw:
        df = spark.read.schema(_read_schema()).option("mode", "DROPMALFORMED").json(str(data))
        df = df.where(_required_present())
        _transforms(df).write.mode("overwrite").parquet(str(out))
    return {"seconds": sw.seconds, "out": [out], "root": root, "lake": out}


def run_f(spark, work: Path, data: Path, tag: str, args: argparse.Namespace, *, one_file_per_partition: bool = False,
          files_per_trigger: int = 0) -> dict[str, Any]:
    """The streaming floor (f; p with ``one_file_per_partition``): good rows only, nothing the runner adds;
    ``files_per_trigger`` sets ``maxFilesPerTrigger`` (0: every file in one micro-batch, as the runner's default)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from airflow_conduit.spark.batch_pass import in_tasks_per_core
    from airflow_conduit.spark.runner import files_read_one_per_partition

    root = work / f"{'p' if one_file_per_partition else 'f'}{files_per_trigger}-{tag}"
    out = root / "lake"
    schema = _read_schema().add("_corrupt", T.StringType(), True)
    batch_ids: list[int] = []

    def write_good(batch, batch_id: int) -> None:
        batch_ids.append(batch_id)
        if one_file_per_partition:  # and in at most one task per core, as the runner runs a batch
            batch = in_tasks_per_core(batch)
        good = batch.where(F.col("_corrupt").isNull() & _required_present())
        _transforms(good.drop("_corrupt")).write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    partitions = files_read_one_per_partition(spark) if one_file_per_partition else contextlib.nullcontext()
    with partitions, Stopwatch() as sw:
        reader = spark.readStream.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", "_corrupt")
        if files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", files_per_trigger)
        stream = reader.json(str(data))
        query = (
            stream.writeStream.foreachBatch(write_good).option("checkpointLocation", str(root / "checkpoint"))
            .trigger(availableNow=True).start()
        )
        query.awaitTermination()
    return {"seconds": sw.seconds, "out": [out], "root": root, "lake": out, "batches": len(batch_ids)}


def _udf_parse():
    """The hand-written alternative: json.loads + type checks in a Python UDF, try/except -> (value, error)."""
    from datetime import datetime

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    value_type = _read_schema()
    result_type = T.StructType([T.StructField("value", value_type), T.StructField("error", T.StringType())])

    def parse(line: str):
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            rid, customer = obj.get("id"), obj.get("customer")
            if rid is None or customer is None:
                raise KeyError("missing required field id or customer")
            if not isinstance(rid, int) or isinstance(rid, bool):
                raise TypeError(f"id: expected an integer, got {type(rid).__name__}")
            if not isinstance(customer, str):
                raise TypeError(f"customer: expected a string, got {type(customer).__name__}")
            amount = obj.get("amount")
            if amount is not None:
                if not isinstance(amount, (int, float)) or isinstance(amount, bool):
                    raise TypeError(f"amount: expected a number, got {type(amount).__name__}")
                amount = float(amount)
            currency = obj.get("currency")
            if currency is not None and not isinstance(currency, str):
                raise TypeError("currency: expected a string")
            ts = obj.get("ts")
            if ts is not None:
                ts = datetime.fromisoformat(ts)
            return ((rid, customer, amount, currency, ts), None)
        except Exception as exc:  # noqa: BLE001 - the point of the pattern
            return (None, f"{type(exc).__name__}: {exc}")

    return F.udf(parse, result_type)


def run_c(spark, work: Path, data: Path, tag: str, args: argparse.Namespace) -> dict[str, Any]:
    """A Python UDF with try/except; the parsed rows are persisted so the UDF runs once for both writes."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    root = work / f"c-{tag}"
    out, dlq = root / "lake", root / "dlq"
    parse = _udf_parse()
    with Stopwatch() as sw:
        lines = spark.read.text(str(data)).where(F.trim(F.col("value")) != F.lit(""))
        parsed = lines.select(F.col("value").alias("raw"), parse(F.col("value")).alias("r")).persist(StorageLevel.MEMORY_AND_DISK)
        good = parsed.where(F.col("r.error").isNull()).select("r.value.*")
        _transforms(good).write.mode("overwrite").parquet(str(out))
        parsed.where(F.col("r.error").isNotNull()).select("raw", F.col("r.error").alias("error")).write.mode(
            "overwrite"
        ).parquet(str(dlq))
        parsed.unpersist()
    return {"seconds": sw.seconds, "out": [out, dlq], "root": root, "lake": out, "dlq": dlq}


def ways(args: argparse.Namespace) -> dict[str, Callable[..., dict[str, Any]]]:
    """a and p at the default micro-batch size, b, c, f, and (when a tuned size is given) t and pt: a and p at it."""
    result: dict[str, Callable[..., dict[str, Any]]] = {
        "a": functools.partial(run_a, files_per_batch=args.files_per_batch), "b": run_b, "c": run_c,
        "f": run_f, "p": functools.partial(run_f, one_file_per_partition=True, files_per_trigger=args.files_per_batch),
    }
    if args.tuned_files_per_batch >= 0 and args.tuned_files_per_batch != args.files_per_batch:
        result["t"] = functools.partial(run_a, files_per_batch=args.tuned_files_per_batch)
        result["pt"] = functools.partial(run_f, one_file_per_partition=True, files_per_trigger=args.tuned_files_per_batch)
    return result


RUNNER_WAYS = ("a", "t")


def count_outputs(spark, way: str, result: dict[str, Any]) -> dict[str, int]:
    """Rows written by a way (outside the timed region), to check the three agree."""
    if way in RUNNER_WAYS:
        return {"written": result["written"], "filtered": result["filtered"], "bad": result["bad"]}
    written = spark.read.parquet(str(result["lake"])).count()
    bad = spark.read.parquet(str(result["dlq"])).count() if way == "c" else None
    return {"written": written, "bad": bad}


def build_spark(
    driver_memory: str, *, jit_options: bool = True, app_name: str = "airflow-conduit-bench-error-handling", java_options: str = ""
):
    """One local[2] session for the ways: the runner's settings (spark/session.py) and, unless ``jit_options``
    is False (benchmark 1b's comparison), its JVM options (spark/jvm.py: what its launchers give the driver; b's
    and p's generated methods are small, so they change nothing for them), plus driver memory and any further
    driver ``java_options`` (benchmark 1c's profiler)."""
    from pyspark.sql import SparkSession

    from airflow_conduit.spark.jvm import with_jit_options
    from airflow_conduit.spark.session import SESSION_SETTINGS

    builder = (
        SparkSession.builder.appName(app_name)
        .master("local[2]")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
    )
    conf = {**SESSION_SETTINGS, **({"spark.driver.extraJavaOptions": java_options} if java_options else {})}
    for key, value in (with_jit_options(conf) if jit_options else conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _next_job_id(spark) -> int:
    """The id Spark's scheduler gives its next job (jobs are numbered in submission order)."""
    value = spark.sparkContext._jsc.sc().dagScheduler().nextJobId()
    return value if isinstance(value, int) else int(value.get())


def seconds_in_jobs(spark, first: int, end: int) -> float:
    """Wall time covered by Spark jobs ``first`` .. ``end - 1`` (submission to completion, from Spark's status
    store; overlapping jobs counted once): what a way spent with its executors at work. The rest of its time
    is the driver's alone."""
    store = spark.sparkContext._jsc.sc().statusStore()
    spans = []
    for job_id in range(first, end):
        job = store.job(job_id)
        spans.append((job.submissionTime().get().getTime(), job.completionTime().get().getTime()))
    return covered_ms(spans) / 1000


def covered_ms(spans: list[tuple[int, int]]) -> int:
    """Length of the union of ``(start, end)`` intervals."""
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


class CpuClock:
    """CPU seconds of the driver's JVM (all its threads: tasks, JIT compiler, GC; read from /proc) plus this Python
    process, and the JVM's JIT compile time. Wall time on a shared 2-core host moves with the host's load; CPU time
    counts a way's own work, so it moved less between repetitions (docs/architecture.md, the data path)."""

    def __init__(self, spark) -> None:
        jvm = spark.sparkContext._jvm
        self._stat = Path(f"/proc/{int(jvm.java.lang.ProcessHandle.current().pid())}/stat")
        self._jit = jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
        self._tick = os.sysconf("SC_CLK_TCK")

    def read(self) -> tuple[float, float]:
        """(CPU seconds so far, JIT compile seconds so far)."""
        fields = self._stat.read_text().rsplit(")", 1)[1].split()  # from the state field on: utime, stime at 11, 12
        own = os.times()
        jvm_cpu = (int(fields[11]) + int(fields[12])) / self._tick
        return jvm_cpu + own.user + own.system, self._jit.getTotalCompilationTime() / 1000


def measure(spark, work: Path, data: Path, reps: int, args: argparse.Namespace, exp: dict[str, int], label: str) -> dict[str, Any]:
    todo = ways(args)
    times: dict[str, list[float]] = {w: [] for w in todo}
    in_jobs: dict[str, list[float]] = {w: [] for w in todo}
    cpu: dict[str, list[float]] = {w: [] for w in todo}
    jit: dict[str, list[float]] = {w: [] for w in todo}
    clock = CpuClock(spark)
    counts: dict[str, list[dict[str, int]]] = {w: [] for w in todo}
    orders: list[list[str]] = []
    runner: dict[str, dict[str, list[Any]]] = {w: {"batches": [], "jobs": []} for w in todo if w in RUNNER_WAYS}
    batches: dict[str, list[int]] = {w: [] for w in todo}
    for rep in range(reps):
        order = rotated(list(todo), rep)
        orders.append(order)
        for way in order:
            first_job = _next_job_id(spark)
            cpu_before, jit_before = clock.read()
            result = todo[way](spark, work, data, f"{label}{rep}", args)
            cpu_after, jit_after = clock.read()
            times[way].append(result["seconds"])
            cpu[way].append(cpu_after - cpu_before)
            jit[way].append(jit_after - jit_before)
            in_jobs[way].append(seconds_in_jobs(spark, first_job, _next_job_id(spark)))
            counts[way].append(count_outputs(spark, way, result))
            if "batches" in result:
                batches[way].append(result["batches"])
            if way in runner:
                for key in ("batches", "jobs"):
                    runner[way][key].append(result[key])
            shutil.rmtree(result["root"], ignore_errors=True)
            extra = f" ({result['batches']} batches, {result['jobs']} Spark jobs)" if way in runner else ""
            log(f"  {label} rep {rep} {way}: {result['seconds']:.2f}s {counts[way][-1]}{extra}")
    return {"times": times, "in_jobs": in_jobs, "cpu": cpu, "jit": jit, "counts": counts, "orders": orders, "expected": exp, "runner": runner,
            "batches": batches}


def runner_summary(run: dict[str, list[Any]], times: list[float], files_per_batch: int, files: int) -> dict[str, Any]:
    """What the report says about one runner configuration: batches, Spark jobs per batch."""
    batches = run["batches"][-1] if run["batches"] else None
    jobs = [j for j in run["jobs"] if j is not None]
    return {
        "files_per_batch": files_per_batch,
        "max_files_per_trigger": files_per_batch or None,
        "files": files,
        "batches": batches,
        "jobs": jobs,
        "jobs_per_batch": summary(j / b for j, b in zip(jobs, run["batches"]) if b),
    }


def fixed_cost(times: dict[str, list[float]], batches: dict[str, int]) -> dict[str, Any]:
    """The runner's cost per micro-batch over the floor p, in ms, per repetition.

    The runner's excess over p at the same batch size is a fixed cost per batch times the batches plus a cost per
    record; with the same records in more batches (t, pt) only the first part grows, so
    ((t - pt) - (a - p)) / (batches of t - batches of a) is the fixed part (a two-point regression of the excess on
    the batch count). (t - pt) / batches of t, which also carries the per-record excess, bounds it from above."""
    extra = batches.get("t", 0) - batches.get("a", 0)
    if extra <= 0 or batches.get("pt") != batches.get("t") or batches.get("p") != batches.get("a"):
        return {}
    excess_t = [t - q for t, q in zip(times["t"], times["pt"])]
    excess_a = [a - p for a, p in zip(times["a"], times["p"])]
    return {
        "fixed_cost_ms": summary(1000 * (xt - xa) / extra for xt, xa in zip(excess_t, excess_a)),
        "fixed_cost_upper_ms": summary(1000 * xt / batches["t"] for xt in excess_t),
    }


def jobs_without_bad_records(spark, work: Path, args: argparse.Namespace) -> list[float]:
    """Spark jobs per micro-batch of the runner on data without a bad record (one file per batch, three files)."""
    clean = work / "clean"
    generate(clean, min(args.records, 3 * args.per_file), args.per_file, bad=False)
    result = run_a(spark, work, clean, "clean", args, files_per_batch=1)
    shutil.rmtree(result["root"], ignore_errors=True)
    if result["bad"] or result["jobs"] is None or not result["batches"]:
        log(f"  clean run: {result['bad']} bad records, {result['jobs']} jobs: not counted")
        return []
    log(f"  clean run: {result['batches']} batches, {result['jobs']} Spark jobs")
    return [result["jobs"] / result["batches"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--per-file", type=int, default=100_000, help="records per input file")
    parser.add_argument("--files-per-batch", type=int, default=0,
                        help="runner's max-files-per-trigger; 0 (the default) leaves it out: all files in one batch")
    parser.add_argument("--tuned-files-per-batch", type=int, default=5,
                        help="a second runner configuration measured beside the default (t); -1: none")
    parser.add_argument("--window-size", type=int, default=WINDOW_SIZE, help="runner's DLQ window-size")
    parser.add_argument("--window-threshold", type=int, default=WINDOW_NACK_THRESHOLD, help="runner's DLQ window-nack-threshold")
    parser.add_argument("--reps", type=int, default=MIN_PAIRS)
    parser.add_argument("--warmup-records", type=int, default=0,
                        help="records of the uncounted warm-up round; 0 (default): the measured data itself")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_environment()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="conduit-bench-eh-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        log(f"generating {args.records:,} records ({args.per_file:,} per file) in {work}")
        with Stopwatch() as gen:
            counts = generate(work / "data", args.records, args.per_file)
            if args.warmup_records:
                warm_counts = generate(work / "warmup", args.warmup_records, max(1, args.warmup_records // 2))
        # The warm-up round runs every way once, uncounted, on the measured data by default: a smaller warm-up
        # leaves the runner's data path still being JIT-compiled in the first counted repetition, and the rotation
        # would charge that to whichever way ran first. Cold starts are measured on their own (benchmarks 3 and 6).
        warm_data, warm_counts = (work / "warmup", warm_counts) if args.warmup_records else (work / "data", counts)
        data_bytes = sum(p.stat().st_size for p in (work / "data").iterdir())
        log(f"  {gen.seconds:.1f}s, {data_bytes / 1e6:.0f} MB; kinds {counts}")
        with Stopwatch() as start:
            spark = build_spark(args.driver_memory)
        log(f"SparkSession started in {start.seconds:.1f}s (once, shared by every way)")
        log("warm-up (not counted)")
        warm = measure(spark, work, warm_data, 1, args, expected(warm_counts), "warm")
        log(f"measuring: {args.reps} repetitions of {', '.join(ways(args))} (rotated order)")
        main_run = measure(spark, work, work / "data", args.reps, args, expected(counts), "rep")
        clean_jobs = jobs_without_bad_records(spark, work, args)
        spark.stop()
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    times = main_run["times"]
    records = args.records
    files = -(-records // args.per_file)
    runs = main_run["runner"]
    configs = {"a": args.files_per_batch, "t": args.tuned_files_per_batch}
    runner = {w: runner_summary(runs[w], times[w], configs[w], files) for w in runs}
    result = {
        "records": records,
        "per_file": args.per_file,
        "files": files,
        "files_per_batch": args.files_per_batch,
        "window_size": args.window_size,
        "window_threshold": args.window_threshold,
        "data_bytes": data_bytes,
        "kinds": counts,
        "expected": main_run["expected"],
        "spark_start_seconds": start.seconds,
        "driver_memory": args.driver_memory,
        "reps": args.reps,
        "orders": main_run["orders"],
        "runner": runner,
        "batches_a": runner["a"]["batches"],
        "times": times,
        "counts": main_run["counts"],
        "warmup": {"records": args.warmup_records or args.records, "times": warm["times"], "counts": warm["counts"], "expected": warm["expected"]},
        "seconds": {w: summary(v) for w, v in times.items()},
        "seconds_in_jobs": {w: summary(v) for w, v in main_run["in_jobs"].items()},
        "seconds_outside_jobs": {w: summary(t - j for t, j in zip(times[w], main_run["in_jobs"][w])) for w in times},
        "cpu_seconds": {w: summary(v) for w, v in main_run["cpu"].items()},
        "jit_seconds": {w: summary(v) for w, v in main_run["jit"].items()},
        "cpu_ratio_a_b": paired_ratios(main_run["cpu"]["a"], main_run["cpu"]["b"]),
        "cpu_ratio_a_p": paired_ratios(main_run["cpu"]["a"], main_run["cpu"]["p"]),
        "cpu_ratio_p_b": paired_ratios(main_run["cpu"]["p"], main_run["cpu"]["b"]),
        "records_per_second": {w: summary(records / t for t in v) for w, v in times.items()},
        "ratio_a_b": paired_ratios(times["a"], times["b"]),
        "ratio_a_c": paired_ratios(times["a"], times["c"]),
        "ratio_c_b": paired_ratios(times["c"], times["b"]),
    }
    if "t" in times:
        result["ratio_t_b"] = paired_ratios(times["t"], times["b"])
        result["ratio_t_c"] = paired_ratios(times["t"], times["c"])
        result["ratio_t_a"] = paired_ratios(times["t"], times["a"])
    for way in ("f", "p"):
        result[f"ratio_{way}_b"] = paired_ratios(times[way], times["b"])
    result["ratio_p_f"] = paired_ratios(times["p"], times["f"])
    result["ratio_a_p"] = paired_ratios(times["a"], times["p"])
    result["batches"] = {w: v[-1] for w, v in main_run["batches"].items() if v}
    if "t" in times:
        result["ratio_t_pt"] = paired_ratios(times["t"], times["pt"])
        result.update(fixed_cost(times, result["batches"]))
    with_bad = [j / b for w in RUNNER_WAYS if w in runs for j, b in zip(runs[w]["jobs"], runs[w]["batches"]) if j is not None and b]
    result["jobs_per_batch"] = {"with_bad": summary(with_bad), "without_bad": summary(clean_jobs)}
    path = write_result("error_handling", result, args.out)
    log(
        f"a/b {result['ratio_a_b']['median']:.2f} (min {result['ratio_a_b']['min']:.2f}, max {result['ratio_a_b']['max']:.2f}); "
        f"a/c {result['ratio_a_c']['median']:.2f}; written to {path}"
    )
    return 0


# -- the report's section ------------------------------------------------------------------------------

TITLE = "1. Cost of error handling on the data path"
ABOUT = """
The same generated JSON lines (1 % bad: malformed, a string where a number is expected, a missing required
field; 0.4 % test orders, filtered) go through the same transforms (`coalesce(currency, 'EUR')`, keep
`customer <> 'test'`, `round(amount * 100)`, `to_date(ts)`) into Parquet, in one `local[2]` SparkSession
(its start excluded), after one uncounted warm-up round of every way:

- **a** this project's runner in-process (`runner.execute`, what the spark-submit entry point calls): Parquet
  lake, Parquet DLQ, nack window, commit markers, run report; every file in one micro-batch (the default).
  **t**: the same with `max-files-per-trigger` set.
- **p** the streaming floor at a's batch size: Spark's streaming JSON source, each file its own partition and
  the batch in one task per core (as the runner reads), one `foreachBatch` writing the good rows to Parquet; no
  DLQ, no counts. **pt**: p at t's batch size. **f**: p with Spark's default packing of files into partitions.
- **b** plain PySpark batch job (`read.json` DROPMALFORMED, bad rows dropped): the physical reference.
  **c** the hand-written alternative: a Python UDF with try/except, good rows to Parquet, bad rows to a DLQ.

Every repetition runs every way in a rotated order; a ratio is taken per repetition, then median (min–max).
**Fixed cost per micro-batch over p**, per repetition: ((t − pt) − (a − p)) ÷ (t's batches − a's batches), the
growth of the runner's excess over the floor per extra batch at the same records (a two-point regression on the
batch count); (t − pt) ÷ t's batches, which also carries the per-record excess, is its upper bound. Spark jobs
per micro-batch are counted with Spark's status tracker (every batch job carries the query's run id as its
group); "without bad records" is a run on clean data, one file per batch. Time in Spark jobs is the union of a
way's jobs' submission → completion spans (Spark's status store); the rest is the driver's alone (planning,
JVM round trips, commits, the streaming query's bookkeeping). Why the data path is built this way:
[architecture](architecture.md#the-data-path-one-pass-per-micro-batch).
"""
WAY_NAMES = {
    "a": "a: runner, default batch size", "t": "t: runner, max-files-per-trigger {t}", "p": "p: streaming floor, default batch size",
    "pt": "pt: streaming floor, max-files-per-trigger {t}", "f": "f: streaming floor, Spark's file packing",
    "b": "b: plain PySpark batch job", "c": "c: Python UDF with try/except",
}
RATIOS = (("ratio_a_p", "a/p"), ("ratio_t_pt", "t/pt"), ("ratio_a_c", "a/c"), ("ratio_a_b", "a/b"), ("ratio_p_b", "p/b"),
          ("ratio_p_f", "p/f"), ("ratio_f_b", "f/b"), ("ratio_c_b", "c/b"), ("ratio_t_a", "t/a"),
          ("cpu_ratio_a_p", "a/p in CPU time (driver JVM and Python)"), ("cpu_ratio_a_b", "a/b in CPU time"))


def section(r: dict[str, Any]) -> str:
    """Benchmark 1's markdown section from its result."""
    from bench.markdown import section_text, spread, table

    tuned = (r.get("runner", {}).get("t") or {}).get("max_files_per_trigger")
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(r["kinds"].items()))
    data = table(["records", "files × records", "MB", "kinds", "batches (a, t)"],
                 [[f"{r['records']:,}", f"{r['files']} × {r['per_file']:,}", f"{r['data_bytes'] / 1e6:,.0f}", kinds,
                   ", ".join(str(r.get("batches", {}).get(w, "–")) for w in ("a", "t"))]])
    secs, inside, outside = r["seconds"], r.get("seconds_in_jobs", {}), r.get("seconds_outside_jobs", {})
    ways = table(["way", "seconds", "in Spark jobs", "outside Spark jobs (driver)", "batches", "rows written, to the DLQ"],
                 [[WAY_NAMES.get(w, w).format(t=tuned), spread(secs[w], 1), spread(inside.get(w), 1), spread(outside.get(w), 1),
                   r.get("batches", {}).get(w, "–"), _rows_out(r["counts"][w])] for w in WAY_NAMES if w in secs])
    ratios = table(["ratio", "median (min–max)"], [[label, spread(r[key])] for key, label in RATIOS if key in r])
    per_batch = table(["per micro-batch", "value"], [
        ["fixed cost over p (regression on batch count)", spread(r.get("fixed_cost_ms"), 0, " ms")],
        ["(t − pt) ÷ t's batches (upper bound)", spread(r.get("fixed_cost_upper_ms"), 0, " ms")],
        ["Spark jobs, batches with bad records", spread((r.get("jobs_per_batch") or {}).get("with_bad"), 1)],
        ["Spark jobs, batches without bad records", spread((r.get("jobs_per_batch") or {}).get("without_bad"), 1)],
    ])
    return section_text(TITLE, ABOUT, data, ways, ratios, per_batch)


def _rows_out(counts: list[dict[str, Any]]) -> str:
    first = counts[0]
    text = f"{first['written']:,}" + (f", {first['bad']:,}" if first.get("bad") is not None else "")
    return text if all(c == first for c in counts) else text + " (varied between repetitions!)"


if __name__ == "__main__":
    sys.exit(main())
