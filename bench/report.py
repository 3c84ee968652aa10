"""Render docs/benchmarks.md from the JSON results of the four benchmarks (bench/results/*.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, fmt, fmt_summary, read_result

NA = "not measured (the benchmark failed or was not run; see its log next to the JSON results)"


def _verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("**met**" if met else "**missed**")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# -- 1 ------------------------------------------------------------------------------------------------


# Why a step of the runner costs what it does (prefix of the step's label -> explanation), from its code.
STAGE_WHY = {
    "compute+checkpoint: source": "every line is parsed twice (`from_json` into a `map<string,string>`, to tell "
    "malformed from wrong-typed from missing fields, and into the declared schema), the error columns are "
    "evaluated, and the result is stored (an eager local checkpoint)",
    "compute+checkpoint: batch": "every file is read whole (`wholetext`) and split into lines, so that each record "
    "knows its line number for the DLQ context; the lines are stored (an eager local checkpoint)",
    "processors": "each processor is computed and stored on its own (an eager local checkpoint after every "
    "processor, which the runner uses to keep plans small): one pass over the batch and one copy of it per processor",
    "write:": "one Parquet file per batch and destination, in source order: a sort, then a single writer task (one "
    "of the two cores idles); a whole-batch file is what makes a batch's output replaceable after a crash",
    "nack window": "the ordered positions of the nacked records come from a `row_number()` over the whole batch: a "
    "global sort in one partition",
    "plan:": "building DataFrames (Python calls and Catalyst analysis of wide plans; no data): a fixed cost per batch",
    "outside the batches": "query start, then Structured Streaming's offset and commit logs and file listing around "
    "each batch",
    "compute+checkpoint: row ids": "a row id per record, stored",
    "compute+checkpoint: fates": "the fate of every record (nacked, filtered, written), stored",
    "counts": "one aggregation over the stored fates",
    "rest of the batch": "`batch.isEmpty()` (a Spark job on the batch), commit markers, window file, report entry, "
    "Python bookkeeping",
}


def _why(label: str) -> str:
    for prefix, why in STAGE_WHY.items():
        if label.startswith(prefix):
            return why[:1].upper() + why[1:] + "."
    return ""


def section_error_handling(r: dict[str, Any] | None) -> tuple[str, list[str]]:
    if r is None:
        return "## 1. Cost of error handling on the data path\n\n" + NA + "\n", ["1. error handling a/b ≤ 1.15", NA, "n/a"]
    ab, ac, cb = r["ratio_a_b"], r["ratio_a_c"], r["ratio_c_b"]
    met = ab["median"] <= r["target_a_b"]
    rps, secs = r["records_per_second"], r["seconds"]
    exp = r["expected"]
    counts = r["counts"]

    def counts_cell(way: str) -> str:
        c = counts[way][0]
        agree = all(x == c for x in counts[way])
        text = f"{c['written']:,} written"
        if c.get("bad") is not None:
            text += f", {c['bad']:,} to the DLQ"
        return text + ("" if agree else " (varied between repetitions!)")

    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(r["kinds"].items()))
    rows = [
        ["a: this runner (DLQ branch, nack window, per-batch commit)", fmt_summary(secs["a"], 1, " s"),
         fmt_summary(rps["a"], 0), counts_cell("a")],
        ["b: plain PySpark, bad rows dropped (the floor)", fmt_summary(secs["b"], 1, " s"), fmt_summary(rps["b"], 0),
         counts_cell("b")],
        ["c: Python UDF, try/except, value-or-error struct", fmt_summary(secs["c"], 1, " s"), fmt_summary(rps["c"], 0),
         counts_cell("c")],
    ]
    ratio_rows = [
        ["a/b (runner time ÷ plain PySpark time)", fmt_summary(ab), f"≤ {r['target_a_b']:.2f}", _verdict(met)],
        ["a/c (runner time ÷ Python UDF time)", fmt_summary(ac), "(none)", "below 1 = runner faster" if ac["median"] < 1 else "runner slower"],
        ["c/b (Python UDF time ÷ plain PySpark time)", fmt_summary(cb), "(none)", ""],
    ]
    shares = r.get("stage_shares_a") or {}
    total_a = secs["a"]["median"]
    ordered = sorted(shares.items(), key=lambda kv: -kv[1]["median"])
    stage_rows = [[label, fmt_summary(v, 1, " s"), f"{100 * v['median'] / total_a:.0f}%"] for label, v in ordered]
    top = [(label, v["median"]) for label, v in ordered[:4]]
    floor = secs["b"]["median"]
    agree_b = counts["b"][0]["written"] == exp["written"]
    text = f"""## 1. Cost of error handling on the data path

**Data**: {r['records']:,} JSON lines generated by the script ({r['data_bytes'] / 1e6:,.0f} MB in {r['files']} files of
{r['per_file']:,}): {kinds}. Bad = malformed line, a string where a number is expected (`amount`, `id`),
a missing NOT NULL field (`customer`), 1% in total; `test` orders are filtered (acked).
Expected: {exp['written']:,} records written, {exp['filtered']:,} filtered, {exp['bad']:,} bad.

**Transforms** (the same three ways): `currency = coalesce(currency, 'EUR')`, keep `customer <> 'test'`,
`amount_cents = round(amount * 100)`, `order_date = to_date(ts)`; output Parquet.

- **a** this project's runner, called in-process (`airflow_conduit.spark.runner.execute`, the function the
  spark-submit entry point calls) on the shared SparkSession: file source, `field.set`, `filter`, `sql`
  processors, Parquet destination, Parquet DLQ, `window-size` {r['window_size']:,} / `window-nack-threshold`
  {r['window_threshold']:,} (the window is evaluated, never exceeded), per-destination per-batch commit markers,
  run report; `available-now` with `max-files-per-trigger: {r['files_per_batch']}` ({r['batches_a']} micro-batches).
- **b** plain PySpark batch job, no error handling: `spark.read.json(mode=DROPMALFORMED)`, rows with a NULL
  `id`/`customer` dropped, same transforms, `write.parquet`. Bad rows vanish: the floor.
- **c** the usual hand-written alternative: `spark.read.text`, a Python UDF (`json.loads` + type checks in
  try/except) returning a `struct<value, error>`, persisted, good rows transformed to Parquet, bad rows to a
  Parquet DLQ.

One local[2] SparkSession (driver memory {r['driver_memory']}, started once in {r['spark_start_seconds']:.0f} s and
excluded) runs all three: JVM start does not count. One warm-up round on {r['warmup']['records']:,} records is not
counted. Then {r['reps']} repetitions, each running a, b and c in a rotated order (orders: {', '.join(''.join(o) for o in r['orders'])});
the ratios are per repetition (same repetition, back to back), then median (min–max).

{_table(['way', 'seconds, median (min–max)', 'records/s (input records, bad included)', 'rows out'], rows)}

**Ratios of times** (above 1 = the first is slower; a/b ≤ 1.15 means the runner takes at most 15% longer
than plain PySpark):

{_table(['ratio', 'median (min–max) over the repetitions', 'target', 'verdict'], ratio_rows)}

Correctness check (outside the timed region): a wrote {counts['a'][0]['written']:,} records and put
{counts['a'][0]['bad']:,} in its DLQ; b wrote {counts['b'][0]['written']:,}
({'the same records: its reader drops exactly the bad lines' if agree_b else 'NOT the same count as expected'});
c wrote {counts['c'][0]['written']:,} and put {counts['c'][0]['bad']:,} in its DLQ.

**Where the runner's time goes** (exclusive wall time of the runner's steps, summed over the batches, median of
the repetitions; measured by wrapping the runner's functions with a timer in this process, behaviour unchanged;
the rows add up to a's time. `compute+checkpoint: X` is an eager local checkpoint, where the data of X is
computed; `plan:` rows only build DataFrames):

{_table(['step', 'seconds, median (min–max)', 'share of a'], stage_rows)}

**Target a/b ≤ {r['target_a_b']:.2f}: {_verdict(met).strip('*')}** (median {ab['median']:.2f}).
"""
    if not met:
        items = "\n".join(f"- **{label}**: {seconds:.1f} s ({100 * seconds / total_a:.0f}% of a). {_why(label)}"
                          for label, seconds in top)
        text += f"""
What limits it. Plain PySpark (b) reads with Spark's JSON reader, parses each line once, keeps nothing and
writes in parallel: {floor:.1f} s in all. This is not JVM start (one shared session, excluded) and not JSON
parsing as such (b parses the same JSON). The runner's largest steps:

{items}

Levers for the Spark runner's owners (not changed here): parse once (one `from_json` with the corrupt-record
column, telling a missing field from a wrong type with a cheaper test), checkpoint less often (one cut after
parsing and the processors instead of one per stage), skip the window's global sort when this batch's nacks
cannot exceed the threshold, and write in parallel partitions where a destination does not need source order.
Bigger batches (`max-files-per-trigger`) spread the fixed per-batch costs.
"""
    text += f"""
Compared with the hand-written UDF (c), which also keeps every bad record with its error: a/c median
{ac['median']:.2f}; the UDF costs c/b {cb['median']:.2f}× the floor (every row goes to a Python worker and back, and through
`json.loads`).
"""
    summary_row = ["1. error handling: a/b (runner ÷ plain PySpark time)", f"median {ab['median']:.2f} ({ab['min']:.2f}–{ab['max']:.2f})",
                   f"≤ {r['target_a_b']:.2f}", _verdict(met)]
    return text, summary_row


# -- 2 ------------------------------------------------------------------------------------------------


def section_recovery(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    if r is None or not r.get("by_poll"):
        return "## 2. Reaction time of recovery\n\n" + NA + "\n", [["2. recovery reaction ≤ poll + 1 s", NA, "", "n/a"]]
    parts = [f"""## 2. Reaction time of recovery

Path measured: **the operator** (`RecoveringSparkPipelineOperator`) under `dag.test()` (SQLite metadata DB),
real spark-submit through the local launcher, real `SparkPipelineTrigger` polling, real deferral on the
backoff timer (`TimeDeltaTrigger`) and resume into `resubmit`. The job fails with a transient error on every
run (`--faults transient_first_runs`: after spark-submit and the driver's Python start, before the
SparkSession), policy `fixed`, `min-delay` {r['delay']:g} s, `max-retries` {r['restarts']}: {r['restarts']}
restarts are measured, then the budget is exhausted and the pipeline degrades (the task fails, as designed).

Each restart, from the moment the Spark driver exited (the launcher's wrapper records it when spark-submit
exits) to the moment the next spark-submit process was started, minus the configured delay:

- *detection*: driver exit → the trigger yields its event (the rest of the poll interval, then the status,
  report and log-tail reads);
- *resume*: event → `execute_complete` runs;
- *decide*: the recovery engine's decision, persistence (`task_state_store`, `recovery.json`, XCom) → defer on
  the timer;
- *timer overshoot*: defer → `resubmit` runs, minus the configured delay (the timer trigger wakes every 1 s);
- *submit*: `resubmit` → spark-submit started (spec validation, `--py-files` zip, command line, `Popen`).

The timestamps come from thin subclasses of the operator and trigger (bench/timed_operator.py) that record the
time and call the real methods.
"""]
    rows_summary = []
    for key, p in sorted(r["by_poll"].items(), key=lambda kv: float(kv[0])):
        s = p["summary"]
        met = s["overhead"]["median"] <= p["target"] and s["overhead"]["max"] <= p["target"]
        rows = [[name, fmt_summary(s[k], 3, " s")] for name, k in (
            ("detection", "detection"), ("… of which waiting for the next poll", "poll_wait"),
            ("… of which the poll's reads (status, report, log tail) and the event", "poll_reads"), ("resume", "resume"), ("decide", "decide"),
            ("timer overshoot", "timer_overshoot"), ("submit", "submit"),
            ("**overhead** (total minus delay)", "overhead"), ("configured delay", "configured_delay"),
            ("total, exit → next submission", "total"))]
        parts.append(f"""### Poll interval {p['poll']:g} s ({len(p['cycles'])} restarts; dag run ended `{p['dagrun_state']}`)

{_table(['component', 'median (min–max)'], rows)}

Target ≤ poll interval + 1 s = {p['target']:.1f} s: **{_verdict(met).strip('*')}** (worst restart
{s['overhead']['max']:.2f} s). Detection is bounded by the poll interval: its expected value is half an
interval, its worst case one interval plus the reads.
""")
        rows_summary.append([f"2. recovery overhead, poll {p['poll']:g} s", f"median {s['overhead']['median']:.2f} s, max {s['overhead']['max']:.2f} s",
                             f"≤ {p['target']:.1f} s", _verdict(met)])
    parts.append("""What this does not include: `dag.test()` runs each trigger inline and resumes the task in the same
process. In a deployed Airflow, each of the two resumes of a restart (after the job's event, after the backoff
timer) goes through the triggerer writing the event, the scheduler re-queueing the task and an executor
starting it on a worker. That latency (scheduler loop, executor, task start; not measured here) comes on top
of the overhead above (and, for the timer, could be avoided by re-submitting from the trigger, which this
design refuses to do so that a re-created trigger can never submit twice). What limits the measured part is
the poll interval: the rest is tens of milliseconds.
""")
    return "\n".join(parts), rows_summary


# -- 3 ------------------------------------------------------------------------------------------------


def section_restart(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    if r is None:
        return "## 3. Restart cost\n\n" + NA + "\n", [["3. restart cost", NA, "", "n/a"]]
    kills = r["kills"]
    rows = [[str(i + 1), ", ".join(str(b) for b in k["in_flight"]) or "none (killed between two batches)", f"{k['to_running']:.1f} s",
             f"{k['first_batch_seconds']:.1f} s", f"{k['to_processing_again']:.1f} s",
             f"{k['read_twice']:,} (bound {k['batch_size']:,})",
             ", ".join(k["first_batch_already_committed"]) or "none"] for i, k in enumerate(kills)]
    s = r["summary"]
    o = r["outputs"]
    read_ok = all(k["read_twice"] <= k["batch_size"] for k in kills)
    cold_ratio = r["summary"]["first_batch_seconds"]["median"] / max(r["steady_batch_seconds"]["median"], 1e-9)
    written_ok = r["written_twice"] == 0 and r["missing"] == 0
    text = f"""## 3. Restart cost

{r['records']:,} records (the bench 1 data and spec: 1% bad, Parquet lake, Parquet DLQ, nack window), one file
of {r['per_batch']:,} records per micro-batch, real spark-submit (local[2]) through the local launcher.
{len(kills)} times, once a batch was in flight (its offsets in the checkpoint, its commit not), the driver's
process group got SIGKILL (`LocalLauncher.kill(graceful=False)`) a random 0.1–1.5 s later, so at a different point
of the batch each time (or, when that batch had already finished, between two batches), and the pipeline was re-submitted at once with the same state directory (detection and backoff are measured in
bench 2). The last run then went to the end: `{r['final_status']}`, exit code {r['final_exit_code']}.

{_table(['kill', 'batch in flight', 'SIGKILL → running (JVM, SparkSession, query start)', 'first batch (the replay)',
         '**SIGKILL → processing again**', 'records read twice', 'destinations already committed for it'], rows)}

- Time until processing again: median {fmt_summary(s['to_processing_again'], 1, ' s')}; of which SIGKILL →
  run report `running` {fmt_summary(s['to_running'], 1, ' s')} (spark-submit, JVM, SparkSession, checkpoint
  recovery and query start) and the replayed batch {fmt_summary(s['first_batch_seconds'], 1, ' s')}
  (a steady-state batch of the last run took {fmt_summary(r['steady_batch_seconds'], 1, ' s')}).
- Records read twice: median {fmt_summary(s['read_twice'], 0)} per kill: the in-flight batch, read again by the
  restarted run (counted from its report; the killed run may have read only part of it, so this is the upper
  bound). Expected ≤ one batch ({r['per_batch']:,}): **{_verdict(read_ok).strip('*')}**.
- Records written twice (from the outputs at the end): lake {o['lake_rows']:,} rows for {o['lake_distinct']:,}
  distinct ids → **{o['lake_written_twice']}** twice; DLQ {o['dlq_rows']:,} rows for {o['dlq_distinct']:,}
  distinct source positions → **{o['dlq_written_twice']}** twice. Missing: lake {o['lake_missing']}, DLQ
  {o['dlq_missing']} (expected {o['expected_written']:,} and {o['expected_bad']:,}). Must be 0 and 0:
  **{_verdict(written_ok).strip('*')}**.

What limits the time to processing again: a restart is a fresh spark-submit, so the JVM, the SparkSession and the
Python driver start again ({s['to_running']['median']:.1f} s to `running`), and the first batch of a fresh driver
is {'much ' if cold_ratio >= 2 else ''}slower than a steady one ({s['first_batch_seconds']['median']:.1f} s vs
{r['steady_batch_seconds']['median']:.1f} s; presumably a cold JVM and Python worker - class loading, JIT, the first
query's file listing and planning - which this benchmark does not break down further). The replay itself is bounded by one batch (`max-files-per-trigger` sets its size), and the commit
markers skip any destination that had already committed the batch. Through the operator, add bench 2's
overhead and the backoff delay before the re-submission.
"""
    summary_rows = [
        ["3. restart: SIGKILL → processing again", f"median {s['to_processing_again']['median']:.1f} s", "(none)", "measured"],
        ["3. restart: records read twice", f"max {s['read_twice']['max']:,.0f} per kill", f"≤ in-flight batch ({r['per_batch']:,})", _verdict(read_ok)],
        ["3. restart: records written twice / missing", f"{r['written_twice']} / {r['missing']}", "0 / 0", _verdict(written_ok)],
    ]
    return text, summary_rows


# -- 4 ------------------------------------------------------------------------------------------------


def section_deferral(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    def with_wrappers(p: dict[str, Any]) -> dict[str, float]:
        """B in USS over A's RSS plus one detached wrapper (USS) per job: the local launcher's full per-job cost."""
        return p["ratio_workers_uss_over_triggerer_plus_wrappers"]

    if r is None:
        return "## 4. Deferral at scale\n\n" + NA + "\n", [["4. deferral at scale", NA, "", "n/a"]]
    rows = []
    for n in r["ns"]:
        p = r["per_n"][str(n)]
        rows.append([
            f"{n:,}",
            fmt_summary(p["triggerer_rss_mb"], 0, " MB"),
            fmt_summary(p["marginal_kb_per_pipeline"], 1, " KB"),
            fmt_summary(p["total_mb_per_pipeline"], 3, " MB"),
            fmt_summary({k: v * 100 if k != "n" else v for k, v in p["cpu_cores"].items()}, 1, "%"),
            fmt_summary(p["cpu_ms_per_pipeline_per_second"], 3, " ms"),
            f"{100 * p['polls_done_share']['median']:.0f}%",
            fmt_summary(p["loop_lag_p99_ms"], 1, " ms"),
            fmt_summary(p["workers_rss_mb"], 0, " MB"),
            fmt_summary(p["ratio_workers_rss_over_triggerer"], 0, "×"),
            fmt_summary(with_wrappers(p), 1, "×"),
        ])
    w = r["worker_rss_mb"]
    text = f"""## 4. Deferral at scale

**A, deferred** (this project): one process that has Airflow and this package loaded, as a triggerer has, runs
N `SparkPipelineTrigger` instances in one asyncio event loop. Each polls a fake running job every
{r['poll_interval']:g} s{" (the operator's default)" if r['poll_interval'] == 5 else ""} through the real code: `LocalLauncher.status` (process table,
exit file) and `RunReport.read` of a real report file, each in a worker thread. The fake jobs are {r['fake_jobs']}
real `sleep` processes shared by the handles. Trigger starts are spread over one poll interval. Measured once
all have started, over one poll interval: RSS at the end, CPU time of the process, polls done vs expected, and
the lag of a 50 ms ticker in the same loop.

**B, one worker process per running job** (a plain `SparkSubmitOperator`): a Python process that imports
Airflow's task runner and the Spark provider and sits in `SparkSubmitHook.submit`, reading the output of
spark-submit (a fake `spark-submit` on PATH that sleeps). **{r['workers_per_rep']} such processes were measured per
repetition and the cost of N jobs is extrapolated as N × the median per process** (RSS {fmt_summary(w, 1, ' MB')},
USS {fmt_summary(r['worker_uss_mb'], 1, ' MB')}; CPU while waiting {100 * r['worker_cpu_cores']['median']:.2f}% of a core
each). Airflow 3 also keeps a supervisor process per running task (which also heartbeats), not counted here: B is
an underestimate, in memory and in CPU.

A is not Airflow's triggerer process itself (whose trigger runner adds per-trigger bookkeeping, a log handler per
trigger and database round trips for events); it is the part this project controls: the triggers, their polls
and their I/O in one loop. Not counted on either side: the Spark job itself (the same in both). Counted against A where it applies: the
local launcher keeps a small stdlib wrapper process per running job to record the exit code
(`airflow_conduit.launchers.detached`: RSS {r['detached_wrapper']['rss_mb']:.1f} MB, USS
{r['detached_wrapper']['uss_mb']:.1f} MB each); the standalone-cluster launcher keeps none.

{r['reps']} repetitions, each measuring B once and A for every N in a rotated order; ratios per repetition,
median (min–max).

{_table(['N', 'triggerer RSS', 'RSS per extra pipeline', 'RSS ÷ N', 'CPU (of one core)', 'CPU per pipeline per second',
         'polls done', 'loop lag p99', 'B: N worker processes (RSS)', 'B ÷ A (RSS)',
         'B ÷ (A + N local-launcher wrappers), USS'], rows)}
"""
    big = r["per_n"][str(r["ns"][-1])]
    wrapper = r["detached_wrapper"]["uss_mb"]
    text += f"""
At N = {r['ns'][-1]:,} one event loop holds all watches in {big['triggerer_rss_mb']['median']:.0f} MB and
{100 * big['cpu_cores']['median']:.1f}% of a core; the worker-per-job model would hold
{big['workers_rss_mb']['median'] / 1000:,.1f} GB of RSS in {r['ns'][-1]:,} processes (and {r['ns'][-1]:,} worker slots).
With the local launcher's wrapper counted (USS {wrapper:.1f} MB per job), deferral still holds
{with_wrappers(big)['median']:.1f}× less memory than B measured in USS (last column); with the standalone launcher
there is no wrapper and the RSS ratio applies.
What limits A: each poll costs {fmt(big['cpu_ms_per_poll']['median'], 2)} ms of CPU (two thread hops, a process
table lookup, a JSON read), so CPU grows linearly with N ÷ poll interval; the default thread pool (min(32, cores +
4) threads) serialises the blocking reads; the loop lag column shows whether the loop keeps up.
"""
    summary_rows = [
        [f"4. deferral, N = {r['ns'][-1]:,}: per watched pipeline (A)",
         f"{big['marginal_kb_per_pipeline']['median']:.0f} KB RSS, {big['cpu_ms_per_pipeline_per_second']['median']:.3f} ms CPU/s "
         f"(vs B: {w['median']:.0f} MB RSS per job)", "(no number set)", "measured"],
        [f"4. deferral, N = {r['ns'][-1]:,}: memory B ÷ A", fmt_summary(big["ratio_workers_rss_over_triggerer"], 0, "×"),
         "(no number set)", "measured"],
    ]
    return text, summary_rows


# -- the document ----------------------------------------------------------------------------------------


def render(results: Path = RESULTS_DIR) -> str:
    meta = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else {}
    m = meta.get("machine", {})
    s1, row1 = section_error_handling(read_result("error_handling", results))
    s2, rows2 = section_recovery(read_result("recovery_reaction", results))
    s3, rows3 = section_restart(read_result("restart_cost", results))
    s4, rows4 = section_deferral(read_result("deferral_scale", results))
    benches = meta.get("benchmarks", {})
    timing_rows = [[name, f"{b['seconds'] / 60:.1f} min", "ok" if b["exit_code"] == 0 else f"FAILED (exit {b['exit_code']})",
                    ", ".join(f"{x:.1f}" for x in b["load_average_after"]) if b.get("load_average_after") else "not recorded",
                    f"`{b['command']}`"] for name, b in benches.items()]
    note = f"\n**Note on this run**: {meta['note']}\n" if meta.get("note") else ""
    total = meta.get("total_seconds")
    versions = m.get("versions", {})
    head = f"""# Benchmarks

<!-- Written by `make bench` (bench/run_all.py + bench/report.py). Do not edit by hand: re-run instead. -->

What error handling, recovery and deferral cost, side by side with plain Spark and plain Airflow. Reproduce
with **`make bench`** (= `.venv/bin/python -m bench.run_all`; not part of `make test`). Each benchmark runs in
its own process; raw measurements are in `bench/results/*.json`, full output in `bench/results/*.log`.

Rules: these machines are shared and noisy, so every figure that compares two ways is a ratio of runs made in
the same invocation, alternating (rotated order each repetition), the median of at least 5 pairs, with min
and max shown as `median (min–max)`.

**Machine**: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB, {m.get('os', '?')};
load average at start {', '.join(f'{x:.2f}' for x in m.get('load_average_at_start', []))}.
**Versions**: Python {m.get('python', '?')}, {m.get('java', '?')}, PySpark {versions.get('pyspark', '?')},
Apache Airflow {versions.get('airflow', '?')}, apache-airflow-providers-apache-spark
{versions.get('apache-airflow-providers-apache-spark', '?')}, airflow-conduit {versions.get('airflow-conduit', '?')}.
**Run**: finished {meta.get('finished_at', '?')}; command `{meta.get('command', 'make bench')}` (what `make bench` runs
after its install step); {f'{total / 60:.1f}' if total else '?'} min in all (budget: 30 min).
{note}
{_table(['benchmark', 'time', 'status', 'load average after (1, 5, 15 min)', 'command'], timing_rows)}

## Targets

{_table(['measure', 'result', 'target', 'verdict'], [row1, *rows2, *rows3, *rows4])}
"""
    return "\n".join([head, s1, s2, s3, s4])


if __name__ == "__main__":
    print(render())
