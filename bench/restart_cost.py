"""Benchmark 3: restart cost after a SIGKILL mid-run.

A pipeline (the bench 1 spec: JSON lines with 1% bad records -> Parquet lake
+ Parquet DLQ, one input file per micro-batch) runs under real spark-submit
through the local launcher. While a batch is in flight (its offsets are in
the checkpoint, its commit is not), the driver's whole process group gets
SIGKILL (``LocalBackend.kill(graceful=False)``) at a different point of the
batch each time. The same pipeline is re-submitted at once (backoff and
detection are bench 2's subject) and the next kill waits until the new run
has processed again. After the last kill the pipeline runs to the end.

Per kill, from the run reports and the checkpoint:
  time until processing again  SIGKILL -> the restarted run completes its first batch
     = submit + JVM and SparkSession start + query start (report: starting -> running)
       + the first batch (the replayed in-flight one)
  records read twice          records of the in-flight batch, read again by the restarted run
                              (at most one batch: the bound)
At the end, from the outputs: records written twice (lake rows minus distinct ids, DLQ rows minus
distinct source positions; must be 0) and records missing (must be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import iso_epoch, isolated_airflow_home, log, setup_environment, summary, write_result
from bench.error_handling import expected, generate, runner_spec


def checkpoint_batches(state: Path) -> tuple[set[int], set[int]]:
    """Batch ids with offsets written, and with commits written, in the Structured Streaming checkpoint."""
    root = state / "checkpoints" / "pipeline"

    def ids(folder: Path) -> set[int]:
        if not folder.exists():
            return set()
        return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}

    return ids(root / "offsets"), ids(root / "commits")


def read_report(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def watch_run(handle: dict, launcher, until, timeout: float, poll: float = 0.1) -> dict[str, float]:
    """Poll the run's report every ``poll`` s; record when each status is first seen; stop when until(report) holds."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    report_file = Path(handle["report_path"])
    while time.monotonic() < deadline:
        report = read_report(report_file)
        now = time.time()
        if report is not None:
            seen.setdefault(f"status:{report.get('status')}", now)
            if report.get("batches"):
                seen.setdefault("first_batch", now)
            if until(report):
                seen["until"] = now
                return seen
        if launcher.status(handle).finished:
            seen["finished"] = now
            return seen
        time.sleep(poll)
    raise TimeoutError(f"run {handle['run_id']} did not reach the expected point within {timeout:.0f}s")


def wait_in_flight(state: Path, handle: dict, launcher, timeout: float) -> int | None:
    """Wait until a batch is in flight (offsets written, commit not); return its id (None if the run ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        offsets, commits = checkpoint_batches(state)
        pending = offsets - commits
        if pending:
            return max(pending)
        if launcher.status(handle).finished:
            return None
        time.sleep(0.05)
    raise TimeoutError("no batch in flight")


def verify_outputs(root: Path, exp: dict[str, int]) -> dict[str, int]:
    """Count rows, distinct records, duplicates and missing records in the lake and the DLQ (local Spark)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]").appName("bench-restart-verify")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        lake = spark.read.parquet(str(root / "lake"))
        dlq = spark.read.parquet(str(root / "dlq"))
        lake_rows = lake.count()
        lake_distinct = lake.select("id").distinct().count()
        dlq_rows = dlq.count()
        dlq_distinct = dlq.select("source_file", "source_position").distinct().count()
        lake_batches = lake.select(F.countDistinct("batch_id")).first()[0]
    finally:
        spark.stop()
    return {
        "lake_rows": lake_rows,
        "lake_distinct": lake_distinct,
        "lake_written_twice": lake_rows - lake_distinct,
        "lake_missing": exp["written"] - lake_distinct,
        "dlq_rows": dlq_rows,
        "dlq_distinct": dlq_distinct,
        "dlq_written_twice": dlq_rows - dlq_distinct,
        "dlq_missing": exp["bad"] - dlq_distinct,
        "lake_batches": lake_batches,
        "expected_written": exp["written"],
        "expected_bad": exp["bad"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-file", type=int, default=10_000, help="records per file = per micro-batch")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_environment()
    work = Path(tempfile.mkdtemp(prefix="conduit-bench-restart-"))
    isolated_airflow_home(work)
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    from airflow_conduit.hooks.backends.local import LocalBackend

    rng = random.Random(args.seed)
    try:
        counts = generate(work / "data", args.records, args.per_file)
        exp = expected(counts)
        spec = work / "pipeline.yaml"
        spec.write_text(runner_spec(work / "data", work / "lake", work / "dlq", 1, 10_000, 1_000), encoding="utf-8")
        state = work / "state"
        launcher = LocalBackend("spark_default")
        kills: list[dict[str, Any]] = []
        run_no = 1
        handle = launcher.submit(str(spec), f"run-{run_no:02d}", str(state))
        log(f"{args.records:,} records, {args.per_file:,} per batch; run-01 submitted")
        watch_run(handle, launcher, lambda r: len(r.get("batches") or []) >= 1, args.timeout)
        for k in range(args.kills):
            in_flight = wait_in_flight(state, handle, launcher, args.timeout)
            if in_flight is None:
                log("the pipeline finished before all kills were done (use more records)")
                break
            time.sleep(rng.uniform(0.1, 1.5))  # a different point of the batch each time
            offsets, commits = checkpoint_batches(state)
            pending = sorted(offsets - commits)
            t_kill = time.time()
            launcher.kill(handle, graceful=False)
            t_killed = time.time()
            killed_report = read_report(Path(handle["report_path"])) or {}
            killed_run = handle["run_id"]
            run_no += 1
            handle = launcher.submit(str(spec), f"run-{run_no:02d}", str(state))
            t_submit = time.time()
            seen = watch_run(handle, launcher, lambda r: len(r.get("batches") or []) >= 1, args.timeout)
            report = read_report(Path(handle["report_path"])) or {}
            first = (report.get("batches") or [{}])[0]
            replayed = [b for b in (report.get("batches") or []) if b.get("batch_id") in pending]
            kills.append(
                {
                    "killed_run": killed_run,
                    "restarted_run": handle["run_id"],
                    "in_flight": pending,
                    "killed_after_batches": len(killed_report.get("batches") or []),
                    "kill_seconds": t_killed - t_kill,
                    "to_submitted": t_submit - t_kill,
                    "to_report_starting": (seen.get("status:starting") or seen.get("status:running", t_submit)) - t_kill,
                    "to_running": seen.get("status:running", float("nan")) - t_kill,
                    "to_processing_again": seen.get("first_batch", float("nan")) - t_kill,
                    "first_batch_seconds": seen.get("first_batch", float("nan")) - seen.get("status:running", float("nan")),
                    "first_batch_id": first.get("batch_id"),
                    "first_batch_replayed": first.get("batch_id") in pending,
                    "first_batch_already_committed": first.get("already_committed", []),
                    "read_twice": sum(int(b.get("read", 0)) for b in replayed),
                    "batch_size": args.per_file,
                }
            )
            c = kills[-1]
            log(f"  kill {k + 1}: batch {pending} in flight; processing again after {c['to_processing_again']:.1f}s "
                f"(running after {c['to_running']:.1f}s); read twice {c['read_twice']} (bound {args.per_file})")
        seen = watch_run(handle, launcher, lambda r: r.get("status") in ("succeeded", "failed"), args.timeout * 4)
        final = read_report(Path(handle["report_path"])) or {}
        deadline = time.monotonic() + 60
        status = launcher.status(handle)
        while not status.finished and time.monotonic() < deadline:  # the JVM shuts down after the report
            time.sleep(0.2)
            status = launcher.status(handle)
        log(f"final run {handle['run_id']}: {final.get('status')}, exit {status.exit_code}")
        outputs = verify_outputs(work, exp)
        log(f"outputs: {outputs}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ats = [b.get("at") for b in (final.get("batches") or []) if b.get("at")]
    gaps = [iso_epoch(b) - iso_epoch(a) for a, b in zip(ats, ats[1:])]
    result = {
        "records": args.records,
        "steady_batch_seconds": summary(gaps),
        "per_batch": args.per_file,
        "kills": kills,
        "final_status": final.get("status"),
        "final_exit_code": status.exit_code,
        "outputs": outputs,
        "summary": {
            key: summary(c[key] for c in kills)
            for key in ("to_submitted", "to_report_starting", "to_running", "first_batch_seconds", "to_processing_again",
                        "read_twice", "kill_seconds")
        },
        "written_twice": outputs["lake_written_twice"] + outputs["dlq_written_twice"],
        "missing": outputs["lake_missing"] + outputs["dlq_missing"],
    }
    path = write_result("restart_cost", result, args.out)
    log(f"written to {path}")
    return 0


# -- the report's section ------------------------------------------------------------------------------

TITLE = "3. Restart cost"
ABOUT = """
Benchmark 1's data and pipeline (1 % bad, Parquet lake and DLQ, nack window), one file per micro-batch, run by
real spark-submit (`local[2]`) through the local launcher. Each time a batch is in flight (its offsets in the
checkpoint, its commit not), the driver's process group gets SIGKILL a random 0.1–1.5 s later, so at a
different point of the batch each time, and the pipeline is re-submitted at once with the same state directory
(detection and backoff are benchmark 2's). The last run goes to the end; then the outputs are checked: no record
written twice or missing in the lake or the DLQ. Records read twice are counted from the restarted run's report
(an upper bound: the killed run may have read only part of the batch). Time to processing again is a fresh
spark-submit (JVM, SparkSession, Python driver, checkpoint recovery, query start) plus the replayed batch.
"""


def section(r: dict[str, Any]) -> str:
    from bench.markdown import section_text, spread, table

    kills = table(["kill", "batch in flight", "SIGKILL → running", "first batch after restart", "**SIGKILL → processing again**",
                   "records read twice (bound)", "destinations already committed"],
                  [[i + 1, ", ".join(str(b) for b in k["in_flight"]) or "none (between two batches)", f"{k['to_running']:.1f} s",
                    f"{k['first_batch_seconds']:.1f} s", f"{k['to_processing_again']:.1f} s", f"{k['read_twice']:,} ({k['batch_size']:,})",
                    ", ".join(k["first_batch_already_committed"]) or "none"] for i, k in enumerate(r["kills"])])
    s, o = r["summary"], r["outputs"]
    totals = table(["measure", "value"], [
        ["SIGKILL → processing again", spread(s["to_processing_again"], 1, " s")],
        ["restarted run's first batch / a steady batch", f"{spread(s['first_batch_seconds'], 1, ' s')} / {spread(r['steady_batch_seconds'], 1, ' s')}"],
        ["lake: rows, distinct ids, written twice, missing", f"{o['lake_rows']:,}, {o['lake_distinct']:,}, {o['lake_written_twice']}, {o['lake_missing']}"],
        ["DLQ: rows, distinct positions, written twice, missing", f"{o['dlq_rows']:,}, {o['dlq_distinct']:,}, {o['dlq_written_twice']}, {o['dlq_missing']}"],
        ["last run", f"`{r['final_status']}`, exit code {r['final_exit_code']}"],
    ])
    return section_text(TITLE, ABOUT, f"{r['records']:,} records, {r['per_batch']:,} per batch.", kills, totals)


if __name__ == "__main__":
    sys.exit(main())
