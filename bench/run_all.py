"""Run the benchmarks and write docs/benchmarks.md: ``python -m bench.run_all`` (``make bench``).

Each benchmark runs in its own process (one SparkSession, one AIRFLOW_HOME
each); its full output goes to bench/results/<name>.log, its measurements to
bench/results/<name>.json, its progress lines to the console. Then
``bench.report`` renders docs/benchmarks.md from the JSON files.

    python -m bench.run_all                 # the full run (budget: 35 minutes on a 2-core machine)
    python -m bench.run_all --quick         # small sizes, results in $TMPDIR/conduit-bench-quick/, no doc
    python -m bench.run_all --only deferral_scale,recovery_reaction
    python -m bench.run_all --report-only   # re-render the doc from the last results
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, RESULTS_DIR, log, machine_facts, setup_environment

# name -> (module, full-run arguments, quick arguments); run in this order (the data path's first)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "error_handling": (
        "bench.error_handling",
        [],
        ["--records", "50000", "--per-file", "10000", "--tuned-files-per-batch", "2", "--reps", "2",
         "--warmup-records", "10000", "--driver-memory", "1g"],
    ),
    "wide_schema": (
        "bench.wide_schema",
        [],
        ["--widths", "25,100", "--jvm-defaults-at", "0", "--field-values", "400000", "--reps", "2", "--driver-memory", "1g"],
    ),
    "bookkeeping_cost": (
        "bench.bookkeeping_cost",
        [],
        ["--records", "50000", "--per-file", "10000", "--reps", "2", "--driver-memory", "1g"],
    ),
    "expectations_cost": (
        "bench.expectations_cost",
        ["--records", "200000", "--per-file", "50000"],
        ["--records", "20000", "--per-file", "10000", "--pairs", "2"],
    ),
    "soak": ("bench.soak", [], ["--batches", "20", "--warmup", "5", "--samples", "3"]),
    "small_run": ("bench.small_run", ["--runs", "2"], ["--runs", "1"]),
    "restart_cost": ("bench.restart_cost", [], ["--kills", "2", "--records", "60000"]),
    "recovery_reaction": ("bench.recovery_reaction", [], ["--polls", "1", "--restarts", "2"]),
    "deferral_scale": ("bench.deferral_scale", [], ["--ns", "10,50", "--reps", "2", "--poll", "2", "--workers", "2"]),
    "kafka_delta": (
        "bench.kafka_delta",
        [],
        ["--records", "20000", "--small-records", "20000", "--reps", "1", "--warmup-pairs", "0", "--latency-rate", "20",
         "--latency-seconds", "15", "--latency-warmup", "5"],
    ),
}
TIME_BUDGET_SECONDS = 35 * 60


def run_one(name: str, module: str, extra: list[str], results: Path, invocation: str) -> dict:
    """Run one benchmark process; stream its progress lines; return its exit code and wall time."""
    out = results / f"{name}.json"
    logfile = results / f"{name}.log"
    cmd = [sys.executable, "-m", module, "--out", str(out), *extra]
    log(f"== {name}: {' '.join(cmd[1:])}")
    started = time.time()
    with open(logfile, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(REPO))
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if line.startswith("["):  # the benchmark's own progress lines
                print("   " + line, end="", flush=True)
        code = proc.wait()
    wall = time.time() - started
    if code != 0:
        log(f"!! {name} failed (exit {code}); see {logfile}")
    else:
        log(f"== {name}: done in {wall:.0f}s")
    return {"exit_code": code, "seconds": wall, "command": " ".join(["python", "-m", module, *extra]), "log": str(logfile),
            "load_average_after": os.getloadavg(), "invocation": invocation,
            "finished_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for development; no doc unless --doc")
    parser.add_argument("--only", default=None, help="comma-separated benchmark names")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--note", default=None, help="a remark about this run, printed in the doc (e.g. other load)")
    parser.add_argument("--doc", default=None, help="where to write the doc (default docs/benchmarks.md; none in --quick)")
    args = parser.parse_args(argv)
    setup_environment()
    results = Path(tempfile.gettempdir()) / "conduit-bench-quick" if args.quick else RESULTS_DIR
    results.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    meta_path = results / "run.json"
    if not args.report_only:
        meta = json.loads(meta_path.read_text()) if (args.only and meta_path.exists()) else {"benchmarks": {}}
        meta["machine"] = machine_facts()
        meta["command"] = " ".join(["python -m bench.run_all", *(argv if argv is not None else sys.argv[1:])]).strip()
        started = time.time()
        invocation = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
        for name in names:
            module, full, quick = BENCHMARKS[name]
            meta["benchmarks"][name] = run_one(name, module, quick if args.quick else full, results, invocation)
            meta_path.write_text(json.dumps(meta, indent=2, default=str))
        meta["total_seconds"] = sum(b["seconds"] for b in meta["benchmarks"].values())
        meta["this_invocation_seconds"] = time.time() - started
        meta["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        meta_path.write_text(json.dumps(meta, indent=2, default=str))
        log(f"all done in {meta['this_invocation_seconds'] / 60:.1f} min (budget {TIME_BUDGET_SECONDS // 60} min)")
    if args.note is not None and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        meta["note"] = args.note
        meta_path.write_text(json.dumps(meta, indent=2, default=str))
    doc = args.doc or (None if args.quick else str(REPO / "docs" / "benchmarks.md"))
    if doc:
        from bench.report import render

        Path(doc).write_text(render(results), encoding="utf-8")
        log(f"wrote {doc}")
    failed = [n for n in names if not args.report_only and meta["benchmarks"][n]["exit_code"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
