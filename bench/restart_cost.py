"""Benchmark 3: restart cost after a SIGKILL of a batch in flight, through real spark-submit (method: docs/benchmarks.md)."""

import random
import time
from pathlib import Path
from typing import Any, Callable

from airflow_conduit.runs.report import read_json
from bench.common import benchmark, iso_epoch, log, setup_environment, spark_session, spread, summary, table, workdir
from bench.error_handling import expected, generate, runner_spec

TITLE = "3. Restart cost"


def in_flight(state: Path) -> list[int]:
    """Batch ids with offsets but no commit in the streaming checkpoint."""
    root = state / "checkpoints" / "pipeline"
    ids = [{int(p.name) for p in (root / d).iterdir() if p.name.isdigit()} if (root / d).exists() else set() for d in ("offsets", "commits")]
    return sorted(ids[0] - ids[1])


def report_of(handle) -> dict[str, Any]:
    return read_json(handle.report_path) or {}  # written atomically: absent or whole


def watch(handle, launcher, until: Callable[[dict], bool], timeout: float) -> dict[str, float]:
    """When each report status and the first batch were first seen, polling every 0.1 s until ``until(report)``."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        report, now = report_of(handle), time.time()
        if report:
            seen.setdefault(f"status:{report.get('status')}", now)
            if report.get("batches"):
                seen.setdefault("first_batch", now)
            if until(report):
                return seen
        if launcher.status(handle).finished:
            return seen
        time.sleep(0.1)
    raise TimeoutError(f"run {handle.run_id} did not reach the expected point within {timeout:.0f}s")


def verify(root: Path, exp: dict[str, int]) -> dict[str, int]:
    """Rows, distinct records, written twice and missing, in the lake and the DLQ."""
    spark = spark_session("bench-restart-verify")
    try:
        lake, dlq = spark.read.parquet(str(root / "lake")), spark.read.parquet(str(root / "dlq"))
        counts = {"lake_rows": lake.count(), "lake_distinct": lake.select("id").distinct().count(), "dlq_rows": dlq.count(),
                  "dlq_distinct": dlq.select("source_file", "source_position").distinct().count()}
    finally:
        spark.stop()
    return {**counts, "lake_written_twice": counts["lake_rows"] - counts["lake_distinct"], "lake_missing": exp["written"] - counts["lake_distinct"],
            "dlq_written_twice": counts["dlq_rows"] - counts["dlq_distinct"], "dlq_missing": exp["bad"] - counts["dlq_distinct"]}


def measure(args) -> dict[str, Any]:
    with workdir("restart") as work:
        setup_environment(work)
        from airflow_conduit.hooks.backends.local import LocalBackend

        rng, launcher, state, kills = random.Random(7), LocalBackend("spark_default"), work / "state", []
        exp = expected(generate(work / "data", args.records, args.per_file))
        (work / "pipeline.yaml").write_text(runner_spec(work / "data", work, 1), encoding="utf-8")
        handle = launcher.submit(str(work / "pipeline.yaml"), "run-01", str(state))
        watch(handle, launcher, lambda r: bool(r.get("batches")), args.timeout)
        for k in range(args.kills):
            watch(handle, launcher, lambda r: bool(in_flight(state)), args.timeout)
            if not in_flight(state):
                log("the pipeline finished before all kills were done (use more records)")
                break
            time.sleep(rng.uniform(0.1, 1.5))  # a different point of the batch each time
            pending, t_kill = in_flight(state), time.time()
            launcher.kill(handle, graceful=False)
            handle = launcher.submit(str(work / "pipeline.yaml"), f"run-{k + 2:02d}", str(state))
            seen = watch(handle, launcher, lambda r: bool(r.get("batches")), args.timeout)
            batches = report_of(handle).get("batches") or [{}]
            kills.append({"in_flight": pending, "to_running": seen.get("status:running", float("nan")) - t_kill,
                          "to_processing_again": seen.get("first_batch", float("nan")) - t_kill,
                          "first_batch_seconds": seen.get("first_batch", float("nan")) - seen.get("status:running", float("nan")),
                          "first_batch_already_committed": batches[0].get("already_committed", []),
                          "read_twice": sum(int(b.get("read", 0)) for b in batches if b.get("batch_id") in pending), "batch_size": args.per_file})
            log(f"kill {k + 1}: {kills[-1]}")
        watch(handle, launcher, lambda r: False, args.timeout * 4)  # until the driver exits (after its final report)
        final = report_of(handle)
        outputs, exit_code = verify(work, exp), launcher.status(handle).exit_code
    ats = [b["at"] for b in final.get("batches") or [] if b.get("at")]
    return {
        "records": args.records, "per_batch": args.per_file, "kills": kills, "outputs": outputs,
        "final_status": final.get("status"), "final_exit_code": exit_code,
        "steady_batch_seconds": summary(iso_epoch(b) - iso_epoch(a) for a, b in zip(ats, ats[1:])),
        "summary": {key: summary(c[key] for c in kills) for key in ("first_batch_seconds", "to_processing_again")},
        "written_twice": outputs["lake_written_twice"] + outputs["dlq_written_twice"],
        "missing": outputs["lake_missing"] + outputs["dlq_missing"]}


def tables(r: dict[str, Any]) -> list[str]:
    s, o = r["summary"], r["outputs"]
    return [f"{r['records']:,} records, {r['per_batch']:,} per batch.",
            table(["kill", "batch in flight", "SIGKILL → running", "first batch after restart", "**SIGKILL → processing again**",
                   "records read twice (bound)", "destinations already committed"],
                  [[i + 1, ", ".join(str(b) for b in k["in_flight"]) or "none (between two batches)", f"{k['to_running']:.1f} s", f"{k['first_batch_seconds']:.1f} s",
                    f"{k['to_processing_again']:.1f} s", f"{k['read_twice']:,} ({k['batch_size']:,})",
                    ", ".join(k["first_batch_already_committed"]) or "none"] for i, k in enumerate(r["kills"])]),
            table(["measure", "value"], [
                ["SIGKILL → processing again", spread(s["to_processing_again"], 1, " s")],
                ["restarted run's first batch / a steady batch",
                 f"{spread(s['first_batch_seconds'], 1, ' s')} / {spread(r['steady_batch_seconds'], 1, ' s')}"],
                ["lake: rows, distinct ids, written twice, missing",
                 f"{o['lake_rows']:,}, {o['lake_distinct']:,}, {o['lake_written_twice']}, {o['lake_missing']}"],
                ["DLQ: rows, distinct positions, written twice, missing",
                 f"{o['dlq_rows']:,}, {o['dlq_distinct']:,}, {o['dlq_written_twice']}, {o['dlq_missing']}"],
                ["last run", f"`{r['final_status']}`, exit code {r['final_exit_code']}"]])]


if __name__ == "__main__":
    benchmark("restart_cost", __doc__, measure, kills=5, records=200_000, per_file=10_000, timeout=240.0)
