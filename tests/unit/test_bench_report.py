"""The benchmark documents are rendered from the benchmarks' JSON results (bench/report.py), one complete run per
document: checked here on small hand-written results, without running Spark. The verdicts must follow the figures
(met, missed, not run), and a result without its run's metadata, or mixing figures of two runs, is refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import BEGIN, END, Refused, render
from bench.targets import MET, MISSED, NOT_RUN, Target, at

REPO = Path(__file__).resolve().parents[2]


def s(median, lo=None, hi=None, n=5):
    return {"median": median, "min": median if lo is None else lo, "max": median if hi is None else hi, "n": n}


def result(name, figures, finished="2026-01-02 10:00:00 UTC", run_id=None):
    run_id = run_id or f"{name}-1"
    run = {"benchmark": name, "id": run_id, "commit": "abc1234", "started_at": "2026-01-02 09:58:00 UTC", "finished_at": finished,
           "command": f"python -m bench.{name}", "machine": {"cpu": "test CPU", "cores": 2}, "load_average": {"end": [1.0, 1.5, 2.0]}}
    return {"run": run, "parts": {key: run_id for key in figures}, "figures": figures}


ERROR_HANDLING = {
    "records": 1000, "files": 10, "per_file": 100, "data_bytes": 100_000, "kinds": {"good": 990, "malformed": 10},
    "tuned_files_per_batch": 5, "batches": {"a": 1, "t": 2, "p": 1, "pt": 2},
    "seconds": {w: s(2.0) for w in ("a", "t", "p", "pt", "b", "c")}, "seconds_in_jobs": {}, "seconds_outside_jobs": {},
    "counts": {w: [{"written": 990, "bad": 10}] for w in ("a", "t", "p", "pt", "b", "c")},
    "ratio_a_p": s(1.10, 1.02, 1.40),  # median within 1.15: met, though one repetition is over
    "ratio_t_pt": s(1.45, 1.31, 1.50),  # over 1.3: missed
    "ratio_a_c": s(0.30),
    "fixed_cost_ms": s(120, 80, 170),
    "jobs_per_batch": {"with_bad": s(2.0, 2.0, 3.0), "without_bad": s(1.0)},  # one batch ran 3 jobs: missed
}
SMALL_RUN = {"command": "airflow-conduit run", "runs": [{}, {}], "wall_seconds": s(11.0, 10.5, 12.0),
             "phases": {"start-up": 6.0, "batches": 5.0}, "floor_wall_s": 9.5}


@pytest.fixture
def folders(tmp_path):
    results, docs = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    docs.mkdir()
    (docs / "benchmarks.md").write_text(f"# Benchmarks\n\nMethod, by hand.\n\n{BEGIN}\nold table\n{END}\n\n## 1. Method\n", encoding="utf-8")
    return results, docs


def write(results, name, data):
    (results / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")


def verdicts(markdown):
    """measure -> verdict, from the summary table."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.split(BEGIN, 1)[1].split(END, 1)[0].splitlines()
            if line.startswith("| ")]
    return {row[3]: row[6].strip("*") for row in rows[2:]}


@pytest.fixture
def rendered(folders):
    results, docs = folders
    write(results, "error_handling", result("error_handling", ERROR_HANDLING))
    write(results, "small_run", result("small_run", SMALL_RUN, finished="2026-01-01 08:00:00 UTC"))
    render(results, docs)
    return docs


def test_verdicts_follow_the_figures(rendered):
    v = verdicts((rendered / "benchmarks.md").read_text())
    assert v["1. a/p: runner ÷ streaming floor, default batch size"] == MET
    assert v["1. t/p: runner ÷ streaming floor, both with `max-files-per-trigger` (5 in `make bench`)"] == MISSED
    assert v["1. fixed cost per micro-batch over p (method in section 1)"] == MET
    assert v["1. a/c: runner ÷ Python UDF"] == MET
    assert v["1. Spark jobs per micro-batch with bad records"] == MISSED
    assert v["1. Spark jobs per micro-batch without bad records"] == MET
    assert v["6. small run: wall time over a plain PySpark script's"] == MET  # 11.0 - 9.5 = 1.5 s


def test_a_benchmark_without_a_result_is_not_run_and_gets_no_page(rendered):
    v = verdicts((rendered / "benchmarks.md").read_text())
    assert v["1b. a/p at 25 fields"] == NOT_RUN
    assert v["8. Kafka -> Delta: runner ÷ floor, default batch"] == NOT_RUN
    assert not (rendered / "benchmarks" / "wide_schema.md").exists()


def test_each_benchmark_gets_a_page_of_its_own_run_and_the_hand_written_text_stays(rendered):
    index = (rendered / "benchmarks.md").read_text()
    assert index.startswith("# Benchmarks\n\nMethod, by hand.") and index.endswith("## 1. Method\n") and "old table" not in index
    assert "| [small_run](benchmarks/small_run.md) | 2026-01-01 08:00:00 UTC | 1.0, 1.5, 2.0 |" in index
    first = (rendered / "benchmarks" / "error_handling.md").read_text()
    small = (rendered / "benchmarks" / "small_run.md").read_text()
    assert "| finished | 2026-01-02 10:00:00 UTC |" in first and "| commit | abc1234 |" in first
    assert "| finished | 2026-01-01 08:00:00 UTC |" in small
    assert "| a/p | 1.10 (1.02–1.40) |" in first and "| fixed cost over p: small batches, s − ps | 120 ms (80–170) |" in first
    assert "| plain PySpark script (SparkSession, read, write) | 9.5 s |" in small and "| start-up | 6.0 s | 55 % |" in small


def test_a_small_run_without_its_floor_is_not_judged(folders):
    results, docs = folders
    write(results, "small_run", result("small_run", {k: v for k, v in SMALL_RUN.items() if k != "floor_wall_s"}))
    render(results, docs)
    assert verdicts((docs / "benchmarks.md").read_text())["6. small run: wall time over a plain PySpark script's"] == NOT_RUN


def test_a_result_without_its_run_metadata_is_refused_and_nothing_is_written(folders):
    results, docs = folders
    write(results, "small_run", result("small_run", SMALL_RUN))
    write(results, "error_handling", ERROR_HANDLING)  # the figures alone, as results were written before runs were recorded
    with pytest.raises(Refused, match=r"error_handling\.json: no run metadata"):
        render(results, docs)
    assert not (docs / "benchmarks").exists() and "old table" in (docs / "benchmarks.md").read_text()
    (results / "error_handling.json").unlink()
    incomplete = result("small_run", SMALL_RUN)
    del incomplete["run"]["commit"]
    write(results, "small_run", incomplete)
    with pytest.raises(Refused, match=r"small_run\.json: its run metadata lacks commit"):
        render(results, docs)


def test_a_result_combining_figures_of_two_runs_is_refused(folders):
    results, docs = folders
    mixed = result("small_run", SMALL_RUN, run_id="small_run-2")
    mixed["parts"]["floor_wall_s"] = "small_run-1"  # the floor kept from an earlier run
    write(results, "small_run", mixed)
    with pytest.raises(Refused, match="combines figures of different runs .small_run-2 and small_run-1."):
        render(results, docs)
    write(results, "small_run", {**result("small_run", SMALL_RUN), "parts": {"wall_seconds": "small_run-1"}})
    with pytest.raises(Refused, match="do not match"):
        render(results, docs)


def test_the_command_refuses_with_one_line_naming_the_file(tmp_path):
    """`run_all --report-only` on a refused result: exit 1, one line on stderr, no traceback, the docs untouched."""
    copy = tmp_path / "repo"
    (copy / "bench" / "results").mkdir(parents=True)
    (copy / "docs").mkdir()
    for module in (REPO / "bench").glob("*.py"):
        (copy / "bench" / module.name).write_text(module.read_text(encoding="utf-8"), encoding="utf-8")
    (copy / "docs" / "benchmarks.md").write_text(f"{BEGIN}\n{END}\n", encoding="utf-8")
    (copy / "bench" / "results" / "soak.json").write_text(json.dumps({"batches": 200}), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--report-only"], cwd=copy, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(copy)}, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"error: {copy / 'bench' / 'results' / 'soak.json'}: no run metadata (key 'run'): re-run the benchmark"]
    assert not (copy / "docs" / "benchmarks").exists()


def test_an_equality_target_needs_every_repetition_and_a_missing_key_is_not_run():
    jobs = Target("jobs", "x", at("jobs"), "==", 2)
    assert jobs.judge({"jobs": s(2.0, 2.0, 2.0)})[1] == MET
    assert jobs.judge({"jobs": s(2.0, 1.0, 2.0)})[1] == MISSED
    assert jobs.judge({"other": 1})[1] == NOT_RUN
    assert jobs.judge(None)[1] == NOT_RUN
    worst = Target("overhead", "x", at("o"), "<=", 2.0, stat="max")
    assert worst.judge({"o": s(1.0, 0.9, 2.1)})[1] == MISSED
    assert worst.judge({"o": s(1.0, 0.9, 1.9)})[1] == MET


def test_the_committed_results_are_each_one_complete_run():
    """bench/results/ renders: every committed result carries its run and holds figures of that run only."""
    from bench.report import BENCHMARKS, load

    for name in BENCHMARKS:
        path = REPO / "bench" / "results" / f"{name}.json"
        if path.exists():
            assert load(path)["run"]["benchmark"] == name
