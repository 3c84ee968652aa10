"""Markdown pieces every benchmark section shares: tables, ``median (min–max)``, the line naming a section's run.

A section is rendered from its benchmark's JSON result alone (``section(result) -> str`` in each benchmark
module); ``bench.report`` adds the run it came from and assembles the page.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from bench.common import fmt, fmt_summary

NOT_MEASURED = "Not measured in this run (the benchmark failed or was not run; its log is next to its JSON result)."


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def spread(value: Any, digits: int = 2, unit: str = "") -> str:
    """A summary as ``median (min–max)`` (its median alone when all values agree), a number as itself, nothing
    as ``n/a``."""
    if isinstance(value, Mapping):
        if not value.get("n", 1):
            return "n/a"
        return fmt_summary(value, digits, unit) if value["min"] != value["max"] else f"{fmt(value['median'], digits)}{unit}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{fmt(float(value), digits)}{unit}"
    return "n/a" if value is None else str(value)


def section_text(title: str, about: str, *body: str) -> str:
    """A section: its title, the fixed paragraph saying what it measures and how, then its tables."""
    return "\n\n".join([f"## {title}", about.strip(), *[b.strip() for b in body if b and b.strip()]]) + "\n"


def run_line(run: Mapping[str, Any] | None) -> str:
    """Which run a section comes from: its own finish time, machine load, duration and command."""
    if not run:
        return "**Run**: not recorded (no entry in run.json)."
    load = run.get("load_average_after")
    status = "ok" if run.get("exit_code") == 0 else f"FAILED (exit {run.get('exit_code')})"
    return (f"**Run**: finished {run.get('finished_at', '?')}, {run.get('seconds', 0) / 60:.1f} min, {status}; "
            f"load average after (1, 5, 15 min) {', '.join(f'{x:.1f}' for x in load) if load else 'not recorded'}; "
            f"`{run.get('command', '?')}`.")
