"""SDP's run events, read: a per-flow state timeline, the failed flow, the flows skipped downstream, the error chain.

The Connect server sends a run's events to the client as text only. Their pattern is stable:
``Flow <name> is QUEUED.`` / ``is STARTING.`` / ``is RUNNING.`` / ``is PLANNING.`` / ``has COMPLETED.``,
``Flow '<name>' has FAILED ...\\nError: ...``, ``Flow '<name>' SKIPPED due to upstream failure(s).``,
``Run is COMPLETED.``; a flow the graph's analysis refuses: ``Failed to resolve flow: '<name>'.\nError: ...``.
A failing streaming flow logs ``has COMPLETED`` before ``has FAILED``: a later
FAILED wins over an earlier COMPLETED, never the other way round. Pure Python (no pyspark).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

FLOW_EVENT = re.compile(r"^Flow '?(?P<flow>[^'\s]+)'? (?:is |has )?(?P<state>[A-Z_]+)\b")
RESOLVE_FAILED = re.compile(r"^Failed to resolve flow: '?(?P<flow>[^'\s]+?)'?\.?$")  # the graph's analysis refused it
RUN_EVENT = re.compile(r"^Run (?:is |has )?(?P<state>[A-Z_]+)\b")
FAILED, SKIPPED, COMPLETED = "FAILED", "SKIPPED", "COMPLETED"
_FINAL = (FAILED, SKIPPED, COMPLETED, "STOPPED", "IDLE", "EXCLUDED")
_NESTED = re.compile(r"\[(?P<condition>[A-Z][A-Z0-9_]{2,}(?:\.[A-Z0-9_]+)*)\] (?P<message>(?:(?!\[[A-Z][A-Z0-9_]{2,}[.\]]).)*?)"
                     r"\s*SQLSTATE: (?P<sqlstate>[0-9A-Z]{5})", re.DOTALL)
TIMELINE_LIMIT = 50  # states kept per flow (a long streaming run's RUNNING/IDLE cycles)


def short_name(flow: str) -> str:
    """``spark_catalog.default.orders`` -> ``orders``: how users name a flow in their code."""
    return flow.strip("`").rsplit(".", 1)[-1].strip("`")


@dataclass
class FlowState:
    """One flow's run: its states in order, the rows it wrote, its error when it failed."""

    name: str
    timeline: list[dict[str, str]] = field(default_factory=list)
    rows_written: int = 0
    batches: int = 0
    error: dict[str, Any] | None = None

    @property
    def state(self) -> str | None:
        """The final state: FAILED once seen wins over a COMPLETED logged before it."""
        states = [entry["state"] for entry in self.timeline]
        if FAILED in states:
            return FAILED
        return states[-1] if states else None

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "timeline": self.timeline[-TIMELINE_LIMIT:], "rows_written": self.rows_written,
                "batches": self.batches, "error": self.error}


@dataclass
class RunEvents:
    """What the run's events said so far; ``on_message`` takes each one as it arrives."""

    flows: dict[str, FlowState] = field(default_factory=dict)
    run_state: str | None = None
    messages: list[str] = field(default_factory=list)  # the flows' failure messages, in order

    def flow(self, name: str) -> FlowState:
        key = short_name(name)
        if key not in self.flows:
            self.flows[key] = FlowState(key)
        return self.flows[key]

    def on_message(self, message: str, at: str) -> str | None:
        """Record one event; the flow it was about (None for a run event or another message)."""
        first = message.splitlines()[0] if message else ""
        match = FLOW_EVENT.match(first)
        if match:
            flow = self.flow(match.group("flow"))
            flow.timeline.append({"state": match.group("state"), "at": at})
            if match.group("state") == FAILED:
                self.messages.append(message)
                flow.error = flow.error or {"message": _error_text(message), "chain": error_chain(message)}
            return flow.name
        match = RESOLVE_FAILED.match(first)
        if match:
            flow = self.flow(match.group("flow"))
            flow.timeline.append({"state": FAILED, "at": at})
            self.messages.append(message)
            flow.error = flow.error or {"message": _error_text(message), "chain": error_chain(message)}
            return flow.name
        match = RUN_EVENT.match(first)
        if match:
            self.run_state = match.group("state")
        return None

    def failed(self) -> list[str]:
        return [name for name, flow in self.flows.items() if flow.state == FAILED]

    def skipped(self) -> list[str]:
        return [name for name, flow in self.flows.items() if flow.state == SKIPPED]

    def unfinished(self) -> list[str]:
        """Flows queued that never reached a final state (a run that ended early)."""
        return [name for name, flow in self.flows.items() if flow.state not in _FINAL]

    def to_dict(self) -> dict[str, Any]:
        return {name: flow.to_dict() for name, flow in self.flows.items()}


def _error_text(message: str) -> str:
    _, _, error = message.partition("\nError: ")
    return (error or message).strip()[:2000]


def error_chain(text: str) -> list[dict[str, str | None]]:
    """The error conditions in ``text``, outermost first, each once: ``{condition, sqlstate, message}``.

    Spark nests a cause's ``[CONDITION] message SQLSTATE: X`` inside the wrapper's message
    (``[STREAM_FAILED] ... terminated with exception: [FAILED_READ_FILE.NO_HINT] ...``) and in ``Caused by:`` lines.
    """
    chain: list[dict[str, str | None]] = []
    seen: set[str] = set()
    for match in _NESTED.finditer(text or ""):
        condition = match.group("condition")
        if condition in seen:
            continue
        seen.add(condition)
        chain.append({"condition": condition, "sqlstate": match.group("sqlstate"),
                      "message": " ".join(match.group("message").split())[:500]})
    return chain
