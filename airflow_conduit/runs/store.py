"""``RunStore``: where a pipeline's run state is kept, the one writer of it, and the one place its precedence is.

The state is the run supervisor's ``carry()`` (recovery options, the engine's window and audit log, the
submissions, the job being watched). Three stores hold it, written together at every transition by ``save``:

- the task state store (Airflow's ``task_state_store``, when the driver is a task): survives Airflow
  retries and worker crashes and belongs to this task alone;
- ``STATE_DIR/recovery.json``: the pipeline's record with its ``owner``, what the sensors, the UI and
  ``record_stopped`` read, and the fallback when the task state store is unavailable;
- XCom (for a task): the pipeline state, the audit log and the submitted job's handle, published for the UI
  and downstream tasks, never read back by a driver.

Precedence, when a driver loads its state (``load``), first that applies:

1. this owner's ``recovery.json`` when it says ``stopped``: ``record_stopped`` writes a stop seen where there
   is no task context (a trigger's or the operator's ``on_kill``) to that file only;
2. the task state store;
3. this owner's ``recovery.json`` (the task state store unavailable or empty; a driver that is no task);
4. nothing: a fresh start (``RunService.start``), or ``RunStateLost`` for a driver that resumes.

Another owner's ``recovery.json`` is never loaded, and a submission refused by the state dir's lease leaves it
as it is (the run that holds the lease owns it), unless it is the only place left for a task's state (its task
state store failed).
Besides the three stores, a deferred task's trigger kwargs carry the job handle it watches and a backoff wait's
kwargs the previous job: ids and paths, never the recovery state.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

from airflow_conduit.names import STORE_KEY, XCOM_AUDIT, XCOM_JOB, XCOM_STATE
from airflow_conduit.recovery.state import PipelineState
from airflow_conduit.runs.events import WatchEvent
from airflow_conduit.runs.handles import JobHandle, optional_handle
from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.supervisor import RunSupervisor

log = logging.getLogger(__name__)


class TaskStateStore(Protocol):
    """The part of Airflow's ``task_state_store`` the store uses."""

    def get(self, key: str) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


class RunStore:
    """One pipeline's run state for one owner (an Airflow task, or one ``airflow-conduit run`` process).

    :param state_dir: the pipeline's state directory
    :param owner: who writes recovery.json (``{"dag_id", "run_id", "task_id", "map_index"}`` or ``{"cli": true, ...}``)
    :param task_store: Airflow's task state store, None outside a task
    :param publish: ``publish(key, value)`` for XCom (``ti.xcom_push``), None outside a task
    """

    def __init__(self, state_dir: str, owner: dict[str, Any], *, task_store: TaskStateStore | None = None,
                 publish: Callable[..., None] | None = None, logger: logging.Logger | Any = None):
        self.folder = StateDir(state_dir)
        self.owner = owner
        self.task_store = task_store
        self.publish = publish
        self.log = logger or log

    def save(self, supervisor: RunSupervisor, event: WatchEvent | None = None) -> None:
        """The supervisor's state everywhere it is kept.

        A submission refused by the state dir's lease leaves another owner's recovery.json to the run
        holding the lease (the sensors and the UI read that run's state there), as long as this owner's
        state is kept elsewhere (the task state store) or has nowhere else to go but is not needed (no
        task state store: a CLI run, which ends).
        """
        carry = supervisor.carry()
        stored = False
        if self.task_store is not None:
            try:
                self.task_store.set(STORE_KEY, carry)
                stored = True
            except Exception as exc:  # noqa: BLE001 - the file below still holds it
                self.log.warning("task_state_store unavailable (%s); recovery.json keeps the state", exc)
        if self._leave_holders_file(event, stored):
            self.log.info("the state dir is leased by another run: its recovery.json is left as it is")
        else:
            self.folder.write_recovery(supervisor.recovery_record(self.owner, event, carry))
        if self.publish is not None:
            self.publish(key=XCOM_STATE, value=str(supervisor.pipeline_state))
            self.publish(key=XCOM_AUDIT, value=supervisor.audit())

    def _leave_holders_file(self, event: WatchEvent | None, stored: bool) -> bool:
        if event is None or not event.refused_by_lease:
            return False
        if (self.folder.read_recovery() or {}).get("owner") == self.owner:
            return False  # this owner's own file: keep it current
        return stored or self.task_store is None

    def save_submitted(self, supervisor: RunSupervisor, handle: JobHandle) -> None:
        """A run was submitted: its handle is published (the Spark UI link reads it), then the state saved."""
        if self.publish is not None:
            self.publish(key=XCOM_JOB, value=handle.to_dict())
        self.save(supervisor)

    def load(self) -> dict[str, Any] | None:
        """This owner's saved state (``RunSupervisor.carry()``): the task state store, else recovery.json when it
        is this owner's.

        A ``stopped`` recovery.json of this owner wins over the task state store: a stop recorded by
        ``record_stopped`` (no task context there) is written to the file only.
        """
        record = self.folder.read_recovery()
        owned = record if record and record.get("owner") == self.owner else None
        if owned and owned.get("pipeline_state") == PipelineState.STOPPED and owned.get("carry"):
            return owned["carry"]
        if self.task_store is not None:
            try:
                carry = self.task_store.get(STORE_KEY)
                if carry:
                    return carry
            except Exception as exc:  # noqa: BLE001
                self.log.warning("task_state_store unavailable (%s); reading recovery.json", exc)
        return owned.get("carry") if owned else None

    def current_handle(self) -> JobHandle | None:
        """The job recovery.json says is being watched (for a stop with nothing in memory)."""
        return optional_handle((self.folder.read_recovery() or {}).get("current"))


def record_stopped(state_dir: str, run_id: str | None, reason: str) -> None:
    """Write ``stopped`` to STATE_DIR/recovery.json when the stopped run is still the pipeline's current one.

    ``run_id`` None: no run is current (stopped while waiting to restart).
    """
    folder = StateDir(state_dir)
    record = folder.read_recovery()
    if not record or not record.get("carry"):
        return
    current = (record.get("current") or {}).get("run_id")
    if current is not None and current != run_id:
        return  # a later run owns the state dir now
    supervisor = RunSupervisor.from_carry(record["carry"])
    supervisor.stop(reason)
    folder.write_recovery(supervisor.recovery_record(record.get("owner") or {}, record.get("last_event")))
