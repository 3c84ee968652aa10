"""The sensors' triggers on real state directories: they fire on the change, not before."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.report import RunReport
from airflow_conduit.sensors.pipeline import DeadLetterQueueSensor, PipelineStateSensor
from airflow_conduit.triggers.state_dir import DeadLetterQueueTrigger, PipelineStateTrigger


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def report_with_batches(state_dir: Path, run_id: str, batches: list[tuple[datetime, int]]) -> None:
    report = RunReport(pipeline_id="p", run_id=run_id, started_at=iso(batches[0][0]), status="running")
    for batch_id, (at, dlq) in enumerate(batches):
        report.add_batch(batch_id, read=10, filtered=0, dlq=dlq, written={"out": 10 - dlq}, at=iso(at))
    report.write_atomic(state_dir / "runs" / run_id / "report.json")


async def test_pipeline_state_trigger_fires_when_the_state_is_reached(tmp_path):
    folder = StateDir(tmp_path)
    folder.write_recovery({"pipeline_state": "recovering"})
    trigger = PipelineStateTrigger(str(tmp_path), ["degraded"], poll_interval=0.1)
    pending = asyncio.ensure_future(anext(trigger.run()))
    await asyncio.sleep(0.5)
    assert not pending.done()  # recovering is not degraded
    folder.write_recovery({"pipeline_state": "degraded"})
    event = await asyncio.wait_for(pending, 5)
    assert event.payload == {"status": "reached", "pipeline_state": "degraded", "state_dir": str(tmp_path)}
    classpath, kwargs = trigger.serialize()
    assert PipelineStateTrigger(**kwargs).serialize() == (classpath, kwargs)


async def test_dlq_trigger_counts_only_batches_since_the_given_time(tmp_path):
    now = datetime.now(timezone.utc)
    report_with_batches(tmp_path, "old", [(now - timedelta(hours=3), 50)])  # before `since`: not counted
    report_with_batches(tmp_path, "new", [(now - timedelta(hours=2), 40), (now - timedelta(minutes=5), 3)])
    since = iso(now - timedelta(hours=1))
    assert StateDir(tmp_path).dlq_records_since(since) == 3
    trigger = DeadLetterQueueTrigger(str(tmp_path), threshold=5, since=since, poll_interval=0.1)
    pending = asyncio.ensure_future(anext(trigger.run()))
    await asyncio.sleep(0.5)
    assert not pending.done()  # 3 is not more than 5
    report_with_batches(tmp_path, "newer", [(now, 4)])
    event = await asyncio.wait_for(pending, 5)
    assert event.payload["dlq_records"] == 7 and event.payload["status"] == "exceeded"


def test_sensors_poke_and_validate(tmp_path):
    StateDir(tmp_path).write_recovery({"pipeline_state": "running"})
    assert PipelineStateSensor(task_id="s", state_dir=str(tmp_path), target_states=["running"]).poke({})
    assert not PipelineStateSensor(task_id="t", state_dir=str(tmp_path), target_states=["degraded"]).poke({})
    with pytest.raises(ValueError, match="unknown pipeline state"):
        PipelineStateSensor(task_id="u", state_dir=str(tmp_path), target_states=["broken"])
    report_with_batches(tmp_path, "r", [(datetime.now(timezone.utc), 2)])
    assert DeadLetterQueueSensor(task_id="d", state_dir=str(tmp_path), threshold=1).poke({})
    assert not DeadLetterQueueSensor(task_id="e", state_dir=str(tmp_path), threshold=2).poke({})
