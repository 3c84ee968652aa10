"""Triggers for the sensors: they watch a pipeline's state directory (recovery.json, run reports).

Reads happen in a worker thread (asyncio.to_thread): the event loop never blocks on the file system.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_conduit.runs.state_dir import StateDir


class PipelineStateTrigger(BaseTrigger):
    """Fire once the pipeline in ``state_dir`` is in one of ``states`` (running, recovering, degraded, stopped)."""

    def __init__(self, state_dir: str, states: list[str], poll_interval: float = 10.0):
        super().__init__()
        self.state_dir = state_dir
        self.states = list(states)
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"state_dir": self.state_dir, "states": self.states, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        folder = StateDir(self.state_dir)
        while True:
            state = await asyncio.to_thread(folder.pipeline_state)
            if state in self.states:
                yield TriggerEvent({"status": "reached", "pipeline_state": str(state), "state_dir": self.state_dir})
                return
            await asyncio.sleep(self.poll_interval)


class DeadLetterQueueTrigger(BaseTrigger):
    """Fire once the pipeline's DLQ got more than ``threshold`` records since ``since`` (ISO-8601, None = ever)."""

    def __init__(self, state_dir: str, threshold: int, since: str | None = None, poll_interval: float = 30.0):
        super().__init__()
        self.state_dir = state_dir
        self.threshold = int(threshold)
        self.since = since
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"state_dir": self.state_dir, "threshold": self.threshold, "since": self.since, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        folder = StateDir(self.state_dir)
        while True:
            count = await asyncio.to_thread(folder.dlq_records_since, self.since)
            if count > self.threshold:
                yield TriggerEvent({"status": "exceeded", "dlq_records": count, "threshold": self.threshold, "since": self.since})
                return
            await asyncio.sleep(self.poll_interval)
