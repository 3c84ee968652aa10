"""Render the benchmark documents from bench/results/<name>.json: docs/benchmarks/<name>.md, one per benchmark, each from
exactly one complete run, and the summary table in docs/benchmarks.md. A result without its run's metadata, or one that
combines figures of different runs, is refused."""

import importlib
import json
import re
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS_DIR, RUN_KEYS, table
from bench.targets import TARGETS

BENCHMARKS = ("error_handling", "wide_schema", "recovery_reaction", "restart_cost", "deferral_scale", "soak",
              "small_run", "expectations_cost", "kafka_delta", "lineage_volume")
DOCS = REPO / "docs"
BEGIN, END = "<!-- summary: rendered by python -m bench.run_all --report-only -->", "<!-- end of summary -->"


class Refused(Exception):
    """A results file that is not one complete run of one benchmark."""


def load(path: Path) -> dict[str, Any]:
    """The result at ``path``, checked: its run's metadata complete, every figure from that run."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refused(f"{path}: not readable as JSON ({exc})") from None
    run = data.get("run") if isinstance(data, dict) else None
    if not isinstance(run, dict):
        raise Refused(f"{path}: no run metadata (key 'run'): re-run the benchmark")
    missing = [key for key in RUN_KEYS if key not in run]
    if missing:
        raise Refused(f"{path}: its run metadata lacks {', '.join(missing)}")
    if run["benchmark"] != path.stem:
        raise Refused(f"{path}: holds a run of {run['benchmark']!r}, not of {path.stem!r}")
    figures, parts = data.get("figures"), data.get("parts")
    if not isinstance(figures, dict) or not isinstance(parts, dict) or set(parts) != set(figures):
        raise Refused(f"{path}: its figures and their runs ('parts') do not match")
    others = sorted({str(r) for r in parts.values()} - {run["id"]})
    if others:
        raise Refused(f"{path}: combines figures of different runs ({run['id']} and {', '.join(others)}); one run per document")
    return data


def slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def load_line(run: dict[str, Any]) -> str:
    end = (run["load_average"] or {}).get("end")
    return ", ".join(f"{x:.1f}" for x in end) if end else "not recorded"


def page(name: str, data: dict[str, Any]) -> str:
    module, run, figures = importlib.import_module(f"bench.{name}"), data["run"], data["figures"]
    m = run["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items())
    facts = [f"# {module.TITLE}", f"<!-- Rendered from bench/results/{name}.json by `python -m bench.run_all --report-only`: re-run, do not edit. -->",
             f"Method: [benchmarks](../benchmarks.md#{slug(module.TITLE)}).",
             table(["run", ""], [["command", f"`{run['command']}`"], ["commit", run["commit"]], ["started", run["started_at"]],
                                 ["finished", run["finished_at"]], ["load average at the end (1, 5, 15 min)", load_line(run)],
                                 ["machine", f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB, {m.get('os', '?')}"],
                                 ["versions", f"Python {m.get('python', '?')}, {m.get('java', '?')}, {versions}"],
                                 *([["note", run["note"]]] if run.get("note") else [])])]
    judged = [[t.measure, *t.judge(figures)[:1], t.wanted, f"**{t.judge(figures)[1]}**"] for t in TARGETS if t.benchmark == name]
    if judged:
        facts.append(table(["target", "result", "wanted", "verdict"], judged))
    return "\n\n".join([*facts, *module.tables(figures)]) + "\n"


def summary(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name in BENCHMARKS:
        data = results.get(name)
        targets = [t for t in TARGETS if t.benchmark == name] or [None]
        for target in targets:
            value, verdict = target.judge(data and data["figures"]) if target else ("", "")
            run = (f"[{name}](benchmarks/{name}.md)", data["run"]["finished_at"], load_line(data["run"])) if data else (name, "not run", "")
            rows.append([*run, target.measure if target else "–", value, target.wanted if target else "", f"**{verdict}**" if verdict else ""])
    return table(["benchmark", "run finished", "load at the end", "target", "result", "wanted", "verdict"], rows)


def render(results_dir: Path = RESULTS_DIR, docs: Path = DOCS) -> list[Path]:
    """Every document, from the results in ``results_dir``; nothing is written if a result is refused."""
    results = {name: load(results_dir / f"{name}.json") for name in BENCHMARKS if (results_dir / f"{name}.json").exists()}
    (docs / "benchmarks").mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in results.items():
        (docs / "benchmarks" / f"{name}.md").write_text(page(name, data), encoding="utf-8")
        written.append(docs / "benchmarks" / f"{name}.md")
    index = docs / "benchmarks.md"
    text = index.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise Refused(f"{index}: lacks the summary markers {BEGIN} ... {END}")
    head, rest = text.split(BEGIN, 1)
    index.write_text(f"{head}{BEGIN}\n\n{summary(results)}\n\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")
    return [*written, index]
