"""Watching one run of a pipeline job: its status and its run report, polled until it ends.

The trigger (``triggers/pipeline.py``) yields what ``RunWatcher.events`` yields as its events, and
``airflow-conduit run`` watches its local runs with it directly: the same answers, and a CLI run that
loads no Airflow. Blips are survived: a status call is retried by the backend, and a round that still
fails is tolerated ``status_failures_tolerated`` times in a row; after that the run is unobservable
(a transient infrastructure error). All I/O is non-blocking for the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from airflow_conduit.hooks.backends.base import FAILED, JobHandle, JobStatus, structured_failure, tail_text
from airflow_conduit.hooks.backends.kinds import backend_for_handle
from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import StructuredError
from airflow_conduit.runs.events import WatchEvent
from airflow_conduit.runs.report import RunReport
from airflow_conduit.runs.status import RunStatus, WatchStatus
from airflow_conduit.runs.totals import totals_text

LOG_TAIL_CHARS = 4000
STATUS_FAILURES_TOLERATED = 3  # the default of the operator's status_failures_tolerated

log = logging.getLogger(__name__)


async def _nothing() -> None:
    return None


async def job_status(handle: JobHandle) -> JobStatus:
    """The job's status from its backend, rebuilt from the handle alone."""
    return await backend_for_handle(handle).status_async(handle)


def report_summary(report: RunReport | None) -> dict[str, Any] | None:
    """The part of a run report that travels in the event (counts and times, no per-batch list)."""
    if report is None:
        return None
    summary = {
        "pipeline_id": report.pipeline_id,
        "status": str(report.status),
        "started_at": report.started_at,
        "ended_at": report.ended_at,
        "first_record_written_at": report.first_record_written_at,
        "last_progress_at": report.last_progress_at,
        "totals": report.totals,
        "counters": report.counters,
        "batches": len(report.batches),
        "stop_reason": report.stop_reason,
    }
    by_batch = [{"batch_id": b["batch_id"], "expectations": b["expectations"]} for b in report.batches if b.get("expectations")]
    if by_batch:  # per-rule counts of each batch (the totals are in totals.expectations); the last 100 batches
        summary["expectations_by_batch"] = by_batch
    if report.replay is not None:  # a DLQ replay's totals
        summary["replay"] = report.replay
    return summary


def out_of_memory_error(log_text: str) -> dict[str, Any]:
    """The error of a driver JVM that ended with an OutOfMemoryError (Spark's exit code 52): fatal, with its cause."""
    from airflow_conduit.recovery.classify import OUT_OF_MEMORY_ADVICE

    match = re.search(r"java\.lang\.OutOfMemoryError[^\n]*", log_text or "")
    cause = match.group(0).strip() if match else "java.lang.OutOfMemoryError"
    return StructuredError(
        code=codes.OUT_OF_MEMORY, fatal=True, message=f"{cause}: {OUT_OF_MEMORY_ADVICE}",
        exception_class="java.lang.OutOfMemoryError", stage="runner",
        extra={"exit_code": codes.SPARK_EXIT_OOM, "classified_by": "exit code 52: the driver's JVM ran out of memory"},
    ).to_dict()


def progress_line(report: RunReport) -> str:
    return "running: " + totals_text(report.totals)


def _read_report(path: str) -> RunReport | None:
    try:
        return RunReport.read(path)
    except (OSError, ValueError):  # unreadable for a moment: the next round reads it again
        return None


def unobservable_error(run_id: str, exc: BaseException, rounds: int) -> dict[str, Any]:
    return StructuredError(
        code=codes.INFRASTRUCTURE,
        fatal=False,
        message=f"the watcher cannot observe run {run_id}: {rounds} status rounds failed, last: {type(exc).__name__}: {exc}",
        stage="watcher",
        extra={"unobservable": True},
    ).to_dict()


class RunWatcher:
    """Polls one run (``handle``) every ``poll_interval`` seconds until it ends.

    :param report_progress: also yield (once) a ``running`` event as soon as the job has written a record end to
        end, and stop there (the operator marks a recovering pipeline as recovered)
    :param status_failures_tolerated: watch rounds in a row whose status call failed before the run is unobservable
    :param log: where progress lines go (the trigger's own logger in a triggerer)
    :param before_the_end: awaited before the final event (a triggerer lets a deferral settle first)
    :param status: how the job's status is read (the trigger reads it through the hook)
    """

    def __init__(self, handle: JobHandle, *, poll_interval: float = 5.0, report_progress: bool = False,
                 status_failures_tolerated: int = STATUS_FAILURES_TOLERATED, log: logging.Logger | Any = log,
                 before_the_end: Callable[[], Awaitable[None]] = _nothing,
                 status: Callable[[JobHandle], Awaitable[JobStatus]] = job_status):
        self.handle = handle
        self.poll_interval = float(poll_interval)
        self.report_progress = bool(report_progress)
        self.status_failures_tolerated = int(status_failures_tolerated)
        self.log = log
        self.before_the_end = before_the_end
        self.status = status

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The watch's one event (a ``WatchEvent`` as a dict), or, with ``report_progress``, first a ``running`` one."""
        run_id = self.handle.run_id
        last_line = None
        failures = 0
        while True:
            try:
                status = await self.status(self.handle)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - any failure to observe is a blip until proven otherwise
                failures += 1
                self.log.warning("%s: status unavailable (%d of %d tolerated): %s", run_id, failures,
                                 self.status_failures_tolerated, exc)
                if failures > self.status_failures_tolerated:
                    report = await asyncio.to_thread(_read_report, self.handle.report_path)
                    status = JobStatus(FAILED, message=str(exc))
                    yield self._event(WatchStatus.FAILED, status, report, error=unobservable_error(run_id, exc, failures))
                    return
                await asyncio.sleep(self.poll_interval)
                continue
            report = await asyncio.to_thread(_read_report, self.handle.report_path)
            if report is not None and report.last_progress_at:
                line = progress_line(report)
                if line != last_line:
                    self.log.info("%s %s", run_id, line)
                    last_line = line
            if status.finished:
                await self.before_the_end()
                yield await self._final_event(status, report)
                return
            if self.report_progress and report is not None and report.first_record_written_at:
                yield self._event(WatchStatus.RUNNING, status, report)
                return
            await asyncio.sleep(self.poll_interval)

    def _event(self, state: WatchStatus, status: JobStatus, report: RunReport | None, **more: Any) -> dict[str, Any]:
        """The watch event (``runs.events.WatchEvent``), as the plain dict a trigger event carries."""
        event = WatchEvent(state, self.handle.run_id, handle=self.handle, exit_code=status.exit_code,
                           driver_state=status.driver_state, message=status.message or "",
                           report=report_summary(report), **more)
        return event.to_dict()

    async def _final_event(self, status: JobStatus, report: RunReport | None) -> dict[str, Any]:
        # A zero exit with a report that says failed is still a failure (the report is the job's own word).
        failed = status.state == FAILED or (report is not None and report.status == RunStatus.FAILED)
        stopped = report is not None and bool(report.stop_reason)
        if not failed:
            return self._event(WatchStatus.STOPPED if stopped else WatchStatus.SUCCEEDED, status, report)
        # asked to stop (SIGTERM) and ended by that signal: not a failure. A JVM that died of an OutOfMemoryError
        # (Spark's exit code 52) also ends its Python driver with SIGTERM: that is no stop.
        if stopped and report.error is None and status.exit_code != codes.SPARK_EXIT_OOM:
            return self._event(WatchStatus.STOPPED, status, report)
        if status.state != FAILED:
            status = JobStatus(FAILED, status.exit_code, status.driver_state, status.message)
        log_text = await asyncio.to_thread(tail_text, self.handle.log_path)
        log_path = self.handle.log_path
        if status.exit_code == codes.SPARK_EXIT_OOM:  # the cause, whatever the Python driver saw of the dying JVM
            error = out_of_memory_error(log_text)
        else:
            error = structured_failure(status, report.error if report else None, log_text,
                                       run_folder=os.path.dirname(log_path) if log_path else None)
        self.log.info("%s failed: exit=%s driver_state=%s", self.handle.run_id, status.exit_code, status.driver_state)
        return self._event(WatchStatus.FAILED, status, report, error=error, stderr_tail=log_text[-LOG_TAIL_CHARS:])
