"""The trigger that watches one run of a Spark pipeline job while the operator is deferred.

It only polls (the hook's job status + the run report the job writes, through ``hooks/backends/watch.py``'s
``RunWatcher``, which ``airflow-conduit run`` uses too) and never
submits: a triggerer restart that re-creates it from ``serialize()`` watches
the same job again and cannot start a second one. Its kwargs are ids and paths
(the job handle): the recovery state lives in the task state store and
``STATE_DIR/recovery.json``, not here.

It survives blips: a status call is retried by the backend (tenacity), and a
watch round that still fails is tolerated ``status_failures_tolerated`` times in
a row (an operator argument, default 3); after that the job is unobservable, and the trigger says so with a
transient infrastructure error that goes through the recovery engine like any
failure (before the next submission the hook makes sure the old driver is gone).

All I/O is non-blocking for the event loop (HTTP through httpx.AsyncClient,
files and the process table in a worker thread).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_conduit.compat import StrEnum
from airflow_conduit.hooks.backends.watch import STATUS_FAILURES_TOLERATED, RunWatcher, report_summary  # noqa: F401 - report_summary: importable here too
from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook
from airflow_conduit.recovery.clock import parse_iso
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.runs.store import record_stopped

KILL_GRACE_SECONDS = 20.0  # below the triggerer's on_kill bound ([triggerer] on_kill_timeout, 30 s)
SCHEDULER_LOOP_MARGIN_SECONDS = 5.0


def deferral_settle_seconds() -> float:
    """How long after its submission a run's end is held back in a triggerer before the trigger reports it.

    The worker that submitted and deferred can be reported finished only a heartbeat interval later
    (``[workers] min_heartbeat_interval``). A trigger event within that time let the scheduler mark the task failed on the
    deferral's late "success" (apache/airflow#67287, #72716: Airflow 3.3.2 forgives it only while the
    task is still scheduled). The margin covers the scheduler's loop. A Spark job rarely ends this early;
    one that does (a refused submission, a failure at start) is reported a few seconds later.
    """
    from airflow.configuration import conf

    return conf.getfloat("workers", "min_heartbeat_interval", fallback=5.0) + SCHEDULER_LOOP_MARGIN_SECONDS


def settle_wait(submitted_at: str | None, now: float, settle: float) -> float:
    """Seconds still to wait before reporting the end of a run submitted at ``submitted_at`` (ISO-8601)."""
    try:
        submitted = parse_iso(submitted_at)
    except ValueError:
        return 0.0
    if submitted is None:
        return 0.0
    return max(0.0, min(settle, submitted.timestamp() + settle - now))


# Stops started by on_kill that outlived it (see run_to_completion): strong references, or the event
# loop could garbage-collect them half-way.
_STOPS_IN_FLIGHT: set[asyncio.Future] = set()


async def run_to_completion(work: Any) -> None:
    """Await ``work`` (a coroutine) so that cancelling the caller does not cancel it.

    Airflow 3.3's triggerer cancels a trigger on every sync with its supervisor until the trigger has
    finished, so a second cancellation lands in ``on_kill`` while it runs (``asyncio.wait_for`` passes
    it on), and ``on_kill`` also has a time bound ([triggerer] on_kill_timeout). Observed on a real
    deployment: a user's "mark success" reached ``on_kill``, the second cancel cut it short while it
    read the task state, and the Spark job kept running. The work runs in a task of its own, shielded:
    the caller may be cancelled, the stop finishes in the triggerer's event loop.
    """
    task = asyncio.ensure_future(work)
    _STOPS_IN_FLIGHT.add(task)
    task.add_done_callback(_STOPS_IN_FLIGHT.discard)
    await asyncio.shield(task)


class CancelVerdict(StrEnum):
    """What a cancelled trigger's ``on_kill`` concludes from the task's state."""

    MOVED = "moved"  # the task is still deferred: the trigger was moved to another triggerer
    UNKNOWN = "unknown"  # the task state could not be read
    USER_STOP = "user-stop"  # the user marked or cleared the task


class SparkPipelineTrigger(BaseTrigger):
    """Wait for a pipeline job to finish and yield one event: its status, structured error and counts.

    :param handle: the job (ids and paths: run id, state dir, pid or driver id, report path), or its dict form
        (``JobHandle.to_dict()``, as ``serialize`` writes it; a handle of an earlier version is read too)
    :param poll_interval: seconds between two looks at the job
    :param report_progress: also yield (once) a ``running`` event as soon as the job has written a record
        end to end; the operator uses it to mark a recovering pipeline as recovered
    :param status_failures_tolerated: watch rounds in a row whose status call failed (after the backend's own
        retries) before the run counts as unobservable: a transient failure the recovery engine handles
    """

    def __init__(self, handle: JobHandle | dict[str, Any], poll_interval: float = 5.0, report_progress: bool = False,
                 status_failures_tolerated: int = STATUS_FAILURES_TOLERATED):
        super().__init__()
        self.handle = JobHandle.from_dict(handle)
        self.poll_interval = float(poll_interval)
        self.report_progress = bool(report_progress)
        self.status_failures_tolerated = int(status_failures_tolerated)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"handle": self.handle.to_dict(), "poll_interval": self.poll_interval, "report_progress": self.report_progress,
             "status_failures_tolerated": self.status_failures_tolerated},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        watcher = RunWatcher(self.handle, poll_interval=self.poll_interval, report_progress=self.report_progress,
                             status_failures_tolerated=self.status_failures_tolerated, log=self.log,
                             before_the_end=self._let_the_deferral_settle, status=SparkPipelineHook.aget_job_status)
        async for payload in watcher.events():
            yield TriggerEvent(payload)

    async def _let_the_deferral_settle(self) -> None:
        """In a triggerer, report a run that ended right after its submission only once the worker's deferral
        has surely reached the scheduler (``deferral_settle_seconds``). Outside one (``dag.test()``, the CLI:
        no ``task_instance``) there is no executor to race."""
        if getattr(self, "task_instance", None) is None:
            return
        wait = settle_wait(self.handle.submitted_at, time.time(), deferral_settle_seconds())
        if wait > 0:
            self.log.info("run %s ended right after its submission: reported in %.1f s, once the worker's deferral "
                          "has reached the scheduler (apache/airflow#67287)", self.handle.run_id, wait)
            await asyncio.sleep(wait)

    async def on_kill(self) -> None:
        """The user marked the deferred task failed/success or cleared it: stop the Spark job, record ``stopped``.

        Gracefully first (SIGTERM to the local driver's process group: Spark stops; REST kill on a
        standalone master), forcefully when the graceful stop does not finish in time.

        Airflow 3.3 also calls ``on_kill`` when the trigger is moved to another triggerer (a trigger no
        longer assigned to this one is cancelled like a user action: apache/airflow#73454). A move must
        never stop the job, so the task's state decides: still ``deferred`` means the trigger was moved
        (the other triggerer watches the same job); anything else means the user acted.

        The work runs to completion even when ``on_kill`` itself is cancelled (``run_to_completion``).
        """
        await run_to_completion(self._stop_unless_moved())

    async def _stop_unless_moved(self) -> None:
        run_id = self.handle.run_id
        verdict = await self._task_state_after_cancel()
        if verdict is CancelVerdict.MOVED:
            self.log.info("run %s: trigger moved to another triggerer; the job keeps running", run_id)
            return
        if verdict is CancelVerdict.UNKNOWN:
            self.log.warning("run %s: cannot tell a user stop from a trigger move (task state unreadable): the job "
                             "keeps running; mark the task again to stop it", run_id)
            return
        self.log.info("stopping run %s", run_id)
        try:
            await asyncio.wait_for(asyncio.to_thread(SparkPipelineHook.kill_job, self.handle, True), KILL_GRACE_SECONDS)
        except asyncio.TimeoutError:
            await asyncio.to_thread(SparkPipelineHook.kill_job, self.handle, False)
        finally:
            await asyncio.to_thread(record_stopped, self.handle.state_dir, run_id, "stopped by user (task marked or cleared)")

    async def _task_state_after_cancel(self) -> "CancelVerdict":
        """``MOVED`` (the task is still deferred), ``UNKNOWN`` (unreadable), or ``USER_STOP`` (the user acted;
        also when no task instance is attached: a trigger driven outside a triggerer, as in tests and the CLI)."""
        from airflow.sdk import TaskInstanceState

        ti = getattr(self, "task_instance", None)
        if ti is None:
            return CancelVerdict.USER_STOP
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            states = await asyncio.to_thread(
                RuntimeTaskInstance.get_task_states, dag_id=ti.dag_id, map_index=ti.map_index,
                task_ids=[ti.task_id], run_ids=[ti.run_id],
            )
        except Exception as exc:  # noqa: BLE001 - the API server may be unreachable for a moment
            self.log.warning("task state unreadable: %s", exc)
            return CancelVerdict.UNKNOWN
        key = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
        state = (states.get(ti.run_id) or {}).get(key)
        deferred = getattr(state, "value", state) == TaskInstanceState.DEFERRED
        return CancelVerdict.MOVED if deferred else CancelVerdict.USER_STOP


class BackoffTrigger(DateTimeTrigger):
    """The wait before a restart (a ``DateTimeTrigger``) that records ``stopped`` when the user stops the task.

    Without it, stopping a task during its backoff wait would leave recovery.json at ``recovering``.
    """

    def __init__(self, moment: Any, state_dir: str, end_from_trigger: bool = False):
        super().__init__(moment, end_from_trigger=end_from_trigger)
        self.state_dir = state_dir

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {"moment": self.moment, "state_dir": self.state_dir})

    async def on_kill(self) -> None:
        await run_to_completion(asyncio.to_thread(record_stopped, self.state_dir, None,
                                                  "stopped by user during the backoff wait"))

