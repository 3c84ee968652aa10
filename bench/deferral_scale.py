"""Benchmark 4: N pipelines watched by one triggerer's event loop (A) against one worker process per job (B)
(method: docs/benchmarks.md)."""

import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import MIN_PAIRS, alternate, at, benchmark, figure_table, processes, ratios, run_child, spread, summary, workdir

TITLE = "4. Deferral at scale"
WORKER_STAND_IN = r"""
import os, sys
from pathlib import Path
import airflow.sdk.execution_time.task_runner  # noqa: F401 - what the task process has loaded
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: F401
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
Path(sys.argv[1]).write_text(str(os.getpid()))
SparkSubmitHook(conn_id="spark_default", name="bench").submit(application="/tmp/bench-app.py")
"""
BATCH = {"read": 10000, "filtered": 40, "dlq": 100, "written": {"lake": 9860}, "at": "2026-01-01T00:00:10.000000Z"}
REPORT = {"pipeline_id": "fake", "status": "running", "started_at": "2026-01-01T00:00:00.000000Z", "ended_at": None,
          "last_progress_at": "2026-01-01T00:00:10.000000Z", "totals": {"read": 120000, "filtered": 480, "dlq": 1200, "written": {"lake": 118320}},
          "batches": [{"batch_id": b, **BATCH} for b in range(12)], "error": None,
          "counters": {"total-record-failures": 1200, "deadletterqueue-records-produced": 1200}}


def memory(proc) -> dict[str, float]:
    info = proc.memory_full_info()
    return {"rss_mb": info.rss / 1e6, "uss_mb": info.uss / 1e6}


async def watch_all(n: int, poll: float, jobs: Path, pids: list[list[float]]) -> dict[str, Any]:
    """A: N triggers in this loop, starts spread over one poll interval; measured over the next interval."""
    import psutil

    from airflow_conduit.hooks.backends import local
    from airflow_conduit.triggers.pipeline import SparkPipelineTrigger

    polls, status = [0], local.LocalBackend.status

    def counting_status(self, handle):
        polls[0] += 1
        return status(self, handle)

    local.LocalBackend.status = counting_status  # counts polls in this child process only
    proc = psutil.Process()
    baseline = memory(proc)
    triggers = []
    for i in range(n):
        run = jobs / f"job-{i}"
        run.mkdir(parents=True)
        (run / "report.json").write_text(json.dumps({**REPORT, "run_id": f"job-{i}"}))
        pid, started = pids[i % len(pids)]
        triggers.append(SparkPipelineTrigger({"backend": "local", "run_id": f"job-{i}", "state_dir": str(run), "report_path": str(run / "report.json"),
                                              "log_path": str(run / "driver.log"), "exit_path": str(run / "exit.json"), "pid": int(pid),
                                              "pid_started": started, "submitted_at": "2026-01-01T00:00:00.000000Z", "spark_ui": None,
                                              "conn_id": "spark_default"}, poll_interval=poll))
    lags: list[float] = []

    async def watch(trigger, delay):
        await asyncio.sleep(delay)
        async for _ in trigger.run():
            pass

    async def ticker():
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.05)
            lags.append(time.perf_counter() - start - 0.05)

    rng = random.Random(0)
    tasks = [asyncio.create_task(watch(t, rng.uniform(0, poll))) for t in triggers] + [asyncio.create_task(ticker())]
    await asyncio.sleep(poll + 1.0)  # every trigger started and polled once
    lags.clear()
    before, cpu0, t0 = polls[0], proc.cpu_times(), time.perf_counter()
    await asyncio.sleep(poll)
    cpu1, wall = proc.cpu_times(), time.perf_counter() - t0
    end, done = memory(proc), polls[0] - before
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    lags.sort()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {"n": n, "baseline": baseline, "end": end, "cpu_cores": cpu / wall, "polls_share": done / (n * wall / poll),
            "lag_p99_ms": 1000 * lags[int(len(lags) * 0.99)] if lags else None}


def measure_workers(k: int, window: float, work: Path) -> dict[str, Any]:
    """B: ``k`` stand-in workers sitting in SparkSubmitHook.submit on a fake spark-submit that sleeps."""
    import psutil

    (work / "fakebin").mkdir(parents=True)
    (work / "fakebin" / "spark-submit").write_text('#!/bin/sh\necho "fake spark-submit $*"\nexec sleep 3600\n')
    (work / "fakebin" / "spark-submit").chmod(0o755)
    env = {**os.environ, "PATH": str(work / "fakebin") + os.pathsep + os.environ["PATH"],
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"})}
    ready = [work / f"worker-{i}.ready" for i in range(k)]
    with processes(*[[sys.executable, "-c", WORKER_STAND_IN, str(r)] for r in ready], env=env) as procs:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0 + window)  # settled in their wait
        ps = [psutil.Process(p.pid) for p in procs]
        if not all(any(c.name() == "sleep" for c in p.children(recursive=True)) for p in ps):
            raise RuntimeError("a stand-in worker is not waiting on its (fake) spark-submit")
        mem = [memory(p) for p in ps]
    return {key: summary(m[key] for m in mem)["median"] for key in ("rss_mb", "uss_mb")}


def child(args) -> dict[str, Any]:
    import airflow  # noqa: F401 - a triggerer has Airflow loaded

    return asyncio.run(watch_all(int(args.ns), args.poll, Path(args.jobs_dir), json.loads(args.pids)))


def measure(args) -> dict[str, Any]:
    import psutil

    ns = [int(x) for x in args.ns.split(",")]
    with workdir("defer") as work:  # 8 sleeping processes: the fake running jobs the N handles point at
        os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow-home"))
        wrapper = [sys.executable, "-m", "airflow_conduit.hooks.backends.detached", str(work / "exit.json"), "--", "sleep", "60"]
        with processes(*[["sleep", "3600"]] * 8) as sleepers, processes(wrapper) as wrappers:
            pids = [(p.pid, psutil.Process(p.pid).create_time()) for p in sleepers]
            time.sleep(1.5)
            wrapper_memory = memory(psutil.Process(wrappers[0].pid))
            runs = alternate(["workers", *map(str, ns)], args.reps, warmup=0, work=work, run=lambda item, folder: (
                measure_workers(args.workers, args.poll, folder) if item == "workers" else
                run_child("bench.deferral_scale", work / "a.json", ns=item, poll=args.poll, jobs_dir=folder, pids=json.dumps(pids))))
    workers, per_n = runs.pop("workers"), {}
    for n in ns:
        rs = runs[str(n)]
        a_rss, b_rss, b_uss = [r["end"]["rss_mb"] for r in rs], [n * w["rss_mb"] for w in workers], [n * w["uss_mb"] for w in workers]
        per_n[str(n)] = {"triggerer_rss_mb": summary(a_rss),
                         "marginal_kb_per_pipeline": summary(1000 * (r["end"]["rss_mb"] - r["baseline"]["rss_mb"]) / n for r in rs),
                         "cpu_cores": summary(r["cpu_cores"] for r in rs),
                         "cpu_ms_per_pipeline_per_second": summary(1000 * r["cpu_cores"] / n for r in rs),
                         "polls_done_share": summary(r["polls_share"] for r in rs), "loop_lag_p99_ms": summary(r["lag_p99_ms"] for r in rs),
                         "workers_rss_mb": summary(b_rss), "ratio_workers_rss_over_triggerer": ratios(b_rss, a_rss),
                         "ratio_workers_uss_over_triggerer_plus_wrappers": ratios(b_uss, [a + n * wrapper_memory["uss_mb"] for a in a_rss])}
    return {"ns": ns, "reps": args.reps, "poll_interval": args.poll, "detached_wrapper": wrapper_memory,
            "worker_rss_mb": summary(w["rss_mb"] for w in workers), "worker_uss_mb": summary(w["uss_mb"] for w in workers), "per_n": per_n}


PER_N = (("N", lambda p: f"{p['n']:,}"), ("A: RSS", at("triggerer_rss_mb"), 0, " MB"),
         ("A: RSS per extra pipeline", at("marginal_kb_per_pipeline"), 1, " KB"),
         ("A: CPU (of one core)", lambda p: {k: v * 100 if k != "n" else v for k, v in p["cpu_cores"].items()}, 1, " %"),
         ("A: CPU per pipeline per second", at("cpu_ms_per_pipeline_per_second"), 3, " ms"),
         ("polls done", lambda p: f"{100 * p['polls_done_share']['median']:.0f} %"), ("loop lag p99", at("loop_lag_p99_ms"), 1, " ms"),
         ("B: RSS of N workers", at("workers_rss_mb"), 0, " MB"), ("B ÷ A (RSS)", at("ratio_workers_rss_over_triggerer"), 0, "×"),
         ("B ÷ (A + wrappers) (USS)", at("ratio_workers_uss_over_triggerer_plus_wrappers"), 1, "×"))


def tables(r: dict[str, Any]) -> list[str]:
    return [f"Poll interval {r['poll_interval']:g} s; {r['reps']} repetitions; a B worker: RSS {spread(r['worker_rss_mb'], 1, ' MB')}, "
            f"USS {spread(r['worker_uss_mb'], 1, ' MB')}; a local-launcher wrapper: USS {r['detached_wrapper']['uss_mb']:.1f} MB.",
            figure_table([{**r["per_n"][str(n)], "n": n} for n in r["ns"]], PER_N)]


if __name__ == "__main__":
    benchmark("deferral_scale", __doc__, measure, child, ns="100,500,1000", reps=MIN_PAIRS, poll=5.0, workers=5, jobs_dir="", pids="")
