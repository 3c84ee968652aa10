"""Benchmark 2: reaction time of recovery through the operator under dag.test() (method: docs/benchmarks.md)."""

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from airflow_conduit.runs.report import read_json
from bench.common import benchmark, iso_epoch, log, pipeline_yaml, setup_environment, spread, step, summary, table, workdir

TITLE = "2. Reaction time of recovery"
EVENTS_ENV = "CONDUIT_BENCH_EVENTS"
SPEC = pipeline_yaml("bench-recovery", [step("gen", "generator", fields={"id": "BIGINT", "amount": "DOUBLE"}, records=1000)],
                     [step("out", "file", path="out", format="json")])
DAG_FILE = """
from datetime import datetime, timezone
from airflow.sdk import DAG
from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
with DAG(dag_id={dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
    RecoveringSparkPipelineOperator(**{kwargs!r})
"""


def mark(name: str, **data: Any) -> None:
    with open(os.environ[EVENTS_ENV], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": name, "t": time.time(), **data}, default=str) + "\n")


def install_timed_hook() -> None:
    """The operator's hook with a timestamp at each submission (the next run's start); behaviour unchanged."""
    import airflow_conduit.operators.pipeline as operators
    from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook

    class TimedHook(SparkPipelineHook):
        def submit_job(self, *args, **kwargs):
            handle = super().submit_job(*args, **kwargs)
            mark("submit", run_id=handle.run_id, submitted_at=handle.submitted_at)
            return handle

    operators.SparkPipelineHook = TimedHook  # in this benchmark's process only


def run_dag(work: Path, poll: float, restarts: int, delay: float) -> dict[str, Any]:
    """One dag.test(): every run fails with a transient error; ``restarts`` restarts, then the budget is spent."""
    state, name = work / f"state-poll{poll:g}", f"bench_recovery_poll{str(poll).replace('.', '_')}"
    state.mkdir(parents=True)
    (work / f"{name}.yaml").write_text(SPEC, encoding="utf-8")
    os.environ[EVENTS_ENV] = str(work / f"{name}.jsonl")
    kwargs = dict(task_id="pipeline", spec=str(work / f"{name}.yaml"), state_dir=str(state), conn_id="spark_default", min_delay=f"{delay:g}s",
                  max_delay="10s", policy="fixed", max_retries=restarts, max_retries_window="10m", poll_interval=poll,
                  backend_options={"faults": {"transient_first_runs": restarts + 5}})
    (work / "dags" / f"{name}.py").write_text(DAG_FILE.format(dag_id=name, kwargs=kwargs), encoding="utf-8")
    module = importlib.import_module(name)  # dag.test() syncs the DAG's file to the metadata DB
    dagrun = module.dag.test()
    marks = [json.loads(line) for line in Path(os.environ[EVENTS_ENV]).read_text().splitlines()]
    exits = {run.name: iso_epoch(read_json(run / "exit.json")["ended_at"])
             for run in (state / "runs").iterdir() if (run / "exit.json").exists()}
    return {"marks": marks, "exits": exits, "state": str(getattr(dagrun, "state", None))}


def cycles(raw: dict[str, Any], delay: float) -> list[dict[str, float]]:
    """One figure per restart: the failed run's driver exit -> the next submission (its handle's submitted_at)."""
    submits, out = [m for m in raw["marks"] if m["event"] == "submit"], []
    for failed, following in zip(submits, submits[1:]):
        exit_t = raw["exits"].get(failed["run_id"])
        if exit_t is not None:
            total = iso_epoch(following["submitted_at"]) - exit_t
            out.append({"configured_delay": delay, "total": total, "overhead": total - delay})
    return out


def measure(args) -> dict[str, Any]:
    by_poll = {}
    with workdir("recovery") as work:
        setup_environment(work)
        install_timed_hook()
        sys.path.insert(0, str(work / "dags"))
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)
        for poll in [float(p) for p in args.polls.split(",")]:
            raw = run_dag(work, poll, args.restarts, args.delay)
            measured = cycles(raw, args.delay)
            log(f"poll {poll:g} s: {len(measured)} of {args.restarts} restarts measured; dag run {raw['state']}")
            if not measured:
                raise SystemExit(f"no restart measured: events {[m['event'] for m in raw['marks']]}")
            by_poll[f"{poll:g}"] = {"poll": poll, "cycles": measured, "dagrun_state": raw["state"],
                                    "summary": {k: summary(c[k] for c in measured) for k in measured[0]}}
    return {"by_poll": by_poll}


FIGURES = {"overhead": "**overhead** (total minus delay)", "configured_delay": "configured delay",
           "total": "total, driver exit → next submission"}


def tables(r: dict[str, Any]) -> list[str]:
    polls = sorted(r["by_poll"].values(), key=lambda p: float(p["poll"]))
    header = ["figure", *[f"poll {p['poll']:g} s ({len(p['cycles'])} restarts, run ended `{p['dagrun_state']}`)" for p in polls]]
    return [table(header, [[label, *[spread(p["summary"].get(key), 3, " s") for p in polls]] for key, label in FIGURES.items()])]


if __name__ == "__main__":
    benchmark("recovery_reaction", __doc__, measure, polls="1,5", restarts=5, delay=1.0)
