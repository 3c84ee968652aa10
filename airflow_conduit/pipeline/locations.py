"""Where a pipeline's records end up, as one line a user can follow (the CLI's summary, the operator's XCom)."""

from __future__ import annotations

from typing import Any


def dlq_location(spec: Any) -> str:
    """A link target for the spec's DLQ: file:// path for file DLQs, jdbc URL/table, kafka://servers/topic, or the log."""
    dlq = spec.dead_letter_queue
    settings = dict(dlq.settings or {})
    if dlq.plugin == "file" and settings.get("path"):
        path = str(settings["path"])
        return path if "://" in path else f"file://{path}"
    if dlq.plugin == "jdbc":
        return f"{settings.get('url', 'jdbc')}#{settings.get('table', '')}"
    if dlq.plugin == "kafka":
        servers = settings.get("servers") or f"connection:{settings.get('connection', '')}"
        return f"kafka://{servers}/{settings.get('topic', '')}"
    return "log: the Spark driver log (builtin:log DLQ)"
