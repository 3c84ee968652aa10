"""Benchmark 4: deferral at scale - N pipelines watched by one event loop vs one worker process per job.

A (deferred): one process that imports Airflow and this package, as a
triggerer does, runs N ``SparkPipelineTrigger`` instances in one asyncio loop,
each polling a fake running job every ``poll`` seconds through the real code
path (``LocalBackend.status`` - process table + exit file - and
``RunReport.read``, both in worker threads). The fake jobs are real ``sleep``
processes (a pool shared by the handles) with a real run report each. Trigger
starts are spread over one poll interval, as deferrals arrive over time.
Measured after every trigger has started: RSS (and USS), CPU time over one
poll interval, polls done, event-loop lag.

B (not deferred): what a plain SparkSubmitOperator holds per running job: a
worker process that imports Airflow's task runner and the Spark provider and
sits in ``SparkSubmitHook.submit`` reading the output of spark-submit (here a
fake ``spark-submit`` on PATH that sleeps). K such processes are measured;
the cost of N jobs is extrapolated as N x the median per process. Airflow 3
also keeps a supervisor process per running task; it is not counted, so B is
an underestimate.

Also measured: the ``airflow_conduit.hooks.backends.detached`` wrapper that the
local launcher keeps per running job (stdlib only; the standalone launcher
keeps none).

Each repetition runs B once and A for every N, in a rotated order; ratios
are per repetition (B / A: how many times more memory the worker-per-job
model holds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import MIN_PAIRS, log, paired_ratios, rotated, setup_environment, summary, write_result

FAKE_SPARK_SUBMIT = "#!/bin/sh\necho \"fake spark-submit $*\"\nexec sleep 3600\n"

WORKER_STAND_IN = r"""
import os, sys, time
from pathlib import Path
import airflow.sdk.execution_time.task_runner  # noqa: F401 - what the task process has loaded
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: F401
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
Path(sys.argv[1]).write_text(str(os.getpid()))
SparkSubmitHook(conn_id="spark_default", name="bench").submit(application="/tmp/bench-app.py")
"""

REPORT_TEMPLATE = {
    "pipeline_id": "fake",
    "status": "running",
    "started_at": "2026-01-01T00:00:00.000000Z",
    "ended_at": None,
    "last_progress_at": "2026-01-01T00:00:10.000000Z",
    "first_record_written_at": "2026-01-01T00:00:05.000000Z",
    "totals": {"read": 120000, "filtered": 480, "dlq": 1200, "written": {"lake": 118320}},
    "batches": [
        {"batch_id": b, "read": 10000, "filtered": 40, "dlq": 100, "written": {"lake": 9860}, "at": "2026-01-01T00:00:10.000000Z"}
        for b in range(12)
    ],
    "counters": {
        "total-record-failures": 1200,
        "total-records-skipped": 1200,
        "total-retries": 0,
        "deadletterqueue-records-produced": 1200,
        "deadletterqueue-produce-failures": 0,
        "last-failure-timestamp": "2026-01-01T00:00:10.000000Z",
    },
    "error": None,
}


# -- A: the trigger process (runs as a child: python -m bench.deferral_scale --child ...) ---------------


def _memory(proc) -> dict[str, float]:
    info = proc.memory_full_info()
    return {"rss_mb": info.rss / 1e6, "uss_mb": info.uss / 1e6}


async def _watch_all(n: int, poll: float, jobs_dir: Path, pids: list[tuple[int, float]]) -> dict[str, Any]:
    import psutil

    from airflow_conduit.hooks.backends import local
    from airflow_conduit.triggers.pipeline import SparkPipelineTrigger

    polls = 0
    original_status = local.LocalBackend.status

    def counting_status(self, handle):
        nonlocal polls
        polls += 1
        return original_status(self, handle)

    local.LocalBackend.status = counting_status
    proc = psutil.Process()
    baseline = _memory(proc)
    handles = []
    for i in range(n):
        run = jobs_dir / f"job-{i}"
        run.mkdir(parents=True, exist_ok=True)
        (run / "report.json").write_text(json.dumps({**REPORT_TEMPLATE, "run_id": f"job-{i}"}))
        pid, started = pids[i % len(pids)]
        handles.append(
            {
                "launcher": "local",
                "run_id": f"job-{i}",
                "state_dir": str(run),
                "report_path": str(run / "report.json"),
                "log_path": str(run / "driver.log"),
                "exit_path": str(run / "exit.json"),
                "pid": pid,
                "pid_started": started,
                "submitted_at": "2026-01-01T00:00:00.000000Z",
                "spark_ui": None,
                "conn_id": "spark_default",
            }
        )
    triggers = [SparkPipelineTrigger(h, poll_interval=poll) for h in handles]
    events: list[Any] = []

    async def watch(trigger, delay):
        await asyncio.sleep(delay)
        async for event in trigger.run():
            events.append(event)

    rng = random.Random(0)
    tasks = [asyncio.create_task(watch(t, rng.uniform(0, poll))) for t in triggers]
    lags: list[float] = []

    async def ticker():
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.05)
            lags.append(time.perf_counter() - start - 0.05)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(poll + 1.0)  # every trigger started and polled once
    lags.clear()
    polls_before, cpu_before, wall_before = polls, proc.cpu_times(), time.perf_counter()
    peak_rss = proc.memory_info().rss
    window_end = wall_before + poll
    while time.perf_counter() < window_end:
        await asyncio.sleep(0.25)
        peak_rss = max(peak_rss, proc.memory_info().rss)  # cheap; the full (USS) reading is taken once, after
    cpu_after, wall_after, polls_after = proc.cpu_times(), time.perf_counter(), polls
    end = _memory(proc)
    peak = {"rss_mb": max(peak_rss / 1e6, end["rss_mb"])}
    tick.cancel()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, tick, return_exceptions=True)
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    wall = wall_after - wall_before
    lags.sort()
    return {
        "n": n,
        "poll_interval": poll,
        "baseline": baseline,
        "end": end,
        "peak": peak,
        "window_seconds": wall,
        "cpu_seconds": cpu,
        "cpu_cores": cpu / wall,
        "polls": polls_after - polls_before,
        "polls_expected": n * wall / poll,
        "events": len(events),
        "loop_lag_ms": {
            "p50": 1000 * lags[len(lags) // 2] if lags else None,
            "p99": 1000 * lags[int(len(lags) * 0.99)] if lags else None,
            "max": 1000 * lags[-1] if lags else None,
        },
    }


def child_main(args: argparse.Namespace) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING)
    import airflow  # noqa: F401 - a triggerer has Airflow loaded
    from airflow.triggers.base import BaseTrigger  # noqa: F401

    jobs = Path(args.jobs_dir)
    pids = [tuple(p) for p in json.loads(args.pids)]
    result = asyncio.run(_watch_all(args.child, args.poll, jobs, pids))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def measure_triggers(n: int, poll: float, work: Path, pids: list[tuple[int, float]]) -> dict[str, Any]:
    jobs = work / f"jobs-{n}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "bench.deferral_scale", "--child", str(n), "--poll", str(poll),
           "--jobs-dir", str(jobs), "--pids", json.dumps(pids)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=str(Path(__file__).resolve().parents[1]))
    shutil.rmtree(jobs, ignore_errors=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"trigger child failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


# -- B: one worker process per job -----------------------------------------------------------------------


def _wait_files(paths: list[Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return
        time.sleep(0.1)
    raise TimeoutError(f"stand-in processes did not start: {[str(p) for p in paths if not p.exists()]}")


def measure_workers(k: int, window: float, work: Path) -> dict[str, Any]:
    import psutil

    fakebin = work / "fakebin"
    fakebin.mkdir(exist_ok=True)
    (fakebin / "spark-submit").write_text(FAKE_SPARK_SUBMIT)
    (fakebin / "spark-submit").chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = str(fakebin) + os.pathsep + env["PATH"]
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
    ready = [work / f"worker-{i}-{time.time_ns()}.ready" for i in range(k)]
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER_STAND_IN, str(r)], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        for r in ready
    ]
    try:
        _wait_files(ready, 120)
        time.sleep(2.0)  # let them settle in their wait
        ps = [psutil.Process(p.pid) for p in procs]
        for p in ps:
            if not any(c.name() == "sleep" for c in p.children(recursive=True)):
                raise RuntimeError("stand-in worker is not waiting on its (fake) spark-submit")
        cpu0 = [sum(p.cpu_times()[:2]) for p in ps]
        t0 = time.perf_counter()
        time.sleep(window)
        wall = time.perf_counter() - t0
        cpu1 = [sum(p.cpu_times()[:2]) for p in ps]
        mem = [_memory(p) for p in ps]
        return {
            "k": k,
            "rss_mb": summary(m["rss_mb"] for m in mem),
            "uss_mb": summary(m["uss_mb"] for m in mem),
            "cpu_cores_per_process": summary((b - a) / wall for a, b in zip(cpu0, cpu1)),
        }
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)


def measure_detached_wrapper(work: Path) -> dict[str, Any]:
    """The stdlib wrapper the local launcher keeps per running job (airflow_conduit.hooks.backends.detached)."""
    import psutil

    exit_file = work / "wrapper-exit.json"
    proc = subprocess.Popen([sys.executable, "-m", "airflow_conduit.hooks.backends.detached", str(exit_file), "--", "sleep", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(1.5)
        return _memory(psutil.Process(proc.pid))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# -- orchestration ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="100,500,1000")
    parser.add_argument("--reps", type=int, default=MIN_PAIRS)
    parser.add_argument("--poll", type=float, default=5.0, help="trigger poll interval (the operator's default: 5 s)")
    parser.add_argument("--workers", type=int, default=5, help="stand-in worker processes measured per repetition")
    parser.add_argument("--fake-jobs", type=int, default=8, help="real sleep processes the N handles point at")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--jobs-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--pids", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    setup_environment()
    if args.child is not None:
        return child_main(args)

    import psutil

    ns = [int(x) for x in args.ns.split(",")]
    work = Path(tempfile.mkdtemp(prefix="conduit-bench-defer-"))
    os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow-home"))
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.fake_jobs)]
    pids = [(p.pid, psutil.Process(p.pid).create_time()) for p in sleepers]
    runs: dict[str, list[dict[str, Any]]] = {str(n): [] for n in ns}
    workers: list[dict[str, Any]] = []
    orders = []
    try:
        wrapper = measure_detached_wrapper(work)
        log(f"detached wrapper per job (local launcher): RSS {wrapper['rss_mb']:.1f} MB, USS {wrapper['uss_mb']:.1f} MB")
        for rep in range(args.reps):
            order = rotated(["workers", *ns], rep)
            orders.append([str(x) for x in order])
            for item in order:
                if item == "workers":
                    w = measure_workers(args.workers, args.poll, work)
                    workers.append(w)
                    log(f"  rep {rep} B: {args.workers} worker stand-ins, RSS {w['rss_mb']['median']:.1f} MB, "
                        f"USS {w['uss_mb']['median']:.1f} MB each")
                else:
                    r = measure_triggers(item, args.poll, work, pids)
                    runs[str(item)].append(r)
                    log(f"  rep {rep} A: N={item}: RSS {r['end']['rss_mb']:.1f} MB (baseline {r['baseline']['rss_mb']:.1f}), "
                        f"CPU {r['cpu_cores'] * 100:.1f}% of a core, polls {r['polls']}/{r['polls_expected']:.0f}, "
                        f"loop lag p99 {r['loop_lag_ms']['p99']:.1f} ms")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)

    per_n: dict[str, Any] = {}
    for n in ns:
        rs = runs[str(n)]
        a_rss = [r["end"]["rss_mb"] for r in rs]
        b_rss = [n * w["rss_mb"]["median"] for w in workers]
        b_uss = [n * w["uss_mb"]["median"] for w in workers]
        per_n[str(n)] = {
            "triggerer_rss_mb": summary(a_rss),
            "triggerer_peak_rss_mb": summary(r["peak"]["rss_mb"] for r in rs),
            "baseline_rss_mb": summary(r["baseline"]["rss_mb"] for r in rs),
            "marginal_kb_per_pipeline": summary(1000 * (r["end"]["rss_mb"] - r["baseline"]["rss_mb"]) / n for r in rs),
            "total_mb_per_pipeline": summary(r["end"]["rss_mb"] / n for r in rs),
            "cpu_cores": summary(r["cpu_cores"] for r in rs),
            "cpu_ms_per_pipeline_per_second": summary(1000 * r["cpu_cores"] / n for r in rs),
            "cpu_ms_per_poll": summary(1000 * r["cpu_seconds"] / max(r["polls"], 1) for r in rs),
            "polls_done_share": summary(r["polls"] / r["polls_expected"] for r in rs),
            "loop_lag_p99_ms": summary(r["loop_lag_ms"]["p99"] for r in rs),
            "loop_lag_max_ms": summary(r["loop_lag_ms"]["max"] for r in rs),
            "workers_rss_mb": summary(b_rss),
            "workers_uss_mb": summary(b_uss),
            "ratio_workers_rss_over_triggerer": paired_ratios(b_rss, a_rss),
            "ratio_workers_uss_over_triggerer": paired_ratios(b_uss, a_rss),
            "ratio_workers_uss_over_triggerer_plus_wrappers": paired_ratios(
                b_uss, [a + n * wrapper["uss_mb"] for a in a_rss]
            ),
            "runs": rs,
        }
    result = {
        "ns": ns,
        "reps": args.reps,
        "poll_interval": args.poll,
        "workers_per_rep": args.workers,
        "fake_jobs": args.fake_jobs,
        "orders": orders,
        "detached_wrapper": wrapper,
        "worker_rss_mb": summary(w["rss_mb"]["median"] for w in workers),
        "worker_uss_mb": summary(w["uss_mb"]["median"] for w in workers),
        "worker_cpu_cores": summary(w["cpu_cores_per_process"]["median"] for w in workers),
        "workers": workers,
        "per_n": per_n,
    }
    path = write_result("deferral_scale", result, args.out)
    log(f"written to {path}")
    return 0


# -- the report's section ------------------------------------------------------------------------------

TITLE = "4. Deferral at scale"
ABOUT = """
**A, deferred** (this project): one process with Airflow and this package loaded, as a triggerer has, runs N
`SparkPipelineTrigger`s in one asyncio loop, each polling a fake running job through the real code
(`LocalBackend.status`, `RunReport.read` of a real report file, each in a worker thread); starts are spread
over one poll interval, then RSS, CPU, polls done and the lag of a 50 ms ticker are measured over one interval.
**B, one worker process per running job** (a plain `SparkSubmitOperator`): a Python process with Airflow's
task runner and the Spark provider loaded, sitting in `SparkSubmitHook.submit` on a fake `spark-submit`; a few
are measured per repetition and N jobs are extrapolated as N × the median (Airflow's per-task supervisor is not
counted: B is an underestimate). The local launcher keeps a small wrapper process per job (counted in the last
column, in USS); the standalone-cluster launcher keeps none. The Spark job itself, the same in both, is not
counted. Ratios per repetition, median (min–max).
"""


def section(r: dict[str, Any]) -> str:
    from bench.markdown import section_text, spread, table

    rows = []
    for n in r["ns"]:
        p = r["per_n"][str(n)]
        cpu = {k: (v * 100 if k != "n" else v) for k, v in p["cpu_cores"].items()}
        rows.append([f"{n:,}", spread(p["triggerer_rss_mb"], 0, " MB"), spread(p["marginal_kb_per_pipeline"], 1, " KB"),
                     spread(cpu, 1, " %"), spread(p["cpu_ms_per_pipeline_per_second"], 3, " ms"),
                     f"{100 * p['polls_done_share']['median']:.0f} %", spread(p["loop_lag_p99_ms"], 1, " ms"),
                     spread(p["workers_rss_mb"], 0, " MB"), spread(p["ratio_workers_rss_over_triggerer"], 0, "×"),
                     spread(p["ratio_workers_uss_over_triggerer_plus_wrappers"], 1, "×")])
    header = ["N", "A: RSS", "A: RSS per extra pipeline", "A: CPU (of one core)", "A: CPU per pipeline per second", "polls done",
              "loop lag p99", "B: RSS of N workers", "B ÷ A (RSS)", "B ÷ (A + wrappers) (USS)"]
    facts = (f"Poll interval {r['poll_interval']:g} s; {r['reps']} repetitions; a B worker: RSS {spread(r['worker_rss_mb'], 1, ' MB')}, "
             f"USS {spread(r['worker_uss_mb'], 1, ' MB')}; a local-launcher wrapper: USS {r['detached_wrapper']['uss_mb']:.1f} MB.")
    return section_text(TITLE, ABOUT, facts, table(header, rows))


if __name__ == "__main__":
    sys.exit(main())
