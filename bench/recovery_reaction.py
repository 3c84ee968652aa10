"""Benchmark 2: reaction time of recovery through the operator (trigger poll, deferral, resume).

One ``RecoveringSparkPipelineOperator`` task runs under ``dag.test()`` (SQLite
metadata DB, real local spark-submit through the local launcher). The job is
made to fail with a transient error on every run (``--faults
transient_first_runs``), the policy is ``fixed`` with ``min-delay`` 1 s and
``max-retries`` 5: five restarts are measured, then the budget is exhausted
and the pipeline is degraded (so no full Spark run is needed).

For each restart, from the Spark driver's exit (the launcher's wrapper
records it the moment spark-submit exits) to the next spark-submit started:

  detection   driver exit -> the trigger yields its event (poll interval, status + report reads)
  resume      event -> ``execute_complete`` runs
  decide      ``execute_complete`` -> defer on the backoff timer (engine decision, persistence, XCom)
  timer       defer -> ``resubmit`` runs, minus the configured delay (timer trigger granularity + resume)
  submit      ``resubmit`` -> spark-submit started (spec validation, --py-files zip, command line, Popen)

overhead = (next submission - driver exit) - configured delay; target: <= poll interval + 1 s.

The timestamps come from thin subclasses of the operator and trigger defined
here (they record the time and call the real methods). ``dag.test()`` runs
triggers inline and resumes the task in the same process: a deployed Airflow
adds, at each of the two resumes per restart, the time the scheduler and
executor take to pick the task up again. That is not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import isolated_airflow_home, log, setup_environment, summary, write_result

SPEC = """
version: "1"
pipeline:
  id: bench-recovery
  mode: available-now
  sources:
    - id: gen
      plugin: generator
      settings: {fields: {id: BIGINT, amount: DOUBLE}, records: 1000}
  destinations:
    - id: out
      plugin: file
      settings: {path: out, format: json}
"""


DAG_FILE = """
# Written by bench/recovery_reaction.py: one task of the (timed) RecoveringSparkPipelineOperator.
from datetime import datetime, timezone

from airflow.sdk import DAG

from bench.timed_operator import TimedPipelineOperator

with DAG(dag_id={dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
    TimedPipelineOperator(**{kwargs!r})
"""


def _load_dag(work: Path, dag_id: str, operator_kwargs: dict[str, Any]):
    """dag.test() syncs the DAG folder to the metadata DB: the DAG must live in a file there."""
    import importlib.util

    path = work / "dags" / f"{dag_id}.py"
    path.write_text(DAG_FILE.format(dag_id=dag_id, kwargs=operator_kwargs), encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location(dag_id, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.dag


def run_dag(work: Path, poll: float, restarts: int, delay: float) -> dict[str, Any]:
    """One dag.test(): restarts+1 transient failures, `restarts` restarts, then degraded."""
    from bench.timed_operator import EVENTS_ENV, epoch

    state = work / f"state-poll{poll:g}"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    spec = state.parent / f"pipeline-poll{poll:g}.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    events = work / f"events-poll{poll:g}.jsonl"
    events.unlink(missing_ok=True)
    os.environ[EVENTS_ENV] = str(events)
    dag = _load_dag(work, dag_id=f"bench_recovery_poll{str(poll).replace('.', '_')}", operator_kwargs=dict(
        task_id="pipeline",
        spec=str(spec),
        state_dir=str(state),
        conn_id="spark_default",
        min_delay=f"{delay:g}s",
        max_delay="10s",
        policy="fixed",
        max_retries=restarts,
        max_retries_window="10m",
        poll_interval=poll,
        faults={"transient_first_runs": restarts + 5},
    ))
    t0 = time.time()
    dagrun = dag.test()
    wall = time.time() - t0
    marks = [json.loads(line) for line in events.read_text().splitlines()]
    runs = sorted(p.name for p in (state / "runs").iterdir())
    exits = {}
    for run in runs:
        exit_file = state / "runs" / run / "exit.json"
        if exit_file.exists():
            record = json.loads(exit_file.read_text())
            exits[run] = {"t": epoch(record.get("ended_at")), "exit_code": record.get("exit_code")}
    return {"poll": poll, "delay": delay, "wall": wall, "marks": marks, "exits": exits, "runs": runs,
            "dagrun_state": str(getattr(dagrun, "state", None))}


def cycles(raw: dict[str, Any]) -> list[dict[str, float]]:
    """One breakdown per restart: failed run k -> submission of run k+1."""
    marks = raw["marks"]
    out = []
    submits = [m for m in marks if m["event"] == "submit_end"]
    for k in range(len(submits) - 1):
        failed_run, next_submit = submits[k]["run_id"], submits[k + 1]
        exit_t = raw["exits"].get(failed_run, {}).get("t")
        after = [m for m in marks if m["t"] >= (exit_t or 0) and m["t"] <= next_submit["t"]]

        def first(name, **match):
            for m in after:
                if m["event"] == name and all(m.get(key) == value for key, value in match.items()):
                    return m
            return None

        event = first("trigger_event", run_id=failed_run)
        poll = first("poll", run_id=failed_run)
        complete = first("execute_complete", run_id=failed_run)
        timer = first("defer", method="resubmit")
        resubmit = first("resubmit")
        submit_begin = first("submit_begin")
        if not all([exit_t, event, complete, timer, resubmit, submit_begin]):
            continue
        delay = timer["moment"] - timer["t"]
        submitted = next_submit.get("submitted_at") or next_submit["t"]
        total = submitted - exit_t
        out.append(
            {
                "failed_run": failed_run,
                "configured_delay": delay,
                "detection": event["t"] - exit_t,
                "poll_wait": (poll["t"] - exit_t) if poll else float("nan"),
                "poll_reads": (event["t"] - poll["t"]) if poll else float("nan"),
                "resume": complete["t"] - event["t"],
                "decide": timer["t"] - complete["t"],
                "timer_overshoot": resubmit["t"] - timer["t"] - delay,
                "submit": submitted - resubmit["t"],
                "submit_zip_and_command": submitted - submit_begin["t"],
                "total": total,
                "overhead": total - delay,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", default="1,5", help="trigger poll intervals to measure (seconds)")
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--delay", type=float, default=1.0, help="min-delay of the fixed backoff policy")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_environment()
    work = Path(tempfile.mkdtemp(prefix="conduit-bench-recovery-"))
    isolated_airflow_home(work)
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    try:
        log("airflow db migrate (SQLite, throw-away AIRFLOW_HOME)")
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)
        results = {}
        for poll in [float(p) for p in args.polls.split(",")]:
            log(f"dag.test(): poll interval {poll:g}s, {args.restarts} restarts, fixed delay {args.delay:g}s")
            raw = run_dag(work, poll, args.restarts, args.delay)
            cs = cycles(raw)
            if len(cs) < args.restarts:
                log(f"  WARNING: only {len(cs)} of {args.restarts} restarts could be measured "
                    f"(runs {raw['runs']}, marks {[m['event'] for m in raw['marks']]})")
            if not cs:
                raise SystemExit("no restart measured: the operator's methods may have changed (see bench/timed_operator.py)")
            keys = ("detection", "poll_wait", "poll_reads", "resume", "decide", "timer_overshoot", "submit", "overhead", "configured_delay", "total")
            results[f"{poll:g}"] = {
                "poll": poll,
                "cycles": cs,
                "summary": {k: summary(c[k] for c in cs) for k in keys},
                "runs": raw["runs"],
                "exit_codes": {r: e["exit_code"] for r, e in raw["exits"].items()},
                "dagrun_state": raw["dagrun_state"],
                "wall": raw["wall"],
                "target": poll + 1.0,
            }
            s = results[f"{poll:g}"]["summary"]["overhead"]
            log(f"  {len(cs)} restarts measured; overhead median {s['median']:.2f}s (min {s['min']:.2f}, max {s['max']:.2f}); "
                f"target <= {poll + 1:.1f}s; dag run {raw['dagrun_state']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"restarts": args.restarts, "delay": args.delay, "policy": "fixed", "by_poll": results,
              "path": "operator under dag.test() (triggers inline, in-process resume)"}
    path = write_result("recovery_reaction", result, args.out)
    log(f"written to {path}")
    return 0


# -- the report's section ------------------------------------------------------------------------------

TITLE = "2. Reaction time of recovery"
ABOUT = """
**The operator** (`RecoveringSparkPipelineOperator`) under `dag.test()` (SQLite), real spark-submit through the
local launcher, the real `SparkPipelineTrigger` polling, deferral on the backoff timer and resume into
`resubmit`. The job fails with a transient error on every run (after spark-submit and the Python driver's
start, before the SparkSession); policy `fixed`, so every restart waits the configured delay, until the retry
budget is spent and the task fails, as designed. Per restart, from the driver's exit to the next spark-submit,
minus the configured delay: *detection* (driver exit → the trigger's event: the rest of the poll interval, then
the status, report and log-tail reads), *resume* (event → `execute_complete`), *decide* (the recovery engine's
decision and its persistence → defer on the timer), *timer overshoot* (the timer trigger wakes every 1 s) and
*submit* (`resubmit` → spark-submit started). Timestamps come from thin subclasses of the operator and trigger
(bench/timed_operator.py). A deployed Airflow adds the scheduler's and executor's latency for each of the two
resumes of a restart, not measured here.
"""
COMPONENTS = (("detection", "detection"), ("… waiting for the next poll", "poll_wait"), ("… the poll's reads and event", "poll_reads"),
              ("resume", "resume"), ("decide", "decide"), ("timer overshoot", "timer_overshoot"), ("submit", "submit"),
              ("**overhead** (total minus delay)", "overhead"), ("configured delay", "configured_delay"),
              ("total, driver exit → next submission", "total"))


def section(r: dict[str, Any]) -> str:
    from bench.markdown import section_text, spread, table

    polls = sorted(r["by_poll"].values(), key=lambda p: float(p["poll"]))
    header = ["component", *[f"poll {p['poll']:g} s ({len(p['cycles'])} restarts, run ended `{p['dagrun_state']}`)" for p in polls]]
    rows = [[label, *[spread(p["summary"].get(key), 3, " s") for p in polls]] for label, key in COMPONENTS]
    return section_text(TITLE, ABOUT, table(header, rows))


if __name__ == "__main__":
    sys.exit(main())
