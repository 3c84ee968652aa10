"""Render docs/benchmarks.md from the JSON results of the benchmarks (bench/results/*.json)."""

from __future__ import annotations

import json
import os
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
    "the pass": "the one pass over the batch: Spark's JSON reader parses each line once (PERMISSIVE, the raw text "
    "kept only for bad lines), the processors and fates are columns of the same plan, and the first destination's "
    "Parquet write executes it with a `DataFrame.observe` that gathers the counts, the DLQ rows and what the nack "
    "window needs on the way; also the per-destination commit markers",
    "DLQ write": "the nacked records, collected by the pass, are read from the observation as a local relation (they "
    "stay in the JVM), the reasons of rejected JSON lines are worked out on them (parsing each line again; one "
    "task), and they are written to the DLQ folder: one more Spark job per batch with bad records",
    "plan:": "building the batch's DataFrame (Python calls and Catalyst analysis of a wide plan; no data): a fixed "
    "cost per batch",
    "outside the batches": "query start, then Structured Streaming's file listing, offset and commit logs around "
    "each batch, and the query's stop",
    "nack window": "the read-order indices of the nacked records, from the pass's observation (no Spark job)",
    "rest of the batch": "the DLQ record's plan, releasing the batch, the report entry: Python bookkeeping",
    "write:": "a further destination reads and writes the batch again (one job each)",
}


def _why(label: str) -> str:
    for prefix, why in STAGE_WHY.items():
        if label.startswith(prefix):
            return why[:1].upper() + why[1:] + "."
    return ""


def _batch_size_text(cfg: dict[str, Any]) -> str:
    if cfg.get("max_files_per_trigger"):
        return f"`max-files-per-trigger: {cfg['max_files_per_trigger']}` ({cfg['batches']} micro-batches)"
    return f"no `max-files-per-trigger`, the default: all {cfg['files']} files in one micro-batch ({cfg['batches']} micro-batch{'es' if cfg['batches'] != 1 else ''})"


def _stage_table(cfg: dict[str, Any], total: float) -> tuple[str, list[tuple[str, float]]]:
    shares = cfg.get("stage_shares") or {}
    ordered = sorted(shares.items(), key=lambda kv: -kv[1]["median"])
    rows = [[label, fmt_summary(v, 1, " s"), f"{100 * v['median'] / total:.0f}%"] for label, v in ordered]
    return _table(["step", "seconds, median (min–max)", "share of the run"], rows), [(k, v["median"]) for k, v in ordered]


def _larger_part(inside: float, around: float) -> str:
    """Which part of a's time over b is larger: the pass's extra per-row work or what surrounds the pass."""
    if inside >= around:
        return "most of the gap to b is inside the pass"
    return "more of the gap to b is around the pass than inside it"


def _jobs_split(r: dict[str, Any]) -> str:
    """Each way's time in Spark jobs (executors at work) and outside them (the driver alone), when measured."""
    inside, outside = r.get("seconds_in_jobs"), r.get("seconds_outside_jobs")
    if not inside or not outside:
        return ""
    ways = [w for w in ("a", "t", "b", "c", "f", "p") if w in inside]
    cpu, jit = r.get("cpu_seconds") or {}, r.get("jit_seconds") or {}
    rows = [[w, fmt_summary(inside[w], 2, " s"), fmt_summary(outside[w], 2, " s"),
             fmt_summary(cpu[w], 2, " s") if w in cpu else "–", fmt_summary(jit[w], 2, " s") if w in jit else "–"] for w in ways]
    gap = ""
    if "a" in inside and "p" in inside:
        gap = (f"Of a's {r['seconds']['a']['median'] - r['seconds']['p']['median']:.2f} s over p (medians), "
               f"{inside['a']['median'] - inside['p']['median']:.2f} s are in Spark jobs (the pass's per-record work and the DLQ "
               f"write's job) and {outside['a']['median'] - outside['p']['median']:.2f} s outside them, on the driver alone "
               "(building and planning the batch's and the DLQ's plans, the observation's rows, the nack window, commit "
               "markers, the report). ")
    return f"""**Time in Spark jobs and outside them** (per way: the wall time of the Spark jobs it ran, submission to
completion, from Spark's status store, summed; the rest of its time is the driver's alone: planning, Python and
JVM round trips, commits, the streaming query's bookkeeping; medians (min–max)). {gap}{_cpu_note(r)}

{_table(['way', 'in Spark jobs', 'outside Spark jobs (driver)', 'CPU time (JVM + Python)', 'of it, JIT compiling'], rows)}

"""


def _cpu_note(r: dict[str, Any]) -> str:
    """What the CPU columns are, and the CPU ratios beside the wall-time ones."""
    ab, ap, pb = r.get("cpu_ratio_a_b"), r.get("cpu_ratio_a_p"), r.get("cpu_ratio_p_b")
    if not ab:
        return ""
    return (f"CPU time is the driver JVM's (every thread: tasks, JIT compiler, GC; from `/proc`) plus this Python "
            f"process's, per way; on this shared host it moves less with the load than wall time does. In CPU time "
            f"a/b {fmt_summary(ab)}, a/p {fmt_summary(ap)}, p/b {fmt_summary(pb)} (the targets are on wall time). "
            "JIT compiling is the JVM's compile time during the way (`CompilationMXBean`): threads of their own, "
            "competing with the tasks for the two cores.")


def section_error_handling(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    if r is None or "runner" not in r:
        return "## 1. Cost of error handling on the data path\n\n" + NA + "\n", [["1. error handling a/b ≤ 1.3", NA, "", "n/a"]]
    ab, ac, cb = r["ratio_a_b"], r["ratio_a_c"], r["ratio_c_b"]
    target, stretch, target_ac = r["target_a_b"], r["stretch_a_b"], r["target_a_c"]
    met, met_stretch, met_ac = ab["median"] <= target, ab["median"] <= stretch, ac["median"] <= target_ac
    rps, secs = r["records_per_second"], r["seconds"]
    exp = r["expected"]
    counts = r["counts"]
    cfg_a = r["runner"]["a"]
    cfg_t = r["runner"].get("t")

    def counts_cell(way: str) -> str:
        c = counts[way][0]
        agree = all(x == c for x in counts[way])
        text = f"{c['written']:,} written"
        if c.get("bad") is not None:
            text += f", {c['bad']:,} to the DLQ"
        return text + ("" if agree else " (varied between repetitions!)")

    def jobs_cell(cfg: dict[str, Any]) -> str:
        j = cfg["jobs_per_batch"]
        return f"{fmt(j['median'], 1)} Spark jobs per batch" if j.get("n") else "jobs not counted"

    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(r["kinds"].items()))
    rows = [
        [f"a: this runner, default batch size ({cfg_a['batches']} batch{'es' if cfg_a['batches'] != 1 else ''}; {jobs_cell(cfg_a)})",
         fmt_summary(secs["a"], 1, " s"), fmt_summary(rps["a"], 0), counts_cell("a")],
    ]
    if cfg_t:
        rows.append([f"t: this runner, `max-files-per-trigger: {cfg_t['max_files_per_trigger']}` ({cfg_t['batches']} batches; {jobs_cell(cfg_t)})",
                     fmt_summary(secs["t"], 1, " s"), fmt_summary(rps["t"], 0), counts_cell("t")])
    rows += [
        ["b: plain PySpark, bad rows dropped (the floor)", fmt_summary(secs["b"], 1, " s"), fmt_summary(rps["b"], 0),
         counts_cell("b")],
        ["c: Python UDF, try/except, value-or-error struct", fmt_summary(secs["c"], 1, " s"), fmt_summary(rps["c"], 0),
         counts_cell("c")],
    ]
    floors = "f" in secs and "p" in secs
    if floors:
        rows += [
            ["f: streaming floor: streaming JSON source, `foreachBatch`, good rows only", fmt_summary(secs["f"], 1, " s"),
             fmt_summary(rps["f"], 0), counts_cell("f")],
            ["p: f with each file its own partition, in one task per core (as the runner reads)", fmt_summary(secs["p"], 1, " s"),
             fmt_summary(rps["p"], 0), counts_cell("p")],
        ]
    ratio_rows = [
        ["a/b (runner time ÷ plain PySpark time)", fmt_summary(ab), f"≤ {target:.2f} (stretch ≤ {stretch:.2f})",
         _verdict(met) + (" (stretch met)" if met_stretch else " (stretch missed)" if met else "")],
        ["a/c (runner time ÷ Python UDF time)", fmt_summary(ac), f"≤ {target_ac:.2f}", _verdict(met_ac)],
        ["c/b (Python UDF time ÷ plain PySpark time)", fmt_summary(cb), "(none)", ""],
    ]
    if cfg_t:
        ratio_rows += [
            [f"t/b (runner with max-files-per-trigger {cfg_t['max_files_per_trigger']} ÷ plain PySpark)", fmt_summary(r["ratio_t_b"]), "(shown beside a)", ""],
            ["t/c", fmt_summary(r["ratio_t_c"]), "(shown beside a)", ""],
            ["t/a (smaller batches ÷ default)", fmt_summary(r["ratio_t_a"]), "(none)", ""],
        ]
    if floors:
        ratio_rows += [
            ["f/b (micro-batch machinery: streaming source, `foreachBatch`, offset and commit logs)", fmt_summary(r["ratio_f_b"]), "(reference)", ""],
            ["p/f (one file per partition: the price of a DLQ record's line number)", fmt_summary(r["ratio_p_f"]), "(reference)", ""],
            ["p/b", fmt_summary(r["ratio_p_b"]), "(reference)", ""],
            ["a/p (what the runner adds to p: error and fate columns, sequence numbers, counts, DLQ rows and write, nack window, commit markers, report)",
             fmt_summary(r["ratio_a_p"]), "(reference)", ""],
        ]
    total_a = secs["a"]["median"]
    table_a, top = _stage_table(cfg_a, total_a)
    pass_s = next((sec for label, sec in top if label.startswith("the pass")), 0.0)
    text = f"""## 1. Cost of error handling on the data path

**Data**: {r['records']:,} JSON lines generated by the script ({r['data_bytes'] / 1e6:,.0f} MB in {r['files']} files of
{r['per_file']:,}): {kinds}. Bad = malformed line, a string where a number is expected (`amount`, `id`),
a missing NOT NULL field (`customer`), 1% in total; `test` orders are filtered (acked).
Expected: {exp['written']:,} records written, {exp['filtered']:,} filtered, {exp['bad']:,} bad.

**Transforms** (the same in every way): `currency = coalesce(currency, 'EUR')`, keep `customer <> 'test'`,
`amount_cents = round(amount * 100)`, `order_date = to_date(ts)`; output Parquet.

- **a** this project's runner, called in-process (`airflow_conduit.spark.runner.execute`, the function the
  spark-submit entry point calls) on the shared SparkSession: file source, `field.set`, `filter`, `sql`
  processors, Parquet destination, Parquet DLQ, `window-size` {r['window_size']:,} / `window-nack-threshold`
  {r['window_threshold']:,} (the window is evaluated, never exceeded), per-destination per-batch commit markers,
  run report; `available-now` with the micro-batch size a user gets by default: {_batch_size_text(cfg_a)}.
""" + (f"""- **t** the same runner with a smaller batch size set: {_batch_size_text(cfg_t)}, measured in the same
  repetitions (smaller batches bound the work a restart repeats; see bench 3).
""" if cfg_t else "- A second runner configuration (a smaller `max-files-per-trigger`) is not shown in this run.\n") + """- **b** plain PySpark batch job, no error handling: `spark.read.json(mode=DROPMALFORMED)`, rows with a NULL
  `id`/`customer` dropped, same transforms, `write.parquet`. Bad rows vanish: the floor.
- **c** the usual hand-written alternative: `spark.read.text`, a Python UDF (`json.loads` + type checks in
  try/except) returning a `struct<value, error>`, persisted, good rows transformed to Parquet, bad rows to a
  Parquet DLQ.
""" + ("""- **f** and **p**, references with no target that split the gap between a and b: **f** is the floor of any
  Structured Streaming design, Spark's streaming JSON source (PERMISSIVE, corrupt-record column) with one
  `foreachBatch` that writes the good rows, transformed, to Parquet (no DLQ, no positions, no bookkeeping);
  **p** is f with each input file read as its own partition, as the runner reads them (a DLQ record's line number
  is its index in its file's partition; b and f pack several files into one partition), and the batch run in at
  most one task per core (`coalesce`), as the runner runs it.
""" if floors else "") + f"""
One local[2] SparkSession (driver memory {r['driver_memory']}, started once in {r['spark_start_seconds']:.0f} s and
excluded) runs all of them: JVM start does not count. One warm-up round of every way on {r['warmup']['records']:,} records is not
counted (on the measured data itself: warmed on 50,000 records only, the first counted run of the runner was still
compiling its data path, ~1.6× its later runs, and the rotation charged that to whichever way ran first; cold starts are
measured on their own in benchmarks 3 and 6). Then {r['reps']} repetitions, each running every way in a rotated order (orders: {', '.join(''.join(o) for o in r['orders'])});
the ratios are per repetition (same repetition, back to back), then median (min–max). Spark jobs of the runner are
counted from Spark's status tracker (the query's runId is the job group of every batch job).

{_table(['way', 'seconds, median (min–max)', 'records/s (input records, bad included)', 'rows out'], rows)}

{_jobs_split(r)}**Ratios of times** (above 1 = the first is slower; a/b ≤ {target:.2f} means the runner takes at most
{100 * (target - 1):.0f}% longer than plain PySpark; a/c ≤ {target_ac:.2f} means it is at least {1 / target_ac:.0f}× as fast as the
Python UDF):

{_table(['ratio', 'median (min–max) over the repetitions', 'target', 'verdict'], ratio_rows)}

Correctness check (outside the timed region): a wrote {counts['a'][0]['written']:,} records and put
{counts['a'][0]['bad']:,} in its DLQ; b wrote {counts['b'][0]['written']:,}
({'the same records: its reader drops exactly the bad lines' if counts['b'][0]['written'] == exp['written'] else 'NOT the same count as expected'});
c wrote {counts['c'][0]['written']:,} and put {counts['c'][0]['bad']:,} in its DLQ.

**Where the runner's time goes** (a; exclusive wall time of the runner's steps, summed over the batches, median
of the repetitions; measured by wrapping the runner's functions with a timer in this process, behaviour unchanged;
the rows add up to a's time; `plan:` rows only build DataFrames, "the pass" is the one Spark job that reads,
parses, transforms and writes the lake):

{table_a}

"""
    if cfg_t:
        table_t, _ = _stage_table(cfg_t, secs["t"]["median"])
        text += f"""The same for t ({cfg_t['batches']} batches):

{table_t}

"""
    text += f"""**Target a/b ≤ {target:.2f}: {_verdict(met).strip('*')}** (median {ab['median']:.2f}; stretch ≤ {stretch:.2f}:
{'met' if met_stretch else 'missed'}). **Target a/c ≤ {target_ac:.2f}: {_verdict(met_ac).strip('*')}** (median {ac['median']:.2f}). What each of the runner's steps
costs, and an upper bound with the steps that keep its guarantees switched off: section 1c.

The runner's largest steps:

""" + "\n".join(f"- **{label}**: {seconds:.1f} s ({100 * seconds / total_a:.0f}% of a). {_why(label)}"
                for label, seconds in top[:4]) + f"""

Plain PySpark (b) reads with the same JSON reader, keeps nothing and writes in parallel: {secs['b']['median']:.1f} s.
""" + (f"""The runner's pass alone takes {pass_s:.1f} s, {pass_s / secs['b']['median']:.2f}× b for the same read and write""" + (
    f""" ({pass_s / secs['p']['median']:.2f}× p, which reads the files the same way)""" if floors else "") + f""": {pass_s - secs['b']['median']:.1f} s
more than b, in the per-row work b does not do (the error and fate columns, the record sequence number, the
observation's aggregates: counts, and the DLQ rows and window positions of the nacked ones). What surrounds it,
planning, the DLQ write, the window, the micro-batch machinery (file listing, offset and commit logs, the Python
`foreachBatch` call) and the report, takes {total_a - pass_s:.1f} s ({100 * (total_a - pass_s) / total_a:.0f}% of a): {_larger_part(pass_s - secs['b']['median'], total_a - pass_s)}.
This benchmark times the runner's Python-level steps; it does not split the job itself further.
""" if pass_s else "") + f"""The hand-written UDF (c) costs c/b {cb['median']:.2f}× the floor
(every row goes to a Python worker and back, and through `json.loads`).
""" + (f"""
**The gap split by the references** (medians of the per-repetition ratios; they multiply only approximately):
the micro-batch machinery alone costs f/b {r['ratio_f_b']['median']:.2f}; reading each file as its own partition,
which a DLQ record's line number needs, p/f {r['ratio_p_f']['median']:.2f} (p/b {r['ratio_p_b']['median']:.2f}); everything the
runner adds to that, the error and fate columns, sequence numbers, counts, the DLQ's rows and write, the nack
window, commit markers and the report, a/p {r['ratio_a_p']['median']:.2f}. So a/b ≤ {target:.2f} would leave the runner
{100 * (target / r['ratio_p_b']['median'] - 1):.0f}% on top of p for all of its error handling.
""" if floors else "")
    summary_rows = [
        ["1. error handling: a/b (runner ÷ plain PySpark), default batch size",
         f"median {ab['median']:.2f} ({ab['min']:.2f}–{ab['max']:.2f})", f"≤ {target:.2f} (stretch ≤ {stretch:.2f})",
         _verdict(met) + (", stretch met" if met_stretch else ", stretch missed" if met else "")],
        ["1. error handling: a/c (runner ÷ Python UDF)", f"median {ac['median']:.2f} ({ac['min']:.2f}–{ac['max']:.2f})",
         f"≤ {target_ac:.2f}", _verdict(met_ac)],
        ["1. Spark jobs per micro-batch (bench pipeline, default batch size)",
         f"{fmt(cfg_a['jobs_per_batch']['median'], 1)}" if cfg_a["jobs_per_batch"].get("n") else "not counted", "≤ 4",
         _verdict(cfg_a["jobs_per_batch"]["median"] <= 4) if cfg_a["jobs_per_batch"].get("n") else "n/a"],
    ]
    if floors:
        pb, ap = r["ratio_p_b"], r["ratio_a_p"]
        summary_rows.append(["1. (reference) p/b: a streaming floor that reads the files as the runner does; a/p: what the runner adds",
                             f"p/b {pb['median']:.2f} ({pb['min']:.2f}–{pb['max']:.2f}); a/p {ap['median']:.2f} ({ap['min']:.2f}–{ap['max']:.2f})",
                             "(reference)", "measured"])
    if r.get("cpu_ratio_a_b"):
        summary_rows.append(["1. (reference) the same in CPU time (driver JVM + Python): a/b, a/p",
                             f"a/b {fmt_summary(r['cpu_ratio_a_b'])}; a/p {fmt_summary(r['cpu_ratio_a_p'])}",
                             "(reference; the target is on wall time)", "measured"])
    if cfg_t:
        tb = r["ratio_t_b"]
        summary_rows.append([f"1. (beside) t/b with max-files-per-trigger {cfg_t['max_files_per_trigger']}",
                             f"median {tb['median']:.2f} ({tb['min']:.2f}–{tb['max']:.2f})", "(shown, no target)", "measured"])
    return text, summary_rows


def section_wide_schema(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    title = "## 1b. A wide schema, and the JIT option\n\n"
    if r is None or "settings" not in r:
        return title + NA + "\n", [["1b. wide schema: a/b by JVM options", NA, "", "n/a"]]
    limit = r["jit_limit_bytes"]
    rows, summary = [], []
    for name, label in (("default", "the JVM's defaults"), ("jit", "with spark/jvm.py's options (what the launchers pass)")):
        s = r["settings"].get(name)
        if not s:
            continue
        largest = s["largest_method_bytes"]
        rows.append([label, fmt_summary(s["ratio_a_b"]), fmt_summary(s["seconds"]["a"], 2, " s"), fmt_summary(s["seconds"]["b"], 2, " s"),
                     f"{largest:,} bytes ({'over' if largest > limit else 'under'} {limit:,})"])
        summary.append(f"{name} {s['ratio_a_b']['median']:.2f}")
    text = f"""{title}The runner (a) and plain PySpark (b) on {r['records']:,} JSON lines of {r['fields']} fields ({r['per_file']:,} per
file; {r['bad']:,} bad: malformed or a string in a number field; `sql` processor, Parquet destination, Parquet DLQ),
in two processes with one JVM each: the JVM's defaults, and the Java options of `spark/jvm.py`
(`-XX:-DontCompileHugeMethods`), which the runner's launchers (local spark-submit, standalone REST) and local
sessions now pass. Spark compiles the pass's first stage into one generated method that grows with the schema;
HotSpot leaves a method over {limit:,} bytes of bytecode to its interpreter unless told otherwise. a and b alternate
in each process ({r['reps']} repetitions after a warm-up round); a/b per repetition, median (min–max):

{_table(['JVM options', 'a/b', 'a', 'b', 'largest generated method'], rows)}

Benchmark 1's 5 fields give a largest method of ~7,200 bytes, under the limit: the option changes nothing there.
"""
    return text, [["1b. wide schema (" + str(r["fields"]) + " fields): a/b by JVM options", "; ".join(summary),
                   "(reference; the target is benchmark 1's)", "measured"]]


BOOKKEEPING_WAYS = (
    ("a", "a: the runner (benchmark 1's a)"),
    ("a_without_dlq", "a without its DLQ write (upper bound: the bad records are lost)"),
    ("a_without_bookkeeping", "a without observation, nack window and DLQ write (upper bound: no counts, no DLQ)"),
    ("p", "p: Spark's streaming JSON source, one `foreachBatch`, one Parquet write"),
    ("b", "b: plain PySpark"),
)
STEP_LABELS = (
    ("dlq_write", "the DLQ write (its own Spark job, after the pass)", "a − a without DLQ"),
    ("observation_and_window", "the observation (counts, DLQ rows, records per partition) and the nack window",
     "a without DLQ − a without bookkeeping"),
    ("runner_plan", "the runner's plan: record columns, positions, fates, its per-batch planning, commit markers, report",
     "a without bookkeeping − p"),
    ("structured_streaming", "Structured Streaming (query start, offsets, `foreachBatch`, commit)", "p − b"),
)
PART_LABELS = {
    "json_reader": "Spark's JSON reader", "line_reader": "reading lines", "parquet_writer": "Spark's Parquet writer",
    "generated_code": "generated code (projections, flags, transforms, row copies)", "observation": "the observation's aggregates",
    "other": "other task work", "driver": "driver JVM threads (planning, scheduling, commits)",
}


def section_bookkeeping(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    title = "## 1c. What each of the runner's steps costs, and where the tasks' CPU goes\n\n"
    if r is None or "steps" not in r:
        return title + NA + "\n", [["1c. upper bound: a/b without the runner's bookkeeping", NA, "", "n/a"]]
    ways_rows = [[label, fmt_summary(r["seconds"][w], 2, " s"), fmt_summary(r["ratio_to_b"][w]), f"{r['rows_written'][w]:,}"]
                 for w, label in BOOKKEEPING_WAYS if w in r["seconds"]]
    step_rows = [[label, how, fmt_summary(r["steps"][key], 2, " s")] for key, label, how in STEP_LABELS if key in r["steps"]]
    profile = r.get("task_samples_per_run") or {}
    profile_text = "No profile was recorded (the benchmark's log says why).\n"
    if profile.get("b"):
        in_tasks = {w: sum(n for part, n in parts.items() if part != "driver") for w, parts in profile.items()}
        base = in_tasks["b"] or 1.0
        parts = [*r.get("task_parts", []), "other", "driver"]
        cols = [w for w, _ in BOOKKEEPING_WAYS if w in profile]
        rows = [[PART_LABELS.get(part, part), *[f"{100 * profile[w].get(part, 0.0) / base:.0f}" for w in cols]] for part in parts]
        rows.append(["**tasks in all**", *[f"**{100 * in_tasks[w] / base:.0f}**" for w in cols]])
        profile_text = f"""**Where the CPU goes** (Java Flight Recorder's sampler, in the same runs: samples per run on Spark's task
threads by what they were running, and on the driver JVM's other threads; b's task samples = 100. Python's own
time on the driver is not sampled here.)

{_table(['part', *cols], rows)}
"""
    bound, target = r["ratio_to_b"]["a_without_bookkeeping"], r["target_a_b"]
    left = target - bound["median"]
    kept = r["steps"].get("bookkeeping")
    if left <= 0:
        verdict = f"which is already over a/b ≤ {target:.2f} before the three steps that keep the product's guarantees are added back"
    else:
        verdict = (f"so a/b ≤ {target:.2f} leaves {left:.2f} × b ({left * r['seconds']['b']['median']:.2f} s) for the three steps together "
                   "that keep the product's guarantees (every bad record in the DLQ before any destination commits; counts "
                   "and the nack window from the pass itself)"
                   + (f", which measured {fmt_summary(kept, 2, ' s')} here" if kept else ""))
    text = f"""{title}Benchmark 1's data ({r['records']:,} records, {r['per_file']:,} per file) and ways in one JVM, alternating
({r['reps']} repetitions after a warm-up round), with two upper bounds that are **not product variants**: the runner
with steps switched off that a real pipeline needs. Every way's output was counted after its run (rows written,
last column). Median (min–max):

{_table(['way', 'seconds', '÷ b', 'rows written'], ways_rows)}

What each step adds to the one below it (paired differences of the same repetition, seconds):

{_table(['step', 'measured as', 'seconds'], step_rows)}

{profile_text}
Reading it: with its DLQ write, observation and nack window all removed, the runner takes {fmt_summary(bound)} × b,
{verdict}. docs/architecture.md (the data path) says why each step stays.
"""
    return text, [["1c. (upper bound) a/b without the DLQ write; without DLQ write, observation and window",
                   f"{fmt_summary(r['ratio_to_b']['a_without_dlq'])}; {fmt_summary(bound)}",
                   "(reference: not product variants)", "measured"]]


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
process group got SIGKILL (`LocalBackend.kill(graceful=False)`) a random 0.1–1.5 s later, so at a different point
of the batch each time (or, when that batch had already finished, between two batches), and the pipeline was re-submitted at once with the same state directory (detection and backoff are measured in
bench 2). The last run then went to the end: `{r['final_status']}`, exit code {r['final_exit_code']}.

{_table(['kill', 'batch in flight', 'SIGKILL → running (JVM, SparkSession, query start)', 'first batch of the restarted run (the replay, if one was in flight)',
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
{r['steady_batch_seconds']['median']:.1f} s; a cold JVM and Python driver; section 6 shows what the driver log of a fresh driver's first batch
contains). The replay itself is bounded by one batch (`max-files-per-trigger` sets its size), and the commit
markers skip any destination that had already committed the batch. Through the operator, add bench 2's
overhead and the backoff delay before the re-submission.
"""
    summary_rows = [
        ["3. restart: SIGKILL → processing again", f"median {s['to_processing_again']['median']:.1f} s", "(none)", "measured"],
        ["3. restart: the restarted run's first batch", f"median {s['first_batch_seconds']['median']:.1f} s "
         f"(steady batch {r['steady_batch_seconds']['median']:.1f} s)", "(none)", "measured"],
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
{r['poll_interval']:g} s{" (the operator's default)" if r['poll_interval'] == 5 else ""} through the real code: `LocalBackend.status` (process table,
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
(`airflow_conduit.hooks.backends.detached`: RSS {r['detached_wrapper']['rss_mb']:.1f} MB, USS
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


# -- 5 ------------------------------------------------------------------------------------------------

MIB = 1024 * 1024


def _mib(v: float | None) -> str:
    return "n/a" if v is None else f"{v / MIB:,.1f} MiB"


def _per_batch(t: dict[str, float] | None, unit: str = "KiB") -> str:
    if not t:
        return "n/a"
    if unit == "KiB":
        return f"{t['per_batch'] / 1024:+,.1f} KiB/batch (noise ± {t['noise'] / 1024:,.0f} KiB)"
    return f"{t['per_batch']:+,.2f} {unit}/batch (noise ± {t['noise']:,.1f})"


# A sample is taken while the pipeline runs: the batch in flight may have written its files (Spark's offset and
# commit log entries with their .crc files: 4; a commit marker per destination and one for the DLQ; a nack-window
# file) before Spark's asynchronous log purge (spark.sql.streaming.asyncLogPurge.enabled, on by default) and the
# runner's pruning removed the oldest ones. So the file count of a bounded STATE_DIR moves by up to this much
# between samples, and only a fitted growth beyond it is a trend.
IN_FLIGHT_FILES = 8


def section_soak(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    title = "## 5. Continuous soak: memory and STATE_DIR\n\n"
    if r is None:
        return title + NA + "\n", [["5. soak", NA, "", "n/a"]]
    a = r["analysis"]
    samples = r["samples"]
    first, last = samples[0], samples[-1]
    late_from = a.get("late_from", 110)
    grows = a["memory_grows"]
    rows = [[f"{s['batches']}", f"{s['seconds']:.0f} s", _mib(s["python_rss"]), f"{s['python_objects']:,}", _mib(s["jvm_rss"]),
             _mib(s["jvm_heap_used_after_gc"]), _mib(s["jvm_heap_committed"]),
             f"{s['state_dir']['bytes'] / 1024:,.1f} KiB", f"{s['state_dir']['files']:,}"] for s in samples]
    names = {"python_rss": "driver Python RSS", "python_objects": "Python objects tracked by gc",
             "jvm_heap_used_after_gc": "JVM heap used after System.gc()", "jvm_rss": "JVM RSS"}
    mem_rows = []
    for key in ("python_rss", "jvm_heap_used_after_gc", "jvm_rss", "python_objects"):
        whole, late = a["memory"].get(key), a["memory_late"].get(key)
        unit = "objects" if key == "python_objects" else "KiB"
        g = grows.get(key)
        verdict = "n/a (too few samples after batch %d)" % late_from if g is None else ("**grows**" if g else "no growth trend")
        if key == "jvm_rss" and g is not None:
            verdict = "not judged (" + ("the fit rises" if g else "no trend beyond the noise") + ")"
        start = f"{first[key]:,}" if key == "python_objects" else _mib(first[key])
        end = f"{last[key]:,}" if key == "python_objects" else _mib(last[key])
        mem_rows.append([names[key], start, end, _per_batch(whole, unit), _per_batch(late, unit), verdict])
    parts = a["state_dir_parts"]
    part_rows = []
    for name, p in parts.items():
        f, l = p.get("first") or {"bytes": 0, "files": 0}, p.get("last") or {"bytes": 0, "files": 0}
        lf = p.get("late_files")
        lb = p.get("late_bytes")
        part_rows.append([f"`{name}/`", f"{f['bytes'] / 1024:,.1f} KiB, {f['files']:,} files",
                          f"{l['bytes'] / 1024:,.1f} KiB, {l['files']:,} files",
                          "n/a" if not lb else f"{lb['per_batch']:+,.0f} B/batch, {lf['per_batch']:+,.2f} files/batch"])
    sd, sl = a["state_dir"], a["state_dir_after_retention"]
    files_late = sl.get("files")
    bytes_late = sl.get("bytes")
    bounded = None
    if files_late and bytes_late:
        files_trend = files_late["fitted_change"] > max(3 * files_late["noise"], IN_FLIGHT_FILES)
        bounded = not files_trend and bytes_late["per_batch"] < 1024
    mem_keys = ("python_rss", "jvm_heap_used_after_gc")
    mem_ok = None if any(grows.get(k) is None for k in mem_keys) else not any(grows[k] for k in mem_keys)
    iv = r["batch_interval_last_100"]
    limits = ""
    lt = [a["memory_late"].get(k) for k in mem_keys]
    if all(lt):
        span = lt[0]["to_batch"] - lt[0]["from_batch"]
        if span > 0:
            lim = [max(3 * t["noise"], MIB) / span / 1024 for t in lt]
            limits = (f"Resolution: with the scatter of these samples, growth below about {lim[0]:,.0f} KiB per batch (Python RSS) "
                      f"or {lim[1]:,.0f} KiB per batch (heap after GC) over batches {lt[0]['from_batch']:.0f}–{lt[0]['to_batch']:.0f} "
                      "cannot be told from noise; a longer soak narrows this.\n\n")
    text = f"""{title}A `mode: continuous` pipeline runs in one process on a local[2] SparkSession (the runner's own session
settings, `airflow_conduit.spark.session.build_session`) for **{r['batches']} micro-batches** in
{last['seconds'] / 60:.1f} min: a `generator` source ({r['rate']:,} records/s at `trigger-interval: {r['interval']}` =
{r['rows_per_batch']:,} records per batch, {100 * r['bad_ratio']:g}% bad), a `filter` and an `sql` processor, a
Parquet lake, a JSON DLQ, nack window on (`window-size` 10,000). It ended `{r['status']}` (exit code {r['exit_code']}) after
a graceful stop; in all {r['totals']['read']:,} records read, {r['totals']['dlq']:,} to the DLQ. A batch started every
{fmt_summary(iv, 2, ' s')} (last 100 batches, from the report's batch times): the pipeline ran as fast as it could,
batches back to back.

At each sample point (the first after the warm-up batches, the last at the end) the benchmark took: the driver's
Python RSS (after `gc.collect()`) and the number of objects its garbage collector tracks; the JVM's RSS (the
driver's java process) and its heap in use after `System.gc()` (`Runtime.totalMemory() - freeMemory()`, via
py4j); the size of STATE_DIR (bytes and files). Spark keeps a bounded history of jobs, stages and SQL
executions (1,000 each by default, also with the UI disabled), which at 2–3 jobs per batch would still be filling
after hundreds of batches; the soak sets `spark.ui.retainedJobs`, `spark.ui.retainedStages` and
`spark.sql.ui.retainedExecutions` to {r.get('spark_retention', 100)} so that this history is full early, and judges memory on the
samples from batch {late_from} on ("late").

{_table(['batch', 'time', 'Python RSS', 'Python objects', 'JVM RSS', 'JVM heap after GC', 'JVM heap committed',
         'STATE_DIR', 'files'], rows)}

**Memory** (growth per batch = least-squares slope over the samples; a trend counts as growth when the fitted
growth over the late samples exceeds 3× their scatter around the fit and 1 MiB):

{_table(['measure', f'at batch {first["batches"]}', f'at batch {last["batches"]}', 'growth per batch (all samples)',
         f'growth per batch (from batch {late_from})', 'verdict'], mem_rows)}

{limits}JVM RSS is shown, not judged: the JVM takes memory from the OS as its heap and code cache grow and rarely gives it
back, so RSS rises towards a plateau without a leak; the heap after GC is the measure of what is retained.

**STATE_DIR** (growth per batch from batch {late_from} on, when every retention window is full: commit markers 100
batches per destination, nack-window files 20, the report's batch list 100, Spark's offset and commit logs
`minBatchesToRetain` 100):

{_table(['folder', f'at batch {first["batches"]}', f'at batch {last["batches"]}', f'growth per batch from batch {late_from}'], part_rows)}

In all: {sd['bytes']['first'] / 1024 if sd.get('bytes') else 0:,.1f} KiB → {last['state_dir']['bytes'] / 1024:,.1f} KiB
({_per_batch(sd.get('bytes'))} over all samples; {_per_batch(bytes_late)} from batch {late_from});
files {first['state_dir']['files']:,} → {last['state_dir']['files']:,}{f" ({files_late['per_batch']:+.2f} files/batch from batch {late_from})" if files_late else ""}.
The outputs (outside STATE_DIR) grow with the data, as they should: lake {r['output']['lake']['bytes'] / MIB:,.1f} MiB in
{r['output']['lake']['files']:,} files, DLQ {r['output']['dlq']['bytes'] / MIB:,.1f} MiB in {r['output']['dlq']['files']:,} files.

**Target: no growth trend in memory: {_verdict(mem_ok).strip('*')}** (driver Python RSS and JVM heap after GC, from batch
{late_from}). **Target: STATE_DIR bounded per batch: {_verdict(bounded).strip('*')}** (after the retention windows
are full, STATE_DIR must not keep growing: {'its size changes by less than 1 KiB per batch, and its file count by no more than the files one batch has in flight' if bounded else 'see the table: a folder still grows' if bounded is not None else 'too few samples after the retention windows'}).
A sample is taken while the pipeline runs, so it can catch the batch in flight before Spark's asynchronous
log purge (`spark.sql.streaming.asyncLogPurge.enabled`, on by default) and the runner's pruning removed the
oldest entries: the file count of a bounded STATE_DIR moves by up to {IN_FLIGHT_FILES} files (Spark's offset and commit log
entries with their `.crc` files, the commit markers, a nack-window file) between samples. A file count counts as growing
when its fitted growth over the late samples exceeds both 3× their scatter and those {IN_FLIGHT_FILES} files.
"""
    summary_rows = [
        ["5. soak: memory growth trend (Python RSS, JVM heap after GC)",
         (f"Python RSS {_per_batch(a['memory_late'].get('python_rss'))}; heap {_per_batch(a['memory_late'].get('jvm_heap_used_after_gc'))} "
          f"over batches {late_from}–{r['batches']}") if mem_ok is not None else f"n/a (fewer than {late_from} batches)",
         "no growth trend", _verdict(mem_ok)],
        ["5. soak: STATE_DIR per batch once retention windows are full",
         (f"{_per_batch(bytes_late)}, {files_late['per_batch']:+.2f} files/batch ({files_late['fitted_change']:+.1f} files "
          f"fitted over batches {files_late['from_batch']:.0f}–{files_late['to_batch']:.0f})") if files_late else "n/a",
         "bounded", _verdict(bounded)],
    ]
    return text, summary_rows


# -- 6 ------------------------------------------------------------------------------------------------


def section_small_run(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    title = "## 6. A small run, as a new user runs it\n\n"
    if r is None or not r.get("runs"):
        return title + NA + "\n", [["6. small run wall time", NA, "", "n/a"]]
    wall = r["wall_seconds"]
    order = r.get("phase_order") or list(r["phases"])
    rows = [[name, fmt_summary(r["phases"][name], 1, " s"), f"{100 * r['phases'][name]['median'] / wall['median']:.0f}%"]
            for name in order]
    fb, lb = r["first_batch"], r["later_batches"]
    batch_rows = [
        ["trigger start → commit (Structured Streaming's batchDuration)", fmt_summary(fb["batch_seconds"], 1, " s"),
         fmt_summary(lb["batch_seconds"], 1, " s") if lb["batch_seconds"]["n"] else "n/a"],
        ["… in foreachBatch (the runner: plan, the pass, DLQ, markers, report)", fmt_summary(fb["foreach_batch_seconds"], 1, " s"),
         fmt_summary(lb["foreach_batch_seconds"], 1, " s") if lb["batch_seconds"]["n"] else "n/a"],
        ["… … of which the runner's own `_process_batch` (its log line)", fmt_summary(fb["runner_seconds"], 1, " s"),
         fmt_summary(lb["runner_seconds"], 1, " s") if lb["batch_seconds"]["n"] else "n/a"],
        ["… query planning of the batch", fmt_summary(fb["planning_seconds"], 2, " s"),
         fmt_summary(lb["planning_seconds"], 2, " s") if lb["batch_seconds"]["n"] else "n/a"],
        ["… offsets, file listing, offset and commit logs", fmt_summary(fb["offsets_and_commit_seconds"], 2, " s"),
         fmt_summary(lb["offsets_and_commit_seconds"], 2, " s") if lb["batch_seconds"]["n"] else "n/a"],
    ]
    run0 = r["runs"][0]
    startup = sum(v["median"] for k, v in r["phases"].items() if not k.startswith(("micro-batches", "last batch", "query ended", "driver exited")))
    t = run0["totals"] or {}
    totals = (f"{t.get('read', 0)} read, {sum((t.get('written') or {}).values())} written, {t.get('filtered', 0)} filtered, "
              f"{t.get('dlq', 0)} to the DLQ")
    n_runs = len(r["runs"])
    text = f"""{title}`{r['command']}` ({r['records']} records: {totals}), {n_runs} time{'s' if n_runs != 1 else ''}, each a new
process and a new state directory, on a copy of `examples/orders` (so the repository's `out/` stays clean). The
example sets `max-files-per-trigger: 1`, so its two input files are {fmt(r['batches_per_run']['median'], 0)} micro-batches.
Wall time: **{fmt_summary(wall, 1, ' s')}**.

Where it goes (consecutive phases that add up to the wall time; median (min–max) over the runs). Sources: this
process's clock (command start and exit) and a 50 ms poll of the state directory (driver.log created = spark-submit
started), the run report (`started_at`, `ended_at`), the launcher's exit record (driver exit), and the driver log:
Spark's `Running Spark version` and `MicroBatchExecution: Starting` lines (1 s resolution) and Structured
Streaming's progress reports per batch (ms):

{_table(['phase', 'seconds', 'share'], rows)}

Per micro-batch (from the progress reports and the runner's `batch N: … in X s` lines):

{_table(['', 'first batch', 'later batches'], batch_rows)}

Before the first record is processed, {startup:.0f} s (median) pass in start-up: the CLI's own start, spark-submit
launching a JVM that starts the Python driver, the SparkContext and SparkSession, the pipeline's setup and query
start. The first batch of a fresh driver is much slower than later ones; its driver log shows code generation
(about 1 s) and the start of the Python callback server for `foreachBatch` (the DLQ write no longer starts
Python workers: its rows stay in the JVM). A later batch of 7 records still takes {fmt(lb['batch_seconds']['median'], 1)} s, almost all of it inside the
runner's `_process_batch` (plan, the pass, the DLQ write, markers, report; bench 1's stage clock splits these for
big batches, this benchmark does not; the columns of a source's records and of the DLQ's reasons are built by
the first batch and kept, so later batches no longer pay those ~2,000 calls to the JVM). The CLI notices the driver's exit at its next poll
(`--poll-interval`, default 2 s). On this machine and load, a 15-record run is dominated by fixed costs (start-up and per batch),
not by the records.
"""
    summary_rows = [["6. small run (15 records) wall time", f"median {wall['median']:.1f} s; first batch {fb['batch_seconds']['median']:.1f} s, later {fmt(lb['batch_seconds']['median'], 1)} s",
                     "(none: measured)", "measured"]]
    return text, summary_rows


def section_expectations(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    title = "## 7. Cost of expectations\n\n"
    if r is None or "ratio_with_over_without" not in r:
        return title + NA + "\n", [["7. expectations: time with / without rules", NA, "", "n/a"]]
    ratio, jw, jo = r["ratio_with_over_without"], r["jobs_per_batch_with"], r["jobs_per_batch_without"]
    same_jobs = sorted(set(jw)) == sorted(set(jo))
    tw, to = r.get("totals_with") or {}, r.get("totals_without") or {}
    rules = [[x["name"], f"`{x['condition']}`", x["action"]] for x in r["rules"]]
    jobs_verdict = ("the same: the rules are evaluated and counted in the batch's one pass (an observation), no job per rule"
                    if same_jobs else "**not the same**: see the log")
    counted = []
    for processor, by_rule in (r.get("expectation_totals") or {}).items():
        counted += [[f"{processor} / {name}", f"{c['passed']:,}", f"{c['failed']:,}"] for name, c in by_rule.items()]
    text = f"""{title}The same {r['records']:,} generated JSON lines ({r['per_file']:,} per file; 0.5 % of them fail parsing, so both
pipelines write to the DLQ) through the same pipeline (runner in-process on `local[2]`, one `field.set`, Parquet
destination, file DLQ), A with an `expect` processor of {len(r['rules'])} rules, B without it, alternating in
rotated order; {ratio['n']} pairs after a warm-up run. Time A / time B: **{fmt_summary(ratio, 2)}** (A
{fmt_summary(r['seconds_with'], 1, ' s')}, B {fmt_summary(r['seconds_without'], 1, ' s')}).

Spark jobs per micro-batch: with rules {jw}, without {jo}: {jobs_verdict}.
A batch with DLQ records runs one job more than a batch without (the DLQ write of the records the pass collected),
whatever sent them there; the `drop` rule sends {tw.get('dlq', 0) - to.get('dlq', 0):,} more records to the DLQ
(A: {tw.get('dlq', 0):,} to the DLQ, {sum((tw.get('written') or {}).values()):,} written; B: {to.get('dlq', 0):,},
{sum((to.get('written') or {}).values()):,}). (An earlier version of this benchmark had no unparsable lines: B wrote no
DLQ record and ran 1 job per batch, A ran 2, the second being the DLQ write of what the `drop` rule quarantined.)
The rules:

{_table(['rule', 'condition', 'action'], rules)}

Counted by the last A run (per rule, in the run report, XCom and the UI):

{_table(['processor / rule', 'passed', 'failed'], counted) if counted else 'not recorded'}
"""
    rows = [["7. expectations: time with / without 5 rules", fmt_summary(ratio, 2),
             "(none: measured); no extra Spark job", "measured; " + ("same jobs per batch" if same_jobs else "**jobs differ**")]]
    return text, rows


def section_kafka_delta(r: dict[str, Any] | None) -> tuple[str, list[list[str]]]:
    title = "## 8. Kafka to Delta\n\n"
    if r is None or "per_batch" not in r:
        return title + NA + "\n", [["8. Kafka -> Delta: runner / floor", NA, "<= 1.3", "n/a"]]
    d, p, b = r["default_batch"], r["per_batch"], r["broker"]
    lat = r.get("latency") or {}

    def way_row(label: str, c: dict[str, Any]) -> list[str]:
        return [label, f"{c['records']:,}", f"{c['batches_runner'][0]:,} / {c['batches_floor'][0]:,}",
                fmt_summary(c["runner_records_per_second"], 0), fmt_summary(c["floor_records_per_second"], 0),
                f"**{fmt_summary(c['ratio_runner_over_floor'], 2)}**"]

    lat_rows = [[way, f"{x['rate']:,}/s, {x['measured']:,} records counted", f"{x['p50']:.2f} s", f"{x['p95']:.2f} s",
                 f"{x['p99']:.2f} s", f"{x['max']:.2f} s"] for way, x in lat.items()]
    counts = d["runner_counts"]
    loads = [x for x in (r.get("load_average_at_start"), r.get("load_average_at_end")) if x]
    small = "" if d["records"] >= 1_000_000 and r["reps"] >= 5 else (
        f"**This run is smaller than `make bench`'s** (a topic of 1,000,000 records at the default size, 5 pairs each):"
        f" {d['records']:,} and {p['records']:,} records, {r.get('default_reps', r['reps'])} and {r['reps']} pairs, on a"
        f" machine shared with other Spark jobs (1-minute load average {', then '.join(f'{x[0]:.0f}' for x in loads)} on"
        f" {os.cpu_count()} cores); the ratios of side-by-side runs are what counts, the absolute rates are far below"
        " what an idle machine gives.\n\n")
    text = f"""{title}{small}A topic of generated JSON orders ({r['bad_share']:.0%} bad: not JSON, a wrong type, a missing required field) in
{r['partitions']} partitions on the test broker, read from its start into a fresh Delta table by two ways in one
`local[2]` session, alternating in rotated order ({r['reps']} pairs at {p['max_records_per_batch']:,} per batch, {r.get('default_reps', r['reps'])}
at the default size; {r.get('warmup_pairs', 1)} uncounted warm-up pair(s) before each, after the latency runs below had
warmed the session up): **runner** (source `kafka`,
destination `delta` append, DLQ `kafka`, exactly once) and the **floor** (Spark's Kafka source, `from_json`, rows
without their required fields dropped, `foreachBatch` appending to Delta; no DLQ). The runner's last run read
{counts['read']:,} records, wrote {counts['written']:,} and sent {counts['dlq']:,} to the DLQ topic.

{_table(['batch size', 'records', 'batches (runner / floor)', 'runner records/s', 'floor records/s', 'time runner / floor'],
        [way_row('default (all available)', d), way_row(f"max-records-per-batch {p['max_records_per_batch']:,}", p)])}

Cost per micro-batch over the floor at {p['max_records_per_batch']:,} records per batch:
**{fmt_summary(p['ms_per_batch_over_floor'], 0, ' ms')}**. What the runner does in a batch beyond the floor (not timed
one by one here): the batch's pass (parsing with per-record reasons, fates, counts) is a Spark job of its own,
because a Delta write is its own commit and must follow the DLQ's; the Delta write then reads the batch from Kafka
again; Delta's log is read to learn whether the batch is already in and to fit records to the table's schema; a
batch with bad records (at 1 %, every batch) writes them to the DLQ topic after recording the topic's end offsets,
reading the source records' keys and headers back from the input topic.

End-to-end latency (a record produced -> visible in the Delta table, i.e. its Delta commit's time), continuous
mode, trigger interval {next(iter(lat.values()))['trigger_seconds'] if lat else '?'} s: once the way's first batch is
committed, records are produced at a steady rate (the first seconds not counted), then the way runs until every record
is visible:

{_table(['way', 'produced', 'p50', 'p95', 'p99', 'max'], lat_rows) if lat_rows else NA}

Test broker (KRaft, one JVM, heap `{b['heap']}`): storage formatted in {b['format_seconds']:.1f} s, started in
**{b['start_seconds']:.1f} s**; resident memory **{b['rss_idle_mib']:.0f} MiB** idle, {fmt(b.get('rss_after_mib'), 0)} MiB after
holding the topics. Produced with confluent-kafka: {r['default_batch']['records']:,} records in {r['produce_seconds']['big']:.1f} s.
"""
    rows = [["8. Kafka -> Delta: runner / floor, default batch", fmt_summary(d["ratio_runner_over_floor"], 2), "<= 1.3",
             _verdict(d["ratio_runner_over_floor"]["median"] <= 1.3)],
            [f"8. Kafka -> Delta: runner / floor, {p['max_records_per_batch']:,} per batch",
             fmt_summary(p["ratio_runner_over_floor"], 2), "<= 1.3", _verdict(p["ratio_runner_over_floor"]["median"] <= 1.3)]]
    return text, rows


# -- the document ----------------------------------------------------------------------------------------


def render(results: Path = RESULTS_DIR) -> str:
    meta = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else {}
    m = meta.get("machine", {})
    s1, rows1 = section_error_handling(read_result("error_handling", results))
    s1b, rows1b = section_wide_schema(read_result("wide_schema", results))
    s1c, rows1c = section_bookkeeping(read_result("bookkeeping_cost", results))
    s2, rows2 = section_recovery(read_result("recovery_reaction", results))
    s3, rows3 = section_restart(read_result("restart_cost", results))
    s4, rows4 = section_deferral(read_result("deferral_scale", results))
    s5, rows5 = section_soak(read_result("soak", results))
    s6, rows6 = section_small_run(read_result("small_run", results))
    s7, rows7 = section_expectations(read_result("expectations_cost", results))
    s8, rows8 = section_kafka_delta(read_result("kafka_delta", results))
    benches = meta.get("benchmarks", {})
    timing_rows = [[name, b.get("finished_at", "not recorded"), f"{b['seconds'] / 60:.1f} min",
                    "ok" if b["exit_code"] == 0 else f"FAILED (exit {b['exit_code']})",
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
{_table(['benchmark', 'finished', 'time', 'status', 'load average after (1, 5, 15 min)', 'command'], timing_rows)}

## Targets

{_table(['measure', 'result', 'target', 'verdict'], [*rows1, *rows1b, *rows1c, *rows2, *rows3, *rows4, *rows5, *rows6, *rows7, *rows8])}
"""
    return "\n".join([head, s1, s1b, s1c, s2, s3, s4, s5, s6, s7, s8])


if __name__ == "__main__":
    print(render())
