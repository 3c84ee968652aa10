"""``RunService``: the run loop of a pipeline, written once for every driver.

A driver (the operator, ``airflow-conduit run``; the DLQ replay and any further kind of run alike) only waits
and reports. The loop is::

    next = service.start(options, readable_prefix=..., pipeline_id=...)   # or RunService.resume(...)
    while not isinstance(next, Finished):
        if isinstance(next, WatchRun):    observation = <watch next.handle until it ends, or its first record>
        if isinstance(next, WaitBackoff): <wait next.seconds>; observation = BackoffOver(next.previous)
        next = service.advance(observation)

``advance`` takes the last observation (a ``WatchEvent``, or ``BackoffOver``), asks the recovery engine
(through ``RunSupervisor``), performs what it decided (submit, resubmit, finish), saves the state
(``RunStore``) and returns the next step: a wait (``WatchRun``: on which job; ``WaitBackoff``: how long) or a
final outcome (``Finished``: succeeded, stopped, degraded with its classification, or refused). How a driver
waits is its own: the operator defers (to ``SparkPipelineTrigger``, which watches without a worker slot, and
to ``BackoffTrigger``), the CLI watches in-process and sleeps. A driver that cannot keep the service in memory
(the operator between deferrals) rebuilds it with ``RunService.resume``: everything it needs is in the store.

A submission is the driver's own (``SubmitRun``: the spec, the backend, the kind of run), so a run of another
kind (a DLQ replay, a declarative pipeline) is one more ``SubmitRun`` on the same loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_conduit.compat import StrEnum
from airflow_conduit.recovery.actions import Action
from airflow_conduit.recovery.classify import Classification
from airflow_conduit.recovery.clock import Clock
from airflow_conduit.recovery.options import RecoveryOptions
from airflow_conduit.runs.events import WatchEvent, WatchEventError
from airflow_conduit.runs.handles import JobHandle
from airflow_conduit.runs.status import WatchStatus
from airflow_conduit.runs.store import RunStore
from airflow_conduit.runs.supervisor import Refusals, RunSupervisor, Step, unique_run_prefix

AUDIT_IN_MESSAGE = 5  # audit events quoted in a degraded pipeline's message


class SubmitRun(Protocol):
    """Start one run of the pipeline as ``run_id``, once ``previous`` (the last job submitted) is gone; its handle.

    Raises one of the service's ``refusals`` when the run did not start (answered like a failed run).
    """

    def __call__(self, run_id: str, previous: JobHandle | None) -> JobHandle: ...


class RunStateLost(RuntimeError):
    """A driver resumes a pipeline whose saved state is in none of its stores."""


# -- observations --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackoffOver:
    """The observation that a ``WaitBackoff`` is over: the restart the engine scheduled is due."""

    previous: JobHandle | None = None


Observation = WatchEvent | BackoffOver


# -- steps ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchRun:
    """Wait on a job: watch it until it ends, or (``report_progress``) until it wrote its first record end to end.

    ``submitted``: the job was submitted by this step (not one an earlier driver submitted, resumed).
    """

    handle: JobHandle
    report_progress: bool
    lines: tuple[str, ...] = ()
    submitted: bool = False


@dataclass(frozen=True)
class WaitBackoff:
    """Wait ``seconds`` before the restart; then ``advance(BackoffOver(previous))``."""

    seconds: float
    previous: JobHandle | None
    lines: tuple[str, ...] = ()


class Ending(StrEnum):
    """How a pipeline's runs ended, for this driver."""

    SUCCEEDED = "succeeded"  # the last run ended well (a run-once pipeline read all its input)
    STOPPED = "stopped"  # the last run ended because it was asked to (its report says why)
    DEGRADED = "degraded"  # a fatal error, or the retry budget spent: no restart
    REFUSED = "refused"  # another driver holds the state dir (a driver that ends at once rather than retry)


@dataclass(frozen=True)
class Finished:
    """The final outcome.

    :param handle: the last job submitted (its lease is let go of a moment after its exit), or None
    :param summary: ``RunSupervisor.run_summary`` of a succeeded or stopped pipeline (a task's return value)
    :param message: the error text of a degraded or refused pipeline
    :param classification: the classification of a degraded pipeline's last failure
    """

    ending: Ending
    lines: tuple[str, ...] = ()
    handle: JobHandle | None = None
    summary: dict[str, Any] | None = None
    message: str = ""
    classification: Classification | None = None


Next = WatchRun | WaitBackoff | Finished


# -- the loop ------------------------------------------------------------------------------------------


@dataclass
class RunService:
    """One driver's side of one pipeline's runs: its store, how it submits, which failures are refusals.

    :param store: where the state is kept (``RunStore``: task state store, recovery.json, XCom)
    :param submit: how a run is started (``SubmitRun``)
    :param refusals: the exceptions of a submission that did not happen now (``RunSupervisor.submit``), or a
        function returning them (asked only once a submission raised)
    :param lease_refusals: those of them that mean another driver holds the state dir's lease
    :param end_when_leased: a held lease ends the loop (``Ending.REFUSED``) instead of being retried within the
        retry budget: a foreground command's answer
    :param clock: the engine's time (``recovery.clock``): a fake one in tests
    """

    store: RunStore
    submit: SubmitRun
    refusals: Refusals = ()
    lease_refusals: Refusals = ()
    end_when_leased: bool = False
    clock: Clock | None = None
    supervisor: RunSupervisor | None = field(default=None, repr=False)

    # -- the ways in -------------------------------------------------------------------------------

    def start(self, options: RecoveryOptions, *, readable_prefix: str, pipeline_id: str,
              resume_earlier: bool = True) -> Next:
        """Begin this driver's part: watch the job an earlier try of this owner left running, resume its pipeline
        where it stands (restart due), or start the pipeline afresh (fresh retry budget) and submit its first run.

        ``readable_prefix``: the readable part of the run ids of a fresh start (``unique_run_prefix``);
        ``resume_earlier`` False: always afresh (a driver that is its own owner once, as one CLI process).
        """
        carry = self.store.load() if resume_earlier else None
        earlier = RunSupervisor.from_carry(carry, options, clock=self.clock) if carry is not None else None
        if earlier is not None and not earlier.finished:
            self.supervisor = earlier
            if earlier.current is not None:  # an Airflow retry or a worker crash after submission: watch that job
                line = f"resuming: watching run {earlier.current.run_id} submitted by an earlier try"
                return WatchRun(earlier.current, earlier.awaiting_first_record, (line,))
            earlier.restarted()
            line = f"resuming pipeline {pipeline_id} ({earlier.pipeline_state}) from its persisted recovery state"
            return self._submit_next((line,), None)
        self.supervisor = RunSupervisor(options, run_prefix=unique_run_prefix(readable_prefix), pipeline_id=pipeline_id,
                                        clock=self.clock)
        again = () if earlier is None else (
            f"pipeline {pipeline_id} was {earlier.pipeline_state}; this try starts it again with a fresh retry budget",)
        return self._submit_next(again, None)

    @classmethod
    def resume(cls, store: RunStore, submit: SubmitRun, options: Callable[[dict[str, Any]], RecoveryOptions],
               **settings: Any) -> RunService:
        """The service of a driver that comes back (the operator after a deferral), from its store alone.

        ``options(carried)`` resolves the recovery options now; ``carried`` are those the pipeline started with.
        Raises ``RunStateLost`` when no store holds the state.
        """
        carry = store.load()
        if carry is None:
            raise RunStateLost(f"recovery state lost: nothing in task_state_store nor {store.folder.path}/recovery.json")
        service = cls(store, submit, **settings)
        service.supervisor = RunSupervisor.from_carry(carry, options(carry.get("options")), clock=service.clock)
        return service

    # -- one step ----------------------------------------------------------------------------------

    def advance(self, observation: Observation | dict[str, Any]) -> Next:
        """Take the last observation, let the engine decide, do it, save the state; the next step.

        A watch event may come as its dict form (a trigger event): one that is not a ``WatchEvent`` about the
        job being watched raises ``WatchEventError`` naming what is wrong.
        """
        if isinstance(observation, BackoffOver):
            self.supervisor.restarted()
            return self._submit_next((), observation.previous)
        return self._answer(self.supervisor.on_event(self._watched(observation)))

    def stop(self, reason: str) -> None:
        """The pipeline stops here (a user's interrupt, a submission that cannot be retried): recorded ``stopped``."""
        self.supervisor.stop(reason)
        self.store.save(self.supervisor)

    @property
    def watched(self) -> JobHandle | None:
        """The job being watched (None between runs and once finished): the one a driver's stop must stop."""
        return self.supervisor.current if self.supervisor is not None else None

    # -- inside ------------------------------------------------------------------------------------

    def _watched(self, observation: WatchEvent | dict[str, Any]) -> WatchEvent:
        event = observation if isinstance(observation, WatchEvent) else WatchEvent.from_dict(observation)
        current = self.supervisor.current
        if current is not None and event.run_id != current.run_id:
            raise WatchEventError(f"an event about run {event.run_id!r}, but the job watched is run {current.run_id!r}")
        return event

    def _submit_next(self, lines: tuple[str, ...], previous: JobHandle | None) -> Next:
        supervisor = self.supervisor
        step = supervisor.submit(lambda run_id: self.submit(run_id, previous), self.refusals, self.lease_refusals,
                                 previous=previous)
        if step.action is Action.WATCH:
            self.store.save_submitted(supervisor, step.handle)
            return WatchRun(step.handle, supervisor.awaiting_first_record, (*lines, *step.lines), submitted=True)
        if step.refused_by_lease and self.end_when_leased:
            supervisor.stop(step.event.error["message"])
            self.store.save(supervisor, step.event)  # this driver's own record; the holder's file is left alone
            return Finished(Ending.REFUSED, lines, handle=previous, message=str(step.refusal))
        return self._answer(step, lines)

    def _answer(self, step: Step, lines: tuple[str, ...] = ()) -> Next:
        """Save the state the step leaves, and say what the driver waits for next, or how the pipeline ended."""
        supervisor = self.supervisor
        self.store.save(supervisor, step.event)
        lines = (*lines, *step.lines)
        if step.action is Action.WATCH:
            return WatchRun(step.handle, supervisor.awaiting_first_record, lines)
        if step.action is Action.RESTART:
            return WaitBackoff(step.delay_seconds, step.handle, lines)
        if step.action is Action.DEGRADE:
            return Finished(Ending.DEGRADED, lines, step.handle, message=supervisor.degraded_message(step, AUDIT_IN_MESSAGE),
                            classification=step.decision.classification)
        ending = Ending.STOPPED if step.event.status is WatchStatus.STOPPED else Ending.SUCCEEDED
        return Finished(ending, lines, step.handle, summary=supervisor.run_summary(step, str(self.store.folder.path)))
