"""Assemble docs/benchmarks.md from the benchmarks' results (bench/results/<name>.json and run.json).

Each benchmark renders its own section from its result; this module adds, per section, the run it came from
(so results of different runs on one page show as such), the page's head and the Targets table, whose
verdicts bench/targets.py computes from the results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from bench import (bookkeeping_cost, deferral_scale, error_handling, expectations_cost, recovery_reaction, restart_cost, sections,
                   soak, wide_schema)
from bench.common import RESULTS_DIR, read_result
from bench.markdown import NOT_MEASURED, run_line, table
from bench.targets import TARGETS

# benchmark name -> (section title, renderer); in the page's order
SECTIONS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "error_handling": (error_handling.TITLE, error_handling.section),
    "wide_schema": (wide_schema.TITLE, wide_schema.section),
    "bookkeeping_cost": (bookkeeping_cost.TITLE, bookkeeping_cost.section),
    "recovery_reaction": (recovery_reaction.TITLE, recovery_reaction.section),
    "restart_cost": (restart_cost.TITLE, restart_cost.section),
    "deferral_scale": (deferral_scale.TITLE, deferral_scale.section),
    "soak": (soak.TITLE, soak.section),
    "small_run": (sections.SMALL_RUN_TITLE, sections.small_run_section),
    "expectations_cost": (expectations_cost.TITLE, expectations_cost.section),
    "kafka_delta": (sections.KAFKA_DELTA_TITLE, sections.kafka_delta_section),
}

HEAD = """# Benchmarks

<!-- Written by `make bench` (bench/run_all.py, bench/report.py). Do not edit by hand: re-run instead. -->

What error handling, recovery and deferral cost, side by side with plain Spark and plain Airflow. Reproduce with
**`make bench`** (`python -m bench.run_all`; `--only NAME,...` for some, `--quick` for a smoke check at small
sizes); not part of `make test`. Each benchmark runs in its own process; its raw measurements are in
`bench/results/<name>.json`, its output in `bench/results/<name>.log`.

**Method.** These machines are shared and noisy, so every figure that compares two ways is a ratio of runs made
in the same process, alternating (rotated order each repetition), at least 5 pairs, shown as
`median (min–max)`. Each section names the run it comes from (finish time, the machine's load after it, its
command): sections of different runs are not side by side measurements of each other. Why the data path is
built as it is: [architecture](architecture.md#the-data-path-one-pass-per-micro-batch).
"""


def _render_section(name: str, result: dict[str, Any] | None, run: dict[str, Any] | None) -> str:
    title, render = SECTIONS[name]
    if result is None:
        return f"## {title}\n\n{NOT_MEASURED}\n"
    try:
        text = render(result)
    except (KeyError, TypeError, IndexError) as exc:  # a result written by an older version of its benchmark
        return f"## {title}\n\n{run_line(run)}\n\nIts result lacks what this report reads ({exc!r}): re-run the benchmark.\n"
    heading, _, body = text.partition("\n\n")
    return f"{heading}\n\n{run_line(run)}\n\n{body}"


def _machine(meta: dict[str, Any]) -> str:
    m = meta.get("machine") or {}
    v = m.get("versions") or {}
    invocations = {b.get("invocation") or f"unrecorded {name}" for name, b in (meta.get("benchmarks") or {}).items()}
    mixed = (f"\n\n**The sections below come from {len(invocations)} different runs of `bench.run_all`** (or runs that did "
             "not record theirs): compare figures across sections with care." if len(invocations) > 1 else "")
    return (f"**Machine**: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB, {m.get('os', '?')}. "
            f"**Versions**: Python {m.get('python', '?')}, {m.get('java', '?')}, PySpark {v.get('pyspark', '?')}, "
            f"Apache Airflow {v.get('airflow', '?')}, airflow-conduit {v.get('airflow-conduit', '?')}.{mixed}"
            + (f"\n\n**Note**: {meta['note']}" if meta.get("note") else ""))


def targets_table(results: dict[str, dict[str, Any] | None], runs: dict[str, dict[str, Any]]) -> str:
    rows = []
    for target in TARGETS:
        value, verdict = target.judge(results.get(target.benchmark))
        finished = (runs.get(target.benchmark) or {}).get("finished_at", "–") if verdict != "not run" else "–"
        rows.append([target.measure, value, target.wanted, f"**{verdict}**", finished])
    return table(["measure", "result", "target", "verdict", "run finished"], rows)


def render(results_dir: Path = RESULTS_DIR) -> str:
    meta_path = results_dir / "run.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
    runs = meta.get("benchmarks") or {}
    results = {name: read_result(name, results_dir) for name in SECTIONS}
    parts = [HEAD, _machine(meta), "## Targets\n\n" + targets_table(results, runs)]
    parts += [_render_section(name, results[name], runs.get(name)) for name in SECTIONS]
    return "\n\n".join(p.strip() for p in parts) + "\n"


if __name__ == "__main__":
    print(render())
