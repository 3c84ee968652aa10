"""Thin timing subclasses of the operator and trigger for bench/recovery_reaction.py.

They record a timestamp and call the real method; behaviour is unchanged.
Imports airflow: import this module only after AIRFLOW_HOME is set.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from typing import Any

from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook
from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
from airflow_conduit.triggers.pipeline import SparkPipelineTrigger

EVENTS_ENV = "CONDUIT_BENCH_EVENTS"


def mark(name: str, **data: Any) -> None:
    """Append a timestamped event to the events file (one JSON object per line)."""
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": name, "t": time.time(), **data}, default=str) + "\n")


def epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


_aget_job_status = SparkPipelineHook.aget_job_status


async def _timed_aget_job_status(handle):
    """The trigger's status call, with a mark at each poll (to split detection into wait and reads)."""
    mark("poll", run_id=handle["run_id"])
    return await _aget_job_status(handle)


SparkPipelineHook.aget_job_status = staticmethod(_timed_aget_job_status)  # this benchmark's process only


class TimedPipelineTrigger(SparkPipelineTrigger):
    """SparkPipelineTrigger that records when it starts and when it yields its event."""

    async def run(self):
        mark("trigger_start", run_id=self.handle["run_id"])
        async for event in super().run():
            mark("trigger_event", run_id=self.handle["run_id"], status=event.payload.get("status"))
            yield event


class TimedPipelineOperator(RecoveringSparkPipelineOperator):
    """The operator with timestamps at each step of a restart."""

    def execute_complete(self, context, event=None, **kwargs):
        mark("execute_complete", run_id=(event or {}).get("run_id"), status=(event or {}).get("status"))
        return super().execute_complete(context, event, **kwargs)

    def resubmit(self, context, event=None, previous=None, **kwargs):
        mark("resubmit")
        return super().resubmit(context, event, previous=previous, **kwargs)

    def defer(self, *, trigger, method_name, kwargs=None, timeout=None):
        moment = getattr(trigger, "moment", None)
        if isinstance(trigger, SparkPipelineTrigger) and not isinstance(trigger, TimedPipelineTrigger):
            trigger = TimedPipelineTrigger(**trigger.serialize()[1])
        mark("defer", method=method_name, trigger=type(trigger).__name__,
             moment=moment.timestamp() if moment is not None else None)
        return super().defer(trigger=trigger, method_name=method_name, kwargs=kwargs, timeout=timeout)

    def get_hook(self):
        hook = super().get_hook()
        submit = hook.submit_job

        def timed_submit(*args, **kw):
            mark("submit_begin")
            handle = submit(*args, **kw)
            mark("submit_end", run_id=handle["run_id"], submitted_at=epoch(handle.get("submitted_at")))
            return handle

        hook.submit_job = timed_submit
        return hook
