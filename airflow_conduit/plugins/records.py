"""What Airflow recorded about pipeline task instances: XCom, the task state store, rendered fields.

The views find everything through these records. A state directory, a DLQ folder or a driver
log is only ever a path the operator itself recorded (XCom ``conduit_job`` / ``conduit_dlq`` /
``return_value``, the task state store, the rendered ``state_dir`` field); a request only names a
task instance (dag, run, task, map index), which the caller has already authorized.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from airflow.models.connection import Connection
from airflow.models.renderedtifields import RenderedTaskInstanceFields
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow_conduit.names import STORE_KEY, XCOM_AUDIT, XCOM_DLQ, XCOM_JOB, XCOM_STATE, XCOM_SUMMARY
from airflow_conduit.plugins.state_view import Redactor, run_prefix
from airflow_conduit.recovery.state import PipelineState

# What the operator records (airflow_conduit/names.py); tests/integration/test_ui_plugin.py reads them
# back from a real run, so a record the operator stops writing fails there instead of emptying the views.
PIPELINE_XCOMS = (XCOM_STATE, XCOM_AUDIT, XCOM_SUMMARY, XCOM_JOB, XCOM_DLQ)


@dataclass
class PipelineTask:
    """One task instance of a pipeline operator, as Airflow recorded it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    ti_state: str | None
    try_number: int
    start_date: Any
    end_date: Any
    xcom: dict[str, Any] = field(default_factory=dict)
    carry: dict[str, Any] | None = None
    rendered: dict[str, Any] = field(default_factory=dict)

    @property
    def is_pipeline(self) -> bool:
        return XCOM_STATE in self.xcom or XCOM_JOB in self.xcom or self.carry is not None

    @property
    def job(self) -> dict[str, Any]:
        job = self.xcom.get(XCOM_JOB)
        if isinstance(job, dict):
            return job
        current = (self.carry or {}).get("current")
        return current if isinstance(current, dict) else {}

    @property
    def summary(self) -> dict[str, Any]:
        value = self.xcom.get(XCOM_SUMMARY)
        return value if isinstance(value, dict) else {}

    @property
    def state_dir(self) -> Path | None:
        for candidate in (self.job.get("state_dir"), self.summary.get("state_dir"), self.rendered.get("state_dir")):
            if isinstance(candidate, str) and candidate.strip():
                path = Path(candidate)
                if path.is_absolute():
                    return path
        return None

    @property
    def recovery(self) -> dict[str, Any] | None:
        """The engine's RecoveryState (JSON) from the carry, if Airflow kept it."""
        recovery = (self.carry or {}).get("recovery")
        return recovery if isinstance(recovery, dict) else None

    @property
    def pipeline_state(self) -> str | None:
        state = self.xcom.get(XCOM_STATE) or (self.recovery or {}).get("pipeline_state")
        return str(state) if state else None

    @property
    def audit(self) -> list[dict[str, Any]]:
        events = (self.recovery or {}).get("audit")
        if not isinstance(events, list):
            events = self.xcom.get(XCOM_AUDIT)
        return [e for e in events or [] if isinstance(e, dict)]

    @property
    def run_prefixes(self) -> list[str]:
        """The ``<prefix>`` of this task instance's Spark run ids ``<prefix>-sNN`` (one per task try)."""
        prefixes = [(self.carry or {}).get("run_prefix"), run_prefix(self.job.get("run_id")), run_prefix(self.summary.get("run_id"))]
        return list(dict.fromkeys(p for p in prefixes if isinstance(p, str) and p))

    @property
    def submissions(self) -> int | None:
        value = (self.carry or {}).get("submissions") or self.summary.get("submissions")
        return int(value) if value else None


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _xcoms(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any]:
    rows = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == run_id,
            XComModel.task_id == task_id,
            XComModel.map_index == map_index,
            XComModel.key.in_(PIPELINE_XCOMS),
        )
    )
    return {row.key: XComModel.deserialize_value(row) for row in rows}


def _carry(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any] | None:
    value = session.scalar(
        select(TaskStateStoreModel.value).where(
            TaskStateStoreModel.dag_id == dag_id,
            TaskStateStoreModel.run_id == run_id,
            TaskStateStoreModel.task_id == task_id,
            TaskStateStoreModel.map_index == map_index,
            TaskStateStoreModel.key == STORE_KEY,
        )
    )
    carry = _json(value)
    return carry if isinstance(carry, dict) else None


def _rendered(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any]:
    value = session.scalar(
        select(RenderedTaskInstanceFields.rendered_fields).where(
            RenderedTaskInstanceFields.dag_id == dag_id,
            RenderedTaskInstanceFields.run_id == run_id,
            RenderedTaskInstanceFields.task_id == task_id,
            RenderedTaskInstanceFields.map_index == map_index,
        )
    )
    value = _json(value)
    return value if isinstance(value, dict) else {}


def _recovery_file_record(task: PipelineTask) -> dict[str, Any] | None:
    """``STATE_DIR/recovery.json``, only when it names this task instance (it holds the latest owner)."""
    if task.state_dir is None:
        return None
    try:
        record = json.loads((task.state_dir / "recovery.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    owner = {"dag_id": task.dag_id, "run_id": task.run_id, "task_id": task.task_id, "map_index": task.map_index}
    if not isinstance(record, dict) or record.get("owner") != owner or not isinstance(record.get("carry"), dict):
        return None
    return record


def load_task(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> PipelineTask | None:
    """The task instance with its pipeline records; None when there is no such task instance."""
    ti = session.scalar(
        select(TaskInstance).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    )
    if ti is None:
        return None
    task = PipelineTask(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        ti_state=str(ti.state) if ti.state else None,
        try_number=ti.try_number,
        start_date=ti.start_date,
        end_date=ti.end_date,
        xcom=_xcoms(session, dag_id, run_id, task_id, map_index),
        carry=_carry(session, dag_id, run_id, task_id, map_index),
        rendered=_rendered(session, dag_id, run_id, task_id, map_index),
    )
    apply_recovery_file(task, _recovery_file_record(task))
    return task


def apply_recovery_file(task: PipelineTask, record: dict[str, Any] | None) -> None:
    """Complete ``task`` with its ``recovery.json`` record (one that names this task instance).

    The file's carry stands in when Airflow kept none; a ``stopped`` record wins over the store and
    XCom: a stop recorded by on_kill (the user marked or cleared the deferred task) reaches only the
    file, the triggerer having no task context to update them (as in ``runs.store.RunStore.load``).
    """
    if record is None:
        return
    stopped = record.get("pipeline_state") == PipelineState.STOPPED
    if task.carry is None or stopped:
        task.carry = record["carry"]
    if stopped:
        task.xcom[XCOM_STATE] = str(PipelineState.STOPPED)


def latest_pipeline_tasks(session: Session, dag_ids: set[str]) -> list[PipelineTask]:
    """For each pipeline task (dag, task, map index) among ``dag_ids``: its most recent task instance."""
    if not dag_ids:
        return []
    newest = (
        select(XComModel.dag_id, XComModel.task_id, XComModel.map_index, func.max(XComModel.timestamp).label("at"))
        .where(XComModel.key == XCOM_STATE, XComModel.dag_id.in_(dag_ids))
        .group_by(XComModel.dag_id, XComModel.task_id, XComModel.map_index)
        .subquery()
    )
    rows = session.execute(
        select(XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.map_index).join(
            newest,
            (XComModel.dag_id == newest.c.dag_id)
            & (XComModel.task_id == newest.c.task_id)
            & (XComModel.map_index == newest.c.map_index)
            & (XComModel.timestamp == newest.c.at),
        ).where(XComModel.key == XCOM_STATE)
    ).all()
    seen: set[tuple[str, str, int]] = set()
    tasks = []
    for dag_id, run_id, task_id, map_index in rows:
        if (dag_id, task_id, map_index) in seen:
            continue
        seen.add((dag_id, task_id, map_index))
        task = load_task(session, dag_id, run_id, task_id, map_index)
        if task is not None:
            tasks.append(task)
    return tasks


def run_pipeline_tasks(session: Session, dag_id: str, run_id: str) -> list[PipelineTask]:
    """The pipeline task instances of one DAG run."""
    keys = session.execute(
        select(XComModel.task_id, XComModel.map_index)
        .where(XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == XCOM_STATE)
        .distinct()
    ).all()
    tasks = [load_task(session, dag_id, run_id, task_id, map_index) for task_id, map_index in sorted(keys)]
    return [t for t in tasks if t is not None]


def redactor_for(session: Session, task: PipelineTask) -> Redactor:
    """Masks the secrets this pipeline could print: its spec's secret settings and its connection's password."""
    values: list[str] = []
    conn_ids = {c for c in (task.rendered.get("conn_id"), task.job.get("conn_id")) if isinstance(c, str) and c}
    for conn in session.scalars(select(Connection).where(Connection.conn_id.in_(conn_ids))) if conn_ids else ():
        if conn.password:
            values.append(conn.password)
    values.extend(_spec_secret_values(task))
    return Redactor(values)


def spec_of(task: PipelineTask) -> Any | None:
    """The pipeline's spec as it is now (the file the task ran, or the inline spec written in its state dir);
    None when it is gone or no longer loads."""
    from airflow_conduit.pipeline import load_pipeline

    spec = task.rendered.get("spec")
    candidates = []
    if isinstance(spec, str) and spec.strip() and "\n" not in spec.strip():
        candidates.append(Path(spec.strip()))
    if task.state_dir is not None:
        candidates.append(task.state_dir / "pipeline.yaml")  # an inline spec is written there
    for path in candidates:
        if path.is_absolute() and path.is_file():
            try:
                return load_pipeline(str(path))
            except Exception:  # a spec that no longer loads: try the next one
                continue
    return None


def _spec_secret_values(task: PipelineTask) -> list[str]:
    """The real values of the spec's secrets (best effort: the spec file may be gone or changed since)."""
    from airflow_conduit.pipeline.secrets import secret_values

    spec = spec_of(task)
    return list(secret_values(spec)) if spec is not None else []


def connection_dict(conn_id: str) -> dict[str, Any] | None:
    """An Airflow connection as a Kafka plugin reads it (hooks/kafka_connections.resolve); None when undefined."""
    from airflow.exceptions import AirflowNotFoundException

    try:
        conn = Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        return None
    return {"conn_type": conn.conn_type, "host": conn.host, "port": conn.port, "login": conn.login,
            "password": conn.password, "extra": conn.extra_dejson}


def replay_dag(session: Session, task: PipelineTask) -> dict[str, Any] | None:
    """The DAG a replay of this pipeline is started with: the pipeline's own DAG when it holds a
    ``DeadLetterQueueReplayOperator`` task (as the reference DAG ``conduit_orders_dlq_replay``); its params
    say which keys a trigger's conf may carry."""
    from airflow.models.serialized_dag import SerializedDagModel

    dag = SerializedDagModel.get_dag(task.dag_id, session=session)
    if dag is None:
        return None
    replay_tasks = [t.task_id for t in dag.tasks if getattr(t, "task_type", "") == "DeadLetterQueueReplayOperator"]
    if not replay_tasks:
        return None
    return {"dag_id": task.dag_id, "task_id": replay_tasks[0], "params": sorted(dict(dag.params or {}))}
