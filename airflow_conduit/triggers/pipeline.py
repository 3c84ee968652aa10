"""The trigger that watches one run of a Spark pipeline job while the operator is deferred.

It only polls (launcher status + the run report the job writes) and never
submits: a triggerer restart that re-creates it from ``serialize()`` watches
the same job again and cannot start a second one. All I/O is non-blocking for
the event loop (HTTP through httpx.AsyncClient, files and the process table in
a worker thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_conduit.launchers.base import FAILED, RUNNING, SUCCEEDED, JobStatus, structured_failure, tail_text
from airflow_conduit.launchers.factory import launcher_for_handle
from airflow_conduit.pipeline.report import RunReport, totals_text

LOG_TAIL_CHARS = 4000
KILL_GRACE_SECONDS = 20.0


def report_summary(report: RunReport | None) -> dict[str, Any] | None:
    """The part of a run report that travels in the event (counts and times, no per-batch list)."""
    if report is None:
        return None
    return {
        "pipeline_id": report.pipeline_id,
        "status": report.status,
        "started_at": report.started_at,
        "ended_at": report.ended_at,
        "first_record_written_at": report.first_record_written_at,
        "last_progress_at": report.last_progress_at,
        "totals": report.totals,
        "counters": report.counters,
        "batches": len(report.batches),
    }


def progress_line(report: RunReport) -> str:
    return "running: " + totals_text(report.totals)


class SparkPipelineTrigger(BaseTrigger):
    """Wait for a pipeline job to finish and yield one event: its status, structured error and counts.

    :param handle: the launcher's job handle (JSON)
    :param poll_interval: seconds between two looks at the job
    :param report_progress: also yield (once) a ``running`` event as soon as the job has written a record
        end to end; the operator uses it to mark a recovering pipeline as recovered
    :param carry: opaque JSON echoed in the event (the operator's recovery state)
    """

    def __init__(
        self,
        handle: dict[str, Any],
        poll_interval: float = 5.0,
        report_progress: bool = False,
        carry: dict[str, Any] | None = None,
    ):
        super().__init__()
        self.handle = handle
        self.poll_interval = float(poll_interval)
        self.report_progress = bool(report_progress)
        self.carry = carry or {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "handle": self.handle,
                "poll_interval": self.poll_interval,
                "report_progress": self.report_progress,
                "carry": self.carry,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        launcher = launcher_for_handle(self.handle)
        run_id = self.handle["run_id"]
        last_line = None
        while True:
            status = await launcher.status_async(self.handle)
            report = await asyncio.to_thread(RunReport.read, self.handle["report_path"])
            if report is not None and report.last_progress_at:
                line = progress_line(report)
                if line != last_line:
                    self.log.info("%s %s", run_id, line)
                    last_line = line
            if status.finished:
                yield TriggerEvent(await self._final_event(status, report))
                return
            if self.report_progress and report is not None and report.first_record_written_at:
                yield TriggerEvent(self._event(RUNNING, status, report))
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The user marked the deferred task failed/success or cleared it: stop the Spark job.

        Gracefully first (SIGTERM to the local driver's process group: Spark stops; REST kill on a
        standalone master), forcefully when the graceful stop does not finish in time. A triggerer
        restart does not call this: the job keeps running and the re-created trigger watches it.
        """
        launcher = launcher_for_handle(self.handle)
        self.log.info("stopping run %s", self.handle["run_id"])
        try:
            await asyncio.wait_for(asyncio.to_thread(launcher.kill, self.handle, True), KILL_GRACE_SECONDS)
        except asyncio.TimeoutError:
            await asyncio.to_thread(launcher.kill, self.handle, False)

    def _event(self, state: str, status: JobStatus, report: RunReport | None, **more: Any) -> dict[str, Any]:
        return {
            "status": state,
            "run_id": self.handle["run_id"],
            "handle": self.handle,
            "exit_code": status.exit_code,
            "driver_state": status.driver_state,
            "message": status.message,
            "error": None,
            "stderr_tail": None,
            "report": report_summary(report),
            "carry": self.carry,
            **more,
        }

    async def _final_event(self, status: JobStatus, report: RunReport | None) -> dict[str, Any]:
        # A zero exit with a report that says failed is still a failure (the report is the job's own word).
        failed = status.state == FAILED or (report is not None and report.status == FAILED)
        if not failed:
            return self._event(SUCCEEDED, status, report)
        if status.state != FAILED:
            status = JobStatus(FAILED, status.exit_code, status.driver_state, status.message)
        log_text = await asyncio.to_thread(tail_text, self.handle.get("log_path"))
        error = structured_failure(status, report.error if report else None, log_text)
        self.log.info("%s failed: exit=%s driver_state=%s", self.handle["run_id"], status.exit_code, status.driver_state)
        return self._event(FAILED, status, report, error=error, stderr_tail=log_text[-LOG_TAIL_CHARS:])
