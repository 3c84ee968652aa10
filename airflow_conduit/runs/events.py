"""``WatchEvent``: what the watcher tells a run's supervisor, as a typed, validated value.

Two producers (the trigger that watches a job, and a driver whose submission was refused) and one
consumer (``RunSupervisor.on_event``). It crosses the triggerer/worker boundary as the plain dict of
``to_dict()`` (Airflow serializes trigger events as JSON); ``from_dict`` refuses anything else with a
message naming the key, so a malformed event fails the task instead of being misread.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import StructuredError
from airflow_conduit.runs.handles import JobHandle, JobHandleError
from airflow_conduit.runs.no_space import is_no_space, no_space_message
from airflow_conduit.runs.status import WatchStatus

Failure = dict[str, Any] | str  # a failed run as the classifier reads it: its StructuredError.to_dict(), else its log text
REFUSED_BY_LEASE = "lease"  # StructuredError.extra["refused_by"] of a submission the state dir's lease refused
DIGEST_LEFT_OUT = ("stderr_tail", "handle")  # recovery.json keeps a readable digest of the last event


class WatchEventError(ValueError):
    """A watch event that is not one: wrong type, unknown key, missing or ill-typed value."""


@dataclass(frozen=True)
class WatchEvent:
    """One run's news: its status, how it ended (exit code, structured error, log tail) and its counts.

    :param status: ``running`` (first records written), ``succeeded``, ``failed`` or ``stopped``
    :param run_id: the run the event is about
    :param handle: the job watched (None for a submission that was refused); its dict form is read too
    :param exit_code: the driver's exit code when the backend knows it
    :param driver_state: the cluster manager's word on the driver (standalone)
    :param message: the backend's message about the job's status
    :param error: a ``StructuredError.to_dict()`` when the run failed with one
    :param stderr_tail: the end of the driver log of a failed run (the classifier reads it)
    :param report: the run report's summary (counts and times)
    """

    status: WatchStatus
    run_id: str
    handle: JobHandle | None = None
    exit_code: int | None = None
    driver_state: str | None = None
    message: str = ""
    error: dict[str, Any] | None = None
    stderr_tail: str | None = None
    report: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "status", WatchStatus(self.status))
        except ValueError:
            raise WatchEventError(f"status: expected one of {[s.value for s in WatchStatus]}, got {self.status!r}") from None
        if not isinstance(self.run_id, str) or not self.run_id:
            raise WatchEventError(f"run_id: expected a non-empty string, got {self.run_id!r}")
        if self.handle is not None and not isinstance(self.handle, JobHandle):
            _expect("handle", self.handle, dict)
            try:
                object.__setattr__(self, "handle", JobHandle.from_dict(self.handle))
            except JobHandleError as exc:
                raise WatchEventError(f"handle: {exc}") from None
        for name in ("error", "report"):
            _expect(name, getattr(self, name), dict)
        for name in ("driver_state", "stderr_tail"):
            _expect(name, getattr(self, name), str)
        if self.exit_code is not None and (isinstance(self.exit_code, bool) or not isinstance(self.exit_code, int)):
            raise WatchEventError(f"exit_code: expected an integer or null, got {self.exit_code!r}")
        if not isinstance(self.message, str):
            raise WatchEventError(f"message: expected a string, got {self.message!r}")
        if self.handle is not None and self.handle.run_id != self.run_id:
            raise WatchEventError(f"handle: about run {self.handle.run_id!r}, the event about run {self.run_id!r}")

    # -- the dict form (trigger events, recovery.json) --------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["status"] = str(self.status)
        data["handle"] = self.handle.to_dict() if self.handle is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Any) -> "WatchEvent":
        if not isinstance(data, dict):
            raise WatchEventError(f"expected a watch event (a mapping), got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise WatchEventError(f"unknown key(s) {unknown}: a watch event has {sorted(known)}")
        for name in ("status", "run_id"):
            if name not in data:
                raise WatchEventError(f"{name}: missing")
        return cls(**{key: ("" if key == "message" and value is None else value) for key, value in data.items()})

    def digest(self) -> dict[str, Any]:
        """The event without its log tail and handle: what recovery.json keeps (small and readable)."""
        return {key: value for key, value in self.to_dict().items() if key not in DIGEST_LEFT_OUT}

    # -- reading it ---------------------------------------------------------------------------------

    @property
    def refused_by_lease(self) -> bool:
        """A submission refused because another run holds the state dir's lease."""
        return isinstance(self.error, dict) and (self.error.get("extra") or {}).get("refused_by") == REFUSED_BY_LEASE

    @property
    def failure(self) -> Failure:
        """What the classifier reads of a failed run: its structured error, else its log tail."""
        return self.error or self.stderr_tail or f"job ended with status {str(self.status)!r} and no error"

    # -- the second producer ------------------------------------------------------------------------

    @classmethod
    def submission_refused(cls, run_id: str, exc: BaseException, *, by_lease: bool = False,
                           state_dir: str | None = None) -> "WatchEvent":
        """A run that could not be submitted now: a transient infrastructure failure (the engine retries it), but
        for a full file system (fatal 2640: retrying cannot make room; the message names the file)."""
        if is_no_space(exc):
            error = StructuredError(code=codes.NO_SPACE_LEFT, fatal=True, stage="submit",
                                    message=f"not submitted: {no_space_message(exc, state_dir)}").to_dict()
            return cls(WatchStatus.FAILED, run_id, error=error)
        error = StructuredError(
            code=codes.INFRASTRUCTURE, fatal=False, message=f"not submitted: {type(exc).__name__}: {exc}",
            stage="submit", extra={"refused_by": REFUSED_BY_LEASE} if by_lease else {},
        ).to_dict()
        return cls(WatchStatus.FAILED, run_id, error=error)


def _expect(name: str, value: Any, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        raise WatchEventError(f"{name}: expected {kind.__name__} or null, got {type(value).__name__}")
