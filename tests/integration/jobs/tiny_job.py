"""A tiny stand-in for the pipeline entry point: same arguments, same run report, same exit codes.

Used by the trigger and launcher tests, which are about watching a job, not about pipelines.
It runs with plain Python (trigger tests) or under spark-submit (launcher smoke test, --spark).
--faults: {"exit": 0|70|75, "sleep": seconds, "error": {...structured error...}, "progress": n,
           "transient_first_runs": N (exit 75 on the first N starts in this state dir),
           "stop_on_sigterm": true (like the real job: SIGTERM ends it cleanly, report stop_reason, exit 0),
           "orphan": PIDFILE (start a long-lived child, as the JVM starts the Python driver; its pid goes to PIDFILE)}
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--faults", default="{}")
    parser.add_argument("--spark", action="store_true")
    args = parser.parse_args()
    faults = json.loads(args.faults)
    report_path = Path(args.state_dir) / "runs" / args.run_id / "report.json"
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "pipeline_id": "tiny", "run_id": args.run_id, "status": "running", "started_at": now(), "ended_at": None,
        "last_progress_at": None, "first_record_written_at": None,
        "totals": {"read": 0, "filtered": 0, "dlq": 0, "written": {}}, "batches": [],
        "counters": {}, "error": None,
    }
    if faults.get("stop_on_sigterm"):
        def stop(signum, frame):
            report.update(status="stopped", ended_at=now(), stop_reason="signal SIGTERM")
            write(report_path, report)
            sys.exit(0)

        signal.signal(signal.SIGTERM, stop)
    # Count starts in the state dir, like the real job's fault counters (after the SIGTERM handler: a test
    # that saw the start can signal the job).
    starts = Path(args.state_dir) / "faults" / "tiny_job_starts"
    starts.parent.mkdir(parents=True, exist_ok=True)
    with open(starts, "a") as fh:
        fh.write(args.run_id + "\n")
    write(report_path, report)
    if faults.get("orphan"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(faults["orphan"]).write_text(str(child.pid))
    if args.spark:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("tiny").getOrCreate()
        n = spark.range(10).count()
        report["totals"]["read"] = n
        spark.stop()
    time.sleep(float(faults.get("sleep", 0)) / 2)
    progress = int(faults.get("progress", 0))
    if progress:
        report["totals"] = {"read": progress + 2, "filtered": 1, "dlq": 1, "written": {"out": progress}}
        report["first_record_written_at"] = report["last_progress_at"] = now()
        write(report_path, report)
    time.sleep(float(faults.get("sleep", 0)) / 2)
    code = int(faults.get("exit", 0))
    if len(starts.read_text().split()) <= int(faults.get("transient_first_runs", 0)):
        code = 75
    report["ended_at"] = now()
    report["status"] = "succeeded" if code == 0 else "failed"
    if code:
        error = faults.get("error") or {"code": 1500 if code == 75 else 2900, "fatal": code != 75,
                                         "message": f"tiny job asked to exit {code}"}
        report["error"] = error
        print("AIRFLOW_CONDUIT_ERROR " + json.dumps(error), file=sys.stderr)
    write(report_path, report)
    return code


if __name__ == "__main__":
    sys.exit(main())
