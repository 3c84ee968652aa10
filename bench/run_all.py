"""Run the benchmarks, each in its own process, then render their documents (``make bench``).

    python -m bench.run_all                 # every benchmark, results in bench/results/, documents in docs/
    python -m bench.run_all --quick         # small sizes, results in $TMPDIR/conduit-bench-quick/, no documents
    python -m bench.run_all --only soak,small_run
    python -m bench.run_all --report-only   # re-render the documents from bench/results/
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, RESULTS_DIR, log, setup_environment
from bench.report import BENCHMARKS, Refused, render

QUICK = {
    "error_handling": "--records 50000 --per-file 10000 --tuned-files-per-batch 2 --reps 2 --driver-memory 1g --small-files 4 --small-per-file 2000",
    "wide_schema": "--widths 25,100 --jvm-defaults-at 0 --field-values 400000 --reps 2 --driver-memory 1g",
    "expectations_cost": "--records 20000 --per-file 10000 --pairs 2",
    "soak": "--batches 20 --warmup 5 --samples 3",
    "small_run": "--runs 1",
    "restart_cost": "--kills 2 --records 60000",
    "recovery_reaction": "--polls 1 --restarts 2",
    "deferral_scale": "--ns 10,50 --reps 2 --poll 2 --workers 2",
    "lineage_volume": "--batches 100 --per-batch 100 --reps 1 --warmup 0",
    "kafka_delta": "--records 20000 --small-records 20000 --reps 1 --warmup-pairs 0 --latency-rate 20 --latency-seconds 15 --latency-warmup 5",
}


def run_one(name: str, args: list[str], results: Path) -> int:
    """One benchmark process; its output to <name>.log, its progress lines (``[hh:mm:ss] ...``) to the console."""
    cmd = [sys.executable, "-m", f"bench.{name}", "--out", str(results / f"{name}.json"), *args]
    log(f"== {name}: {' '.join(cmd[1:])}")
    started = time.time()
    with open(results / f"{name}.log", "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(REPO))
        for line in proc.stdout or []:
            fh.write(line)
            if line.startswith("["):
                print("   " + line, end="", flush=True)
        code = proc.wait()
    log(f"== {name}: {'done' if code == 0 else f'FAILED (exit {code}), see its log'} in {time.time() - started:.0f} s")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke check; results in $TMPDIR, no documents")
    parser.add_argument("--only", default=None, help="comma-separated benchmark names")
    parser.add_argument("--report-only", action="store_true", help="only re-render the documents from bench/results/")
    parser.add_argument("--note", default="", help="a remark recorded with each run and shown on its page (e.g. other load)")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    if unknown := [n for n in names if n not in BENCHMARKS]:
        parser.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    results = Path(tempfile.gettempdir()) / "conduit-bench-quick" if args.quick else RESULTS_DIR
    results.mkdir(parents=True, exist_ok=True)
    failed = []
    if not args.report_only:
        setup_environment()
        os.environ["CONDUIT_BENCH_NOTE"] = args.note
        failed = [n for n in names if run_one(n, (QUICK.get(n, "") if args.quick else "").split(), results) != 0]
    docs = Path(tempfile.mkdtemp(prefix="conduit-bench-docs-")) if args.quick else REPO / "docs"
    if args.quick:
        shutil.copy(REPO / "docs" / "benchmarks.md", docs)
    try:
        for path in render(results, docs):
            log(f"wrote {path}")
    except Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
