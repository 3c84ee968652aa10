"""docs/benchmarks.md is rendered from the benchmarks' JSON results (bench/report.py): checked here on small
hand-written results, without running Spark. The verdicts must follow the figures: met, missed, or not run."""

import json

import pytest

from bench.report import render
from bench.targets import MET, MISSED, NOT_RUN, Target, at


def s(median, lo=None, hi=None, n=5):
    return {"median": median, "min": median if lo is None else lo, "max": median if hi is None else hi, "n": n}


def run(finished, invocation):
    return {"exit_code": 0, "seconds": 120.0, "command": "python -m bench.x", "load_average_after": [1.0, 1.5, 2.0],
            "finished_at": finished, "invocation": invocation}


ERROR_HANDLING = {
    "records": 1000, "files": 10, "per_file": 100, "data_bytes": 100_000, "kinds": {"good": 990, "malformed": 10},
    "runner": {"a": {"max_files_per_trigger": None}, "t": {"max_files_per_trigger": 5}},
    "batches": {"a": 1, "t": 2, "p": 1, "pt": 2},
    "seconds": {w: s(2.0) for w in ("a", "t", "p", "pt", "b", "c")},
    "counts": {w: [{"written": 990, "bad": 10}] for w in ("a", "t", "p", "pt", "b", "c")},
    "ratio_a_p": s(1.10, 1.02, 1.40),  # median within 1.15: met, though one repetition is over
    "ratio_t_pt": s(1.45, 1.31, 1.50),  # over 1.3: missed
    "ratio_a_c": s(0.30),
    "fixed_cost_ms": s(120, 80, 170),
    "jobs_per_batch": {"with_bad": s(2.0, 2.0, 3.0), "without_bad": s(1.0)},  # one batch ran 3 jobs: missed
}
SMALL_RUN = {"command": "airflow-conduit run", "runs": [{}, {}], "wall_seconds": s(11.0, 10.5, 12.0),
             "phases": {"start-up": 6.0, "batches": 5.0}, "floor_wall_s": 9.5}


def write_results(folder, results, runs):
    for name, result in results.items():
        (folder / f"{name}.json").write_text(json.dumps(result), encoding="utf-8")
    (folder / "run.json").write_text(json.dumps({"machine": {"cpu": "test CPU", "cores": 2}, "benchmarks": runs}), encoding="utf-8")


def verdicts(markdown):
    """measure -> verdict, from the Targets table."""
    table = markdown.split("## Targets", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| ")]
    return {row[0]: row[3].strip("*") for row in rows[1:]}


@pytest.fixture
def page(tmp_path):
    write_results(tmp_path, {"error_handling": ERROR_HANDLING, "small_run": SMALL_RUN},
                  {"error_handling": run("2026-01-02 10:00:00 UTC", "2026-01-02 09:00:00 UTC"),
                   "small_run": run("2026-01-01 08:00:00 UTC", "2026-01-01 07:00:00 UTC")})
    return render(tmp_path)


def test_verdicts_follow_the_figures(page):
    v = verdicts(page)
    assert v["1. a/p: runner ÷ streaming floor, default batch size"] == MET
    assert v["1. t/p: runner ÷ streaming floor, both with `max-files-per-trigger` (5 in `make bench`)"] == MISSED
    assert v["1. fixed cost per micro-batch over p (method in section 1)"] == MET
    assert v["1. a/c: runner ÷ Python UDF"] == MET
    assert v["1. Spark jobs per micro-batch with bad records"] == MISSED
    assert v["1. Spark jobs per micro-batch without bad records"] == MET
    assert v["6. small run: wall time over a plain PySpark script's"] == MET  # 11.0 - 9.5 = 1.5 s


def test_a_benchmark_without_a_result_is_not_run_and_its_section_says_so(page):
    v = verdicts(page)
    assert v["1b. a/p at 25 fields"] == NOT_RUN
    assert v["8. Kafka -> Delta: runner ÷ floor, default batch"] == NOT_RUN
    wide = page.split("## 1b. Wide records", 1)[1].split("\n## ", 1)[0]
    assert "Not measured in this run" in wide


def test_each_section_names_its_own_run_and_mixed_runs_are_flagged(page):
    first = page.split("## 1. Cost of error handling", 1)[1].split("\n## ", 1)[0]
    small = page.split("## 6. A small run", 1)[1].split("\n## ", 1)[0]
    assert "**Run**: finished 2026-01-02 10:00:00 UTC" in first
    assert "**Run**: finished 2026-01-01 08:00:00 UTC" in small
    assert "come from 2 different runs" in page
    assert "| a/p | 1.10 (1.02–1.40) |" in first and "| fixed cost over p (regression on batch count) | 120 ms (80–170) |" in first
    assert "| plain PySpark script (SparkSession, read, write) | 9.5 s |" in small and "| start-up | 6.0 s | 55 % |" in small


def test_a_small_run_without_its_floor_is_not_judged(tmp_path):
    write_results(tmp_path, {"small_run": {k: v for k, v in SMALL_RUN.items() if k != "floor_wall_s"}},
                  {"small_run": run("2026-01-01 08:00:00 UTC", "one")})
    page = render(tmp_path)
    assert verdicts(page)["6. small run: wall time over a plain PySpark script's"] == NOT_RUN
    assert "come from" not in page  # one run only


def test_an_equality_target_needs_every_repetition_and_a_missing_key_is_not_run():
    jobs = Target("jobs", "x", at("jobs"), "==", 2)
    assert jobs.judge({"jobs": s(2.0, 2.0, 2.0)})[1] == MET
    assert jobs.judge({"jobs": s(2.0, 1.0, 2.0)})[1] == MISSED
    assert jobs.judge({"other": 1})[1] == NOT_RUN
    assert jobs.judge(None)[1] == NOT_RUN
    worst = Target("overhead", "x", at("o"), "<=", 2.0, stat="max")
    assert worst.judge({"o": s(1.0, 0.9, 2.1)})[1] == MISSED
    assert worst.judge({"o": s(1.0, 0.9, 1.9)})[1] == MET
