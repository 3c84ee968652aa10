"""Server-rendered HTML for the views: plain HTML, one small stylesheet, inline SVG for the timeline.

Every value is escaped here (``_e``); the texts were already redacted by the caller.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable
from urllib.parse import quote, urlencode

from airflow_conduit.plugins.state_view import RunView, cut
from airflow_conduit.plugins.view import OverviewRow, PipelinePage, age_text
from airflow_conduit.recovery.clock import parse_iso
from airflow_conduit.recovery.durations import format_duration
from airflow_conduit.recovery.state import AuditEventType, PipelineState
from airflow_conduit.runs.handles import backend_of
from airflow_conduit.runs.status import RunStatus

STATE_COLORS = {"running": "#15803d", "recovering": "#b45309", "degraded": "#b91c1c", "stopped": "#4b5563"}
EVENT_COLORS = {
    "started": "#2563eb",
    "failed": "#dc2626",
    "restart-scheduled": "#d97706",
    "restarted": "#7c3aed",
    "recovered": "#16a34a",
    "backoff-reset": "#0d9488",
    "degraded": "#7f1d1d",
    "stopped": "#4b5563",
}
RUN_COLORS = {"succeeded": "#16a34a", "failed": "#dc2626", "running": "#2563eb", "starting": "#60a5fa"}

CSS = """
:root { color-scheme: light dark; --fg:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#ffffff; --soft:#f9fafb; }
@media (prefers-color-scheme: dark) { :root { --fg:#e5e7eb; --muted:#9ca3af; --line:#374151; --bg:#111827; --soft:#1f2937; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); margin: 16px 20px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 22px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.muted { color: var(--muted); } a { color: #2563eb; text-decoration: none; } a:hover { text-decoration: underline; }
.badge { display: inline-block; padding: 2px 10px; border-radius: 999px; color: #fff; font-weight: 600; font-size: 13px; text-transform: uppercase; letter-spacing: .03em; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 8px 12px; min-width: 150px; background: var(--soft); }
.card .k { font-size: 12px; color: var(--muted); } .card .v { font-size: 16px; font-weight: 600; }
table { border-collapse: collapse; width: 100%; margin: 6px 0; } th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; } td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.degraded td { background: rgba(220,38,38,.10); } tr.degraded td:first-child { border-left: 4px solid #b91c1c; }
.events { list-style: none; padding: 0; margin: 6px 0; } .events li { padding: 3px 0 3px 0; display: flex; gap: 8px; }
.dot { flex: none; width: 20px; height: 20px; border-radius: 50%; color: #fff; font-size: 11px; text-align: center; line-height: 20px; font-weight: 700; }
.ev { font-weight: 600; } code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
pre.log { background: var(--soft); border: 1px solid var(--line); padding: 10px; overflow: auto; max-height: 75vh; white-space: pre-wrap; word-break: break-all; }
.sample { font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; }
.note { border-left: 4px solid #d97706; padding: 6px 10px; background: rgba(217,119,6,.08); margin: 10px 0; }
.alert { border-left: 4px solid #b91c1c; padding: 6px 10px; background: rgba(220,38,38,.08); margin: 10px 0; }
svg text { fill: var(--fg); font-size: 11px; }
button { font: inherit; padding: 3px 10px; border-radius: 6px; border: 1px solid var(--line); background: var(--soft); color: var(--fg); cursor: pointer; }
button:disabled { opacity: .5; cursor: not-allowed; } button.primary { background: #2563eb; color: #fff; border-color: #2563eb; }
button.danger { background: #b91c1c; color: #fff; border-color: #b91c1c; }
.dlq-filters { display: flex; flex-wrap: wrap; gap: 8px; align-items: end; margin: 6px 0; } .dlq-filters label { font-size: 12px; color: var(--muted); display: flex; flex-direction: column; }
.dlq-filters select, .dlq-filters input { font: inherit; max-width: 260px; }
tr.dlq-record { cursor: pointer; } tr.dlq-record:hover td, tr.dlq-record.chosen td { background: rgba(37,99,235,.08); }
.record-detail { border: 1px solid var(--line); border-radius: 8px; padding: 8px 12px; margin: 8px 0; background: var(--soft); }
.record-detail pre { white-space: pre-wrap; word-break: break-all; max-height: 240px; overflow: auto; margin: 4px 0; }
.record-detail dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 4px 0; } .record-detail dt { color: var(--muted); font-size: 12px; }
.panel { border: 1px solid var(--line); border-radius: 8px; padding: 8px 12px; margin: 10px 0; }
.ok { color: #15803d; } .bad { color: #b91c1c; } .pager { display: flex; gap: 10px; align-items: center; margin: 6px 0; }
td.lag-cell { font-variant-numeric: tabular-nums; } .kafka-lag table { width: auto; } .kafka-lag td, .kafka-lag th { padding: 3px 14px; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _time(value: Any) -> str:
    at = value if isinstance(value, datetime) else parse_iso(value)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "—"


def web_url(value: Any) -> str | None:
    """``value`` when it is an http(s) URL (the live Spark UI), else None: nothing else becomes a link."""
    return value if isinstance(value, str) and value.startswith(("http://", "https://")) else None


def badge(state: str) -> str:
    color = STATE_COLORS.get(state, "#6b7280")
    return f'<span class="badge state-{_e(state)}" style="background:{color}">{_e(state)}</span>'


def layout(title: str, body: str, script: str | None = None) -> str:
    tag = f'<script src="{_e(script)}" defer></script>' if script else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style>{tag}</head>'
        f"<body>{body}</body></html>"
    )


@dataclass
class Actions:
    """What the user may do on a pipeline (decided by Airflow's auth manager; Airflow's REST API checks again)."""

    replay_dag: dict[str, Any] | None = None  # {"dag_id", "task_id", "params"}: where a replay is started
    can_trigger: bool = False
    can_stop: bool = False


class Links:
    """URLs of the plugin's pages and of Airflow's own UI (same origin, under the api-server's base path)."""

    def __init__(self, base_path: str, app_prefix: str):
        self.base = base_path.rstrip("/")
        self.app = self.base + app_prefix

    @staticmethod
    def _ti_query(task: Any, **extra: Any) -> str:
        query = {"dag_id": task.dag_id, "run_id": task.run_id, "task_id": task.task_id, "map_index": task.map_index, **extra}
        return urlencode(query)

    def ti_view(self, task: Any) -> str:
        return f"{self.app}/ti?{self._ti_query(task)}"

    def log(self, task: Any, run_id: str) -> str:
        return f"{self.app}/log?{self._ti_query(task, run=run_id)}"

    def dlq(self, task: Any) -> str:
        return f"{self.app}/dlq?{self._ti_query(task)}"

    def airflow_ti(self, task: Any) -> str:
        """The task instance's "Pipeline" tab inside Airflow's UI."""
        path = f"/dags/{quote(task.dag_id, safe='')}/runs/{quote(task.run_id, safe='')}/tasks/{quote(task.task_id, safe='')}"
        if task.map_index >= 0:
            path += f"/mapped/{task.map_index}"
        return f"{self.base}{path}/plugin/conduit-pipeline"

    def airflow_dag(self, dag_id: str) -> str:
        return f"{self.base}/dags/{quote(dag_id, safe='')}"

    def api(self, name: str, task: Any) -> str:
        """The plugin's JSON for one task instance (``dlq``, ``replay-preview``, ``lag``)."""
        return f"{self.app}/api/{name}?{self._ti_query(task)}"

    @property
    def rest(self) -> str:
        """Airflow's public REST API, where the page's actions go (with the user's session)."""
        return f"{self.base}/api/v2"

    def rest_ti(self, task: Any) -> str:
        path = (f"{self.rest}/dags/{quote(task.dag_id, safe='')}/dagRuns/{quote(task.run_id, safe='')}"
                f"/taskInstances/{quote(task.task_id, safe='')}")
        return path + (f"/{task.map_index}" if task.map_index >= 0 else "")


def _task_title(task: Any) -> str:
    mapped = f" [{task.map_index}]" if task.map_index >= 0 else ""
    return f"{task.dag_id} › {task.task_id}{mapped}"


# -- task instance view --------------------------------------------------------------------------


def not_a_pipeline(task_id: str) -> str:
    return layout("Pipeline", f'<p class="muted" id="not-a-pipeline">{_e(task_id)} is not a pipeline task: nothing to show here.</p>')


def _budget_cards(page: PipelinePage) -> str:
    cards = []
    b = page.budget
    run = page.current_run
    cards.append(("Current run", run.run_id if run else "—", "current-run"))
    cards.append(("Submission", f"#{run.submission}" if run and run.submission else (page.task.submissions or "—"), "submission"))
    if b is not None:
        limit = "unlimited" if b.max_retries < 0 else str(b.max_retries)
        cards.append(("Restarts in window" if b.windowed else "Restarts since reset", f"{b.used} of {limit}", "budget"))
        if b.windowed:
            cards.append(("Retry window", format_duration(b.window_seconds), "window"))
            frees = f"{_time(b.oldest_frees_at)} ({age_text(b.oldest_frees_at, page.now)})" if b.oldest_frees_at else "no slot held"
            cards.append(("Oldest slot frees", frees, "slot-frees"))
        else:
            cards.append(("Counted", b.counted, "window"))
        if b.next_restart_at is not None:
            cards.append(("Next restart", f"{_time(b.next_restart_at)} ({age_text(b.next_restart_at, page.now)})", "next-restart"))
    else:
        cards.append(("Retry budget", "not recorded", "budget"))
    return '<div class="cards">' + "".join(
        f'<div class="card" id="{i}"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>' for k, v, i in cards
    ) + "</div>"


def _event_detail(event: dict[str, Any]) -> str:
    d = event.get("details") or {}
    kind = event.get("event")
    if kind == AuditEventType.FAILED:
        c = d.get("classification") or {}
        return f"{'fatal' if c.get('fatal') else 'transient'}, code {c.get('code')}: {c.get('reason') or ''}"
    if kind == AuditEventType.RESTART_SCHEDULED:
        limit = "∞" if (d.get("max_retries") or 0) < 0 else d.get("max_retries")
        counted = d.get("restarts_counted", d.get("restarts_in_window"))  # the older name, in earlier audit logs
        return f"restart #{d.get('attempt')} in {format_duration(float(d.get('delay_seconds') or 0))} ({counted} of {limit} restarts counted)"
    if kind == AuditEventType.DEGRADED:
        return f"code {d.get('code')}"
    return ""


def timeline_svg(page: PipelinePage, width: int = 960) -> str:
    """Runs as bars, backoff waits as dashed amber spans, audit events as numbered dots above them."""
    events = [(parse_iso(e.get("at")), e) for e in page.audit]
    events = [(at, e) for at, e in events if at is not None]
    spans = []
    for run in page.runs:
        if run.report is None:
            continue
        start = parse_iso(run.report.started_at)
        end = parse_iso(run.report.ended_at) or (page.now if run.status in (RunStatus.STARTING, RunStatus.RUNNING) else parse_iso(run.report.last_progress_at))
        if start:
            spans.append((start, end or start, run))
    moments = [at for at, _ in events] + [s for s, _, _ in spans] + [e for _, e, _ in spans]
    if not moments:
        return '<p class="muted">No events recorded yet.</p>'
    t0, t1 = min(moments), max(moments + ([page.now] if page.live or page.state == PipelineState.RECOVERING else []))
    total = max((t1 - t0).total_seconds(), 1.0)
    left, right = 20, width - 20

    def x(at: datetime) -> float:
        return left + (right - left) * (at - t0).total_seconds() / total

    parts = [f'<svg id="timeline" role="img" aria-label="recovery timeline" viewBox="0 0 {width} 150" width="100%" preserveAspectRatio="xMinYMin meet">']
    parts.append(f'<line x1="{left}" y1="110" x2="{right}" y2="110" stroke="#9ca3af" stroke-width="1"/>')
    for start, end, run in spans:
        color = RUN_COLORS.get(run.status, "#9ca3af")
        w = max(x(end) - x(start), 3)
        parts.append(
            f'<rect class="run-bar" x="{x(start):.1f}" y="96" width="{w:.1f}" height="14" rx="3" fill="{color}">'
            f"<title>{_e(run.run_id)}: {_e(run.status)}</title></rect>"
        )
        parts.append(f'<text x="{x(start):.1f}" y="126">#{_e(run.submission)}</text>')
    for at, e in events:
        if e.get("event") == "restart-scheduled":
            until = parse_iso((e.get("details") or {}).get("restart_at"))
            if until:
                parts.append(
                    f'<line x1="{x(at):.1f}" y1="103" x2="{x(min(until, t1)):.1f}" y2="103" stroke="#d97706" stroke-width="3" stroke-dasharray="4 3"/>'
                )
    last_x, row = -100.0, 0
    for number, (at, e) in enumerate(events, 1):
        px = x(at)
        row = row + 1 if px - last_x < 16 and row < 3 else 0
        last_x = px
        cy = 78 - row * 22
        color = EVENT_COLORS.get(e.get("event"), "#6b7280")
        parts.append(f'<line x1="{px:.1f}" y1="{cy + 9}" x2="{px:.1f}" y2="96" stroke="{color}" stroke-width="1"/>')
        parts.append(
            f'<g class="tl-event" data-event="{_e(e.get("event"))}"><circle cx="{px:.1f}" cy="{cy}" r="9" fill="{color}"/>'
            f'<text x="{px:.1f}" y="{cy + 4}" text-anchor="middle" style="fill:#fff;font-weight:700">{number}</text>'
            f"<title>{_e(e.get('event'))} {_e(_time(at))}</title></g>"
        )
    parts.append(f'<text x="{left}" y="145">{_e(_time(t0))}</text>')
    parts.append(f'<text x="{right}" y="145" text-anchor="end">{_e(_time(t1))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _event_list(page: PipelinePage, redact: Callable[[Any], str]) -> str:
    items = []
    for number, e in enumerate(page.audit, 1):
        color = EVENT_COLORS.get(e.get("event"), "#6b7280")
        detail = _event_detail(e)
        items.append(
            f'<li class="event" data-event="{_e(e.get("event"))}"><span class="dot" style="background:{color}">{number}</span>'
            f'<span><span class="ev">{_e(e.get("event"))}</span> <span class="muted">{_e(_time(e.get("at")))}</span> → {_e(e.get("pipeline_state"))}<br>'
            f"{_e(redact(e.get('message')))}"
            + (f'<br><span class="muted">{_e(redact(detail))}</span>' if detail else "")
            + "</span></li>"
        )
    return '<ol class="events" id="events">' + "".join(items) + "</ol>" if items else '<p class="muted">No audit events.</p>'


def _runs_table(page: PipelinePage, links: Links, redact: Callable[[Any], str]) -> str:
    rows = []
    for run in reversed(page.runs):
        r = run.report
        totals = r.totals if r else {}
        written = ", ".join(f"{k}={v}" for k, v in (totals.get("written") or {}).items())
        error = ""
        if r and r.error:
            error = f"code {r.error.get('code')}: {cut(redact(r.error.get('message') or ''), 160)}"
        elif r and r.stop_reason:
            error = f"stopped: {r.stop_reason}"
        rows.append(
            f'<tr class="run" data-run="{_e(run.run_id)}"><td>#{_e(run.submission)}</td><td><code>{_e(run.run_id)}</code></td>'
            f'<td style="color:{RUN_COLORS.get(run.status, "inherit")}">{_e(run.status)}</td>'
            f"<td>{_e(_time(r.started_at if r else None))}</td><td>{_e(_time(r.ended_at if r else None))}</td>"
            f'<td class="n">{_e(totals.get("read", 0))}</td><td>{_e(written)}</td><td class="n">{_e(totals.get("filtered", 0))}</td>'
            f'<td class="n">{_e(totals.get("dlq", 0))}</td><td class="n">{_e(run.exit_code if run.exit_code is not None else "")}</td>'
            f'<td>{_e(error)}</td><td><a href="{_e(links.log(page.task, run.run_id))}">driver log</a></td></tr>'
        )
    if not rows:
        return '<p class="muted">No runs in the state directory.</p>'
    head = "<tr><th>#</th><th>run</th><th>status</th><th>started</th><th>ended</th><th class=n>read</th><th>written</th><th class=n>filtered</th><th class=n>DLQ</th><th class=n>exit</th><th>error</th><th></th></tr>"
    return f'<table id="runs">{head}{"".join(rows)}</table>'


def _batches_table(page: PipelinePage, limit: int = 50) -> str:
    if not page.batches:
        return '<p class="muted">No batches committed yet.</p>'
    dests = page.destinations
    head = "<tr><th>run</th><th class=n>batch</th><th>committed</th><th class=n>read</th>" + "".join(
        f"<th class=n>written → {_e(d)}</th>" for d in dests
    ) + "<th class=n>filtered</th><th class=n>DLQ</th></tr>"
    rows = []
    for b in page.batches[:limit]:
        cells = "".join(f'<td class="n">{_e(b["written"].get(d, 0))}</td>' for d in dests)
        rows.append(
            f'<tr class="batch"><td>#{_e(b.get("submission"))}</td><td class="n">{_e(b.get("batch_id"))}</td><td>{_e(_time(b.get("at")))}</td>'
            f'<td class="n">{_e(b.get("read", 0))}</td>{cells}<td class="n">{_e(b.get("filtered", 0))}</td><td class="n">{_e(b.get("dlq", 0))}</td></tr>'
        )
    more = f'<p class="muted">{len(page.batches) - limit} older batches not shown.</p>' if len(page.batches) > limit else ""
    return f'<table id="batches">{head}{"".join(rows)}</table>{more}'


def _rule_totals(page: PipelinePage) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (processor, rule): action, passed, failed, summed over the task instance's runs."""
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    for run in page.runs:
        for processor, rules in ((run.report.totals.get("expectations") or {}) if run.report else {}).items():
            for name, c in rules.items():
                t = totals.setdefault((processor, name), {"action": c.get("action"), "passed": 0, "failed": 0})
                t["passed"] += int(c.get("passed") or 0)
                t["failed"] += int(c.get("failed") or 0)
    return totals


def expectations_section(page: PipelinePage, limit: int = 50) -> str:
    """The expect processors' rules: passed / failed in total, then per batch (newest first); '' without rules."""
    totals = _rule_totals(page)
    if not totals:
        return ""
    rows = "".join(
        f'<tr class="rule"><td>{_e(proc)}</td><td>{_e(name)}</td><td>{_e(t["action"])}</td>'
        f'<td class="n">{_e(t["passed"])}</td><td class="n">{_e(t["failed"])}</td></tr>'
        for (proc, name), t in totals.items()
    )
    out = ["<h2>Expectations</h2>", '<table id="expectations"><tr><th>processor</th><th>rule</th><th>action</th>'
           f"<th class=n>passed</th><th class=n>failed</th></tr>{rows}</table>"]
    keys = list(totals)
    batches = [b for b in page.batches if b.get("expectations")][:limit]
    if batches:
        head = "<tr><th>run</th><th class=n>batch</th>" + "".join(
            f"<th class=n>{_e(name)}<br><span class=muted>passed / failed</span></th>" for _, name in keys) + "</tr>"
        body = []
        for b in batches:
            cells = []
            for proc, name in keys:
                c = (b["expectations"].get(proc) or {}).get(name)
                cells.append(f'<td class="n">{_e(c["passed"])} / {_e(c["failed"])}</td>' if c else '<td class="n">—</td>')
            body.append(f'<tr class="rule-batch"><td>#{_e(b.get("submission"))}</td><td class="n">{_e(b.get("batch_id"))}</td>'
                        f'{"".join(cells)}</tr>')
        out.append(f'<table id="expectation-batches">{head}{"".join(body)}</table>')
    return "".join(out)


def replays_section(page: PipelinePage) -> str:
    """DLQ replays run by this task instance (DeadLetterQueueReplayOperator): their totals; '' when none."""
    rows = []
    for run in reversed(page.runs):
        replay = run.report.replay if run.report else None
        if not replay:
            continue
        passing = ", ".join(f"{d}={n}" for d, n in sorted((replay.get("passing") or {}).items()))
        what = "dry run" if replay.get("dry_run") else (f"replay {replay.get('replay')}" if replay.get("replay") else "nothing to replay")
        rows.append(
            f'<tr class="replay"><td>#{_e(run.submission)}</td><td>{_e(what)}{" (resumed)" if replay.get("resumed") else ""}</td>'
            f'<td class="n">{_e(replay.get("batch_id") if replay.get("batch_id") is not None else "")}</td>'
            f'<td class="n">{_e(replay.get("replayed", 0))}</td><td class="n">{_e(replay.get("passed", 0))}</td><td>{_e(passing)}</td>'
            f'<td class="n">{_e(replay.get("still_failing", 0))}</td><td class="n">{_e(replay.get("skipped_already_replayed", 0))}</td></tr>'
        )
    if not rows:
        return ""
    head = ("<tr><th>run</th><th>replay</th><th class=n>batch</th><th class=n>replayed</th><th class=n>now passing</th>"
            "<th>written</th><th class=n>still failing</th><th class=n>skipped (already replayed)</th></tr>")
    return f'<h2>DLQ replay</h2><table id="replays">{head}{"".join(rows)}</table>'


def _counters_table(page: PipelinePage) -> str:
    runs = [r for r in page.runs if r.report is not None]
    if not runs:
        return '<p class="muted">No counters yet.</p>'
    names = [n for n in runs[-1].report.counters]
    head = "<tr><th>run</th>" + "".join(f"<th class=n>{_e(n)}</th>" for n in names) + "</tr>"
    rows = []
    for run in reversed(runs):
        cells = "".join(
            f'<td class="n">{_e(_time(v) if n == "last-failure-timestamp" and v else (v if v is not None else "—"))}</td>'
            for n, v in ((n, run.report.counters.get(n)) for n in names)
        )
        rows.append(f"<tr><td>#{_e(run.submission)}</td>{cells}</tr>")
    return f'<table id="counters">{head}{"".join(rows)}</table>'


def dlq_section(page: PipelinePage, links: Links | None = None) -> str:
    out = [f'<p class="muted">Location: <code>{_e(page.dlq_location or "unknown")}</code></p>']
    if not page.dlq_readable:
        total = sum(int((r.report.totals.get("dlq") if r.report else 0) or 0) for r in page.runs)
        out.append(f'<p id="dlq-total">{total} records sent to the DLQ by these runs (counts from the run reports; '
                   "the records themselves are shown for file, log and reachable Kafka DLQs).</p>")
        return "".join(out)
    more = " (scan stopped early: only the newest batches were read)" if page.dlq_scan_truncated else ""
    out.append(f'<p id="dlq-total">{page.dlq_total} records from these runs{_e(more)}.</p>')
    if not page.dlq_groups:
        return "".join(out)
    rows = []
    for g in page.dlq_groups:
        samples = "".join(
            f'<div class="sample">batch {_e(s["batch_id"])} · {_e(s["source"])}'
            + (f' · <span class="dlq-position">DLQ {_e(s["dlq_position"])}</span>' if s.get("dlq_position") else "")
            + f'<br>{_e(s["record"])}'
            + (f'<br><span class="muted">{_e(s["message"])}</span>' if s["message"] else "")
            + "</div>"
            for s in g.samples
        )
        rows.append(
            f'<tr class="dlq-group"><td>{_e(g.stage)}</td><td>{_e(g.component)}</td><td>{_e(g.error)}</td>'
            f'<td class="n">{g.count}</td><td>{samples}</td></tr>'
        )
    head = "<tr><th>stage</th><th>component</th><th>error</th><th class=n>records</th><th>samples (redacted, long values cut)</th></tr>"
    out.append(f'<table id="dlq">{head}{"".join(rows)}</table>')
    if links is not None:
        out.append(f'<p><a href="{_e(links.dlq(page.task))}">more DLQ samples</a></p>')
    return "".join(out)


def pipeline_view(page: PipelinePage, links: Links, redact: Callable[[Any], str], *, actions: Actions | None = None,
                  kafka: bool = False) -> str:
    task = page.task
    live = ""
    spark_ui = web_url(task.job.get("spark_ui"))
    if page.live and spark_ui:
        live = f' · <a id="spark-ui-live" href="{_e(spark_ui)}" target="_blank" rel="noopener">live Spark UI</a>'
    alert = ""
    if page.state == PipelineState.DEGRADED and page.last_error:
        le = page.last_error
        alert = (f'<div class="alert" id="degraded-reason"><b>Degraded</b>: {_e(le.kind)} error, code {_e(le.code)} — '
                 f"{_e(le.reason)}<br>{_e(cut(le.message, 400))}</div>")
    elif page.state == PipelineState.RECOVERING and page.budget and page.budget.next_restart_at:
        alert = f'<div class="note">Backing off: next restart {_e(age_text(page.budget.next_restart_at, page.now))}.</div>'
    body = (
        f'<h1>{_e(_task_title(task))} {badge(page.state)}</h1>'
        f'<div class="muted">Airflow run <code>{_e(task.run_id)}</code> · task state {_e(task.ti_state)} · try {_e(task.try_number)}'
        f' · state dir <code>{_e(str(task.state_dir) if task.state_dir else "unknown")}</code>{live}</div>'
        f"{alert}{stop_section(task, actions, links) if actions is not None else ''}{_budget_cards(page)}"
        f"<h2>Recovery timeline</h2>{timeline_svg(page)}{_event_list(page, redact)}"
        f"<h2>Runs</h2>{_runs_table(page, links, redact)}"
        f"{replays_section(page)}"
        f"<h2>Batches</h2>{_batches_table(page)}"
        f"{expectations_section(page)}"
        f"<h2>Error counters (KIP-298)</h2>{_counters_table(page)}"
        f"<h2>Dead letter queue</h2>{dlq_section(page, links)}"
    )
    if actions is not None:
        lag = f"<h2>Kafka lag</h2>{lag_panel(task, links)}" if kafka else ""
        body += f"{lag}<h2>Dead letter queue browser</h2>{dlq_browser(task, links, actions)}"
    return layout(f"Pipeline {task.task_id}", body, script=links.app + "/conduit.js" if actions is not None else None)


def dlq_page(page: PipelinePage, links: Links) -> str:
    body = (
        f'<p><a href="{_e(links.ti_view(page.task))}">← pipeline</a></p>'
        f"<h1>Dead letter queue: {_e(_task_title(page.task))}</h1>{dlq_section(page)}"
    )
    return layout("Dead letter queue", body)


def log_page(task: Any, run: RunView, text: str, truncated: bool, live_ui: str | None, links: Links) -> str:
    live = f'<p>The driver is running: <a id="spark-ui-live" href="{_e(live_ui)}" target="_blank" rel="noopener">open the live Spark UI</a></p>' if live_ui else ""
    master = web_url(task.job.get("spark_ui")) if backend_of(task.job) == "standalone" else None
    if not text and master:
        live += (f'<p class="note">This driver ran on the Spark cluster, which keeps its log on the worker: see it in the '
                 f'<a href="{_e(master)}" target="_blank" rel="noopener">master\'s UI</a> (completed drivers).</p>')
    cut_note = '<p class="muted">Only the end of the log is shown.</p>' if truncated else ""
    body = (
        f'<p><a href="{_e(links.ti_view(task))}">← pipeline</a></p>'
        f"<h1>Driver log: run #{_e(run.submission)} <code>{_e(run.run_id)}</code></h1>"
        f'<div class="muted">status {_e(run.status)} · exit code {_e(run.exit_code if run.exit_code is not None else "—")}</div>'
        f'{live}{cut_note}<pre class="log" id="driver-log">{_e(text) or "(empty)"}</pre>'
    )
    return layout(f"Driver log {run.run_id}", body)


# -- actions: the DLQ browser, the replay, the stop, the Kafka lag (filled in by conduit.js) ------------------

LIVE_TI_STATES = ("running", "deferred", "up_for_reschedule", "queued", "scheduled")


def _attrs(**values: Any) -> str:
    return " ".join(f'data-{k.replace("_", "-")}="{_e(v)}"' for k, v in values.items() if v is not None)


def dlq_browser(task: Any, links: Links, actions: Actions, *, hidden: bool = False) -> str:
    """The DLQ browser and the replay: filters, a page of records, one record's detail, preview and Start."""
    if actions.replay_dag is None:
        why = "this DAG has no DLQ replay task (DeadLetterQueueReplayOperator) to start"
    elif not actions.can_trigger:
        why = f"you may not trigger DAG {actions.replay_dag['dag_id']}"
    else:
        why = ""
    attrs = _attrs(dlq=links.api("dlq", task), preview=links.api("replay-preview", task), rest=links.rest,
                   can_trigger="1" if actions.can_trigger and actions.replay_dag else "0", why_not=why,
                   title=_task_title(task))
    start_title = f' title="{_e(why)}"' if why else ""
    return (
        f'<section class="panel dlq-browser" id="dlq-browser" {attrs}{" hidden" if hidden else ""}>'
        f'<div class="muted" id="dlq-for">{_e(_task_title(task))}</div>'
        '<form class="dlq-filters" id="dlq-filters">'
        '<label>stage<select name="stage"><option value="">any</option></select></label>'
        '<label>component<select name="component"><option value="">any</option></select></label>'
        '<label>error class<select name="error_class"><option value="">any</option></select></label>'
        '<label>since (UTC)<input name="since" size="22" placeholder="2026-01-01T00:00:00Z"></label>'
        '<label>until (UTC)<input name="until" size="22" placeholder="2026-01-02T00:00:00Z"></label>'
        '<button type="submit" id="dlq-apply">Apply</button></form>'
        '<p id="dlq-status" class="muted">Loading the dead letter queue…</p>'
        '<table id="dlq-records"></table>'
        '<div class="pager"><button type="button" id="dlq-prev" disabled>← newer</button><span id="dlq-range"></span>'
        '<button type="button" id="dlq-next" disabled>older →</button></div>'
        '<div id="dlq-detail"></div>'
        '<h3>Replay</h3><div class="replay">'
        '<button type="button" id="replay-preview">Preview replay</button> '
        '<label class="muted"><input type="checkbox" id="replay-force"> force (records whose spec is unchanged too)</label> '
        f'<button type="button" class="primary" id="replay-start" disabled{start_title}>Start replay</button>'
        f'<p class="muted" id="replay-why-not">{_e(why)}</p>'
        '<div id="replay-preview-result"></div><div id="replay-progress"></div></div>'
        '<h3>Replays</h3><div id="replay-history" class="muted">—</div>'
        "</section>"
    )


def stop_section(task: Any, actions: Actions, links: Links) -> str:
    """The graceful stop (the task marked success: the running batch completes, the state becomes stopped),
    behind a confirmation in the page; '' when the task is not live."""
    if str(task.ti_state) not in LIVE_TI_STATES:
        return ""
    why = "" if actions.can_stop else f"you may not change task instances of DAG {task.dag_id}"
    attrs = _attrs(ti=links.rest_ti(task), can_stop="1" if actions.can_stop else "0")
    disabled = "" if actions.can_stop else f' disabled title="{_e(why)}"'
    return (
        f'<div class="panel" id="stop" {attrs}><button type="button" class="danger" id="stop-ask"{disabled}>Stop pipeline…</button> '
        f'<span class="muted">{_e(why)}</span>'
        '<div id="stop-confirm" hidden><p>Stop this pipeline gracefully? The running batch completes, then the driver '
        'stops and the pipeline is <b>stopped</b> (the task is marked success). Start it again by clearing the task.</p>'
        '<button type="button" class="danger" id="stop-yes">Stop now</button> <button type="button" id="stop-no">Cancel</button></div>'
        '<p id="stop-result"></p></div>'
    )


def lag_panel(task: Any, links: Links) -> str:
    return (f'<div class="kafka-lag" {_attrs(lag=links.api("lag", task))}><p class="muted lag-status">Reading the Kafka '
            "offsets…</p></div>")


# -- overview --------------------------------------------------------------------------------------


def overview_table(rows: list[OverviewRow], links: Links, now: datetime, rights: dict | None = None,
                   kafka: set | None = None) -> str:
    if not rows:
        return '<p class="muted" id="no-pipelines">No pipeline has run in a DAG you can see.</p>'
    order = {"degraded": 0, "recovering": 1, "running": 2, "stopped": 3}
    rows = sorted(rows, key=lambda r: (order.get(r.state, 4), r.task.dag_id, r.task.task_id))
    out = []
    for r in rows:
        t = r.task
        err = ""
        if r.last_error:
            err = f'<b>{_e(r.last_error.kind)}</b> code {_e(r.last_error.code)}: {_e(cut(r.last_error.message, 140))}'
        lb = r.last_batch
        batch = (
            f"{_e(age_text(lb.get('at'), now))} · read {_e(lb.get('read', 0))}, "
            + ", ".join(f"{_e(k)}={_e(v)}" for k, v in (lb.get("written") or {}).items())
            + f", DLQ {_e(lb.get('dlq', 0))}"
            if lb
            else '<span class="muted">none</span>'
        )
        out.append(
            f'<tr class="pipeline {_e(r.state)}" data-dag="{_e(t.dag_id)}" data-task="{_e(t.task_id)}">'
            f'<td><a href="{_e(links.airflow_dag(t.dag_id))}" target="_top">{_e(t.dag_id)}</a></td>'
            f'<td><a href="{_e(links.airflow_ti(t))}" target="_top">{_e(t.task_id)}{_e(f" [{t.map_index}]" if t.map_index >= 0 else "")}</a></td>'
            f"<td>{badge(r.state)}</td><td>{err}</td><td class=\"n\">{r.dlq_24h}</td><td>{batch}</td>"
            f'<td class="muted">{_e(t.run_id)}<br>{_e(age_text(r.updated, now))}</td>'
            + (_row_actions(t, links, rights.get(id(t)) or Actions(), id(t) in (kafka or set())) if rights is not None else "")
            + "</tr>"
        )
        if rights is not None and id(t) in (kafka or set()):
            out.append(f'<tr class="lag-row" data-dag="{_e(t.dag_id)}"><td></td><td colspan="8">{lag_panel(t, links)}</td></tr>')
    actions_head = "<th>act</th>" if rights is not None else ""
    head = ("<tr><th>DAG</th><th>task</th><th>state</th><th>last error</th><th class=n>DLQ 24 h</th><th>last successful "
            f"batch</th><th>last run</th>{actions_head}</tr>")
    return f'<table id="pipelines">{head}{"".join(out)}</table>'


def _row_actions(task: Any, links: Links, actions: Actions, kafka: bool) -> str:
    why = ("" if actions.can_trigger else "this DAG has no DLQ replay task" if actions.replay_dag is None
           else f"you may not trigger DAG {task.dag_id}")
    attrs = _attrs(dlq=links.api("dlq", task), preview=links.api("replay-preview", task),
                   can_trigger="1" if actions.can_trigger else "0", why_not=why, title=_task_title(task))
    return f'<td><button type="button" class="open-dlq" {attrs}>DLQ</button></td>'


def overview_page(rows: list[OverviewRow], links: Links, now: datetime, title: str = "Pipelines", *,
                  rights: dict | None = None, kafka: set | None = None) -> str:
    degraded = sum(1 for r in rows if r.state == PipelineState.DEGRADED)
    note = f'<div class="alert" id="degraded-count">{degraded} degraded pipeline{"s" if degraded != 1 else ""}: restart needs a person.</div>' if degraded else ""
    body = f"<h1>{_e(title)}</h1>{note}{overview_table(rows, links, now, rights, kafka)}"
    if rights is None or not rows:
        return layout(title, body)
    browser = dlq_browser(rows[0].task, links, Actions(), hidden=True)
    body += f'<h2 id="dlq-heading" hidden>Dead letter queue</h2>{browser}'
    return layout(title, body, script=links.app + "/conduit.js")


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
