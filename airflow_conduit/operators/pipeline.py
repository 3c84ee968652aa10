"""RecoveringSparkPipelineOperator: run a Conduit-style pipeline on Spark and keep it alive.

The run loop is ``runs.service.RunService`` (the one ``airflow-conduit run`` drives too): it submits, reads each
observation through the recovery engine and says what to wait for next. This operator only waits the Airflow
way and translates the outcome::

  execute ──► RunService.start ──► WatchRun    ─► defer(SparkPipelineTrigger) ──► execute_complete ─► advance(event)
                                   WaitBackoff ─► defer(BackoffTrigger) ────────► resubmit ─────────► advance(BackoffOver)
                                   Finished    ─► return the run summary (XCom), or AirflowFailException (degraded)

Between deferrals the service is rebuilt from its store (``runs.store.RunStore``: the ``task_state_store``,
``STATE_DIR/recovery.json``, and ``pipeline_state`` and ``audit_log`` in XCom; trigger kwargs carry the job
handle only), so an Airflow retry, a worker crash or a triggerer restart neither resets the retry window nor
loses the audit log. The job is submitted, watched and stopped through ``SparkPipelineHook``.
"""

from __future__ import annotations

import json
import os
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_conduit.hooks.backends.retries import REST_RETRY_DELAY, REST_RETRY_LIMIT, REST_RETRY_MAX_DELAY, RestRetry
from airflow_conduit.hooks.errors import KafkaConnectionError, SparkConnectionNotFound
from airflow_conduit.hooks.refusals import LEASE_REFUSALS, SUBMISSION_FAILURES
from airflow_conduit.hooks.spark_pipeline import BACKEND_KINDS, SparkPipelineHook
from airflow_conduit.names import XCOM_DLQ
from airflow_conduit.operators.lineage import PipelineLineageMixin
from airflow_conduit.operators.links import DeadLetterQueueLink, SparkUILink
from airflow_conduit.pipeline.locations import dlq_location
from airflow_conduit.pipeline.state_dir_check import StateDirError, usable_state_dir
from airflow_conduit.runs.events import WatchEventError
from airflow_conduit.runs.handles import JobHandle, optional_handle
from airflow_conduit.runs.service import (BackoffOver, Ending, Finished, Next, RunService, RunStateLost, SubmitRun,
                                          WaitBackoff)
from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.runs.store import RunStore, record_stopped
from airflow_conduit.triggers.pipeline import STATUS_FAILURES_TOLERATED, BackoffTrigger, SparkPipelineTrigger
from airflow_conduit.utils.recovery_config import RecoveryVariableUnreadable, resolve_recovery_options

class RecoveringSparkPipelineOperator(PipelineLineageMixin, BaseOperator):
    """Run a pipeline spec on Spark; restart it with backoff on transient errors, degrade on fatal ones.

    :param spec: path of a pipeline YAML file, or the YAML text itself (inline; written to the state dir)
    :param conn_id: Spark connection (``spark_default``): host ``local[*]``, ``spark://host:7077`` with extra
        ``deploy-mode: cluster`` for a standalone cluster (REST submission), or any master spark-submit knows
        (YARN, Kubernetes); ``conduit_local`` asks for Spark embedded on the worker. A connection that does
        not exist fails the task, naming it
    :param state_dir: the pipeline's state directory (checkpoints, commits, run reports, recovery.json)
    :param min_delay/max_delay/backoff_factor/max_retries/max_retries_window/policy: Conduit's recovery
        options; unset ones come from the Airflow Variable named by ``[conduit] variable``, then ``[conduit]``
    :param recovery_options: further engine options (e.g. ``{"backoff-reset-after": "1m"}``)
    :param poll_interval: seconds between two looks at the running job
    :param status_failures_tolerated: watch rounds in a row whose status call failed (after the REST retries)
        before the run counts as unobservable, a transient failure the recovery engine handles (default 3)
    :param backend: force the ``local`` or ``standalone`` backend instead of deriving it from the connection
        (``launcher``: its deprecated name)
    :param backend_options: passed to the backend (templated), e.g. ``{"env": {...}}`` (local),
        ``{"python": "/usr/bin/python3"}`` (standalone), ``worker_jars``/``spark_local_ip`` to override the
        ``[conduit]`` worker defaults (``launcher_options``: its deprecated name)
    :param rest_retry_limit: attempts per REST call to a standalone master (default 5)
    :param rest_retry_delay: seconds before the second attempt, doubling after each one (default 1) ...
    :param rest_retry_max_delay: ... up to this many seconds (default 10)
    :param spark_conf: extra Spark properties
    """

    template_fields: Sequence[str] = ("spec", "state_dir", "conn_id", "backend_options")
    template_ext: Sequence[str] = ()
    ui_color = "#e8f4ea"
    operator_extra_links = (SparkUILink(), DeadLetterQueueLink())

    def __init__(
        self,
        *,
        spec: str,
        state_dir: str,
        conn_id: str = "spark_default",
        min_delay: str | float | None = None,
        max_delay: str | float | None = None,
        backoff_factor: float | None = None,
        max_retries: int | None = None,
        max_retries_window: str | float | None = None,
        policy: str | None = None,
        recovery_options: dict[str, Any] | None = None,
        poll_interval: float = 5.0,
        status_failures_tolerated: int = STATUS_FAILURES_TOLERATED,
        backend: str | None = None,
        backend_options: dict[str, Any] | None = None,
        rest_retry_limit: int = REST_RETRY_LIMIT,
        rest_retry_delay: float = REST_RETRY_DELAY,
        rest_retry_max_delay: float = REST_RETRY_MAX_DELAY,
        spark_conf: dict[str, Any] | None = None,
        launcher: str | None = None,
        launcher_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("retries", 0)  # recovery is the engine's job, not a second layer of Airflow retries
        super().__init__(**kwargs)
        backend = _renamed("launcher", launcher, "backend", backend)
        backend_options = _renamed("launcher_options", launcher_options, "backend_options", backend_options)
        # A bad value fails the DAG's parse, naming the argument.
        if backend is not None and backend not in BACKEND_KINDS:
            raise ValueError(f"backend: expected one of {', '.join(BACKEND_KINDS)}, got {backend!r}")
        RestRetry(rest_retry_limit, rest_retry_delay, rest_retry_max_delay)
        if (isinstance(status_failures_tolerated, bool) or not isinstance(status_failures_tolerated, int)
                or status_failures_tolerated < 0):
            raise ValueError(f"status_failures_tolerated: expected a whole number >= 0, got {status_failures_tolerated!r}")
        self.spec = spec
        self.state_dir = state_dir
        self.conn_id = conn_id
        self.recovery_arguments = {
            **(recovery_options or {}),
            "min_delay": min_delay,
            "max_delay": max_delay,
            "backoff_factor": backoff_factor,
            "max_retries": max_retries,
            "max_retries_window": max_retries_window,
            "policy": policy,
        }
        self.poll_interval = poll_interval
        self.status_failures_tolerated = status_failures_tolerated
        self.backend = backend
        self.backend_options = backend_options or {}
        self.rest_retry_arguments = {"rest_retry_limit": rest_retry_limit, "rest_retry_delay": rest_retry_delay,
                                     "rest_retry_max_delay": rest_retry_max_delay}
        self.spark_conf = spark_conf
        self._conduit_handle: JobHandle | None = None
        self._conduit_outcome: Finished | None = None
        self._conduit_dlq: str | None = None

    # -- helpers -----------------------------------------------------------------------------------

    def _recovery_options(self, carried: dict | None = None):
        """Options merged from [conduit] < Variable < arguments.

        A Variable that cannot be read fails the task when the pipeline starts (``carried`` is None);
        once it runs, a warning is logged and the options it started with (``carried``) are kept.
        """
        from airflow_conduit.recovery import RecoveryOptions
        from airflow_conduit.recovery.errors import RecoveryConfigError

        try:
            return RecoveryOptions.from_mapping(resolve_recovery_options(self.recovery_arguments))
        except RecoveryVariableUnreadable as exc:
            if carried is None:
                raise AirflowException(f"{exc}; nothing was submitted") from exc
            self.log.warning("%s; keeping the recovery options this pipeline started with", exc)
            return RecoveryOptions.from_mapping(carried)
        except (RecoveryConfigError, ValueError) as exc:
            raise AirflowFailException(f"invalid recovery options: {exc}") from exc

    def _spec_path(self) -> str:
        """The spec file to submit: the given path, or the inline YAML written to STATE_DIR/pipeline.yaml."""
        if "\n" not in self.spec.strip():
            return os.path.abspath(self.spec)
        path = Path(self.state_dir) / "pipeline.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.spec, encoding="utf-8")
        return str(path.absolute())

    def _validated_spec(self) -> tuple[str, Any]:
        from airflow_conduit.pipeline import SpecError, load_pipeline

        from airflow_conduit.hooks import kafka_connections

        path = self._spec_path()
        try:
            spec = load_pipeline(path)
        except SpecError as exc:
            raise AirflowFailException(f"pipeline spec refused, nothing was submitted:\n{exc}") from exc
        try:
            kafka_connections.check(spec, path)
        except KafkaConnectionError as exc:
            raise AirflowFailException(f"{exc}; nothing was submitted") from exc
        return path, spec

    def _owner(self, context: Any) -> dict[str, Any]:
        ti = context["ti"]
        return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}

    def get_hook(self) -> SparkPipelineHook:
        """The hook of this task's connection; a connection that does not exist or cannot be read fails the task."""
        options = dict(self.backend_options)
        conf = self.lineage_spark_conf(self.spark_conf)  # OpenLineage's listener when lineage is on (docs/lineage.md)
        if conf:
            options["conf"] = conf
        hook = SparkPipelineHook(self.conn_id, backend=self.backend, backend_options=options, **self.rest_retry_arguments)
        try:
            hook.check_connection()
        except SparkConnectionNotFound as exc:
            raise AirflowFailException(f"{exc}; nothing was submitted") from exc
        return hook

    # -- the run loop: RunService decides, the operator waits the Airflow way (defer) ---------------------

    def _store(self, context: Any) -> RunStore:
        owner, ti = self._owner(context), context["ti"]
        return RunStore(self.state_dir, owner, task_store=context.get("task_state_store"), publish=ti.xcom_push,
                        logger=self.log)

    def _submitter(self, spec_path: str | None = None, hook: SparkPipelineHook | None = None) -> SubmitRun:
        """How this operator starts a run (the spec validated again and the hook made when a restart submits)."""

        def submit(run_id: str, previous: JobHandle | None) -> JobHandle:
            path = spec_path or self._validated_spec()[0]
            return (hook or self.get_hook()).submit_job(path, run_id, self.state_dir, previous=previous,
                                                        **self._submission_options())

        return submit

    def _service(self, store: RunStore, submit: SubmitRun) -> RunService:
        return RunService(store, submit, SUBMISSION_FAILURES, LEASE_REFUSALS)

    def _resumed(self, context: Any) -> RunService:
        """The run service as the last deferral left it (its store), with the recovery options resolved now."""
        self._resolve_state_dir()
        store = self._store(context)
        try:
            return RunService.resume(store, self._submitter(), self._carried_options,
                                     refusals=SUBMISSION_FAILURES, lease_refusals=LEASE_REFUSALS)
        except RunStateLost as exc:
            raise AirflowFailException(str(exc)) from None

    def _carried_options(self, carried: dict[str, Any]):
        return self._recovery_options(carried=carried)

    def _resolve_state_dir(self) -> None:
        """The state dir as an absolute, writable folder: the driver runs in another working directory."""
        try:
            self.state_dir = usable_state_dir(self.state_dir, option="state_dir")
        except StateDirError as exc:
            raise AirflowFailException(str(exc)) from None

    def execute(self, context: Any) -> Any:
        self._resolve_state_dir()
        spec_path, spec = self._validated_spec()
        self._conduit_dlq = dlq_location(spec)
        ti = context["ti"]
        ti.xcom_push(key=XCOM_DLQ, value=self._conduit_dlq)
        hook = self.get_hook()  # a connection that does not exist fails here, before anything runs
        options = self._recovery_options()
        self.log.info("pipeline %s: recovery options %s; %s backend (connection %s)", spec.id,
                      json.dumps(options.to_dict()), hook.backend_kind, self.conn_id)
        mapped = f"-{ti.map_index}" if ti.map_index >= 0 else ""
        service = self._service(self._store(context), self._submitter(spec_path, hook))
        return self._wait_for(service.start(options, readable_prefix=f"{ti.run_id}-{ti.task_id}{mapped}-t{ti.try_number}",
                                            pipeline_id=spec.id))

    def execute_complete(self, context: Any, event: dict | None = None, **kwargs: Any) -> Any:
        """The watcher's event (a ``WatchEvent``'s dict form) about the job this task watches."""
        service = self._resumed(context)
        try:
            step = service.advance(event)
        except WatchEventError as exc:
            raise AirflowException(f"unexpected trigger event (expected a SparkPipelineTrigger event: {exc}): {event!r}"[:500]) from None
        return self._wait_for(step)

    def resubmit(self, context: Any, event: Any = None, previous: dict | None = None, **kwargs: Any) -> Any:
        """After the backoff delay: submit the next run (the previous one confirmed gone) and watch it."""
        over = BackoffOver(optional_handle(previous))
        step = self._resumed(context).advance(over)
        return self._wait_for(step)

    def _wait_for(self, step: Next) -> Any:
        """Wait the Airflow way for what the run service asks: defer to the watcher or the backoff timer; or end
        the task with the pipeline: its run summary (XCom), or a failure (degraded)."""
        self._log_lines(step)
        if isinstance(step, Finished):
            self._conduit_outcome = step  # how the pipeline ended, for what reads it after the task (lineage facets)
            if step.summary is None:
                raise AirflowFailException(step.message)
            return self._summary(step.summary)
        if isinstance(step, WaitBackoff):  # the job the next submission must see gone travels with the wait
            previous = step.previous.to_dict() if step.previous else None
            self.defer(trigger=_backoff_timer(step.seconds, self.state_dir), method_name="resubmit",
                       kwargs={"previous": previous})
        self._conduit_handle = step.handle
        trigger = SparkPipelineTrigger(step.handle, poll_interval=self.poll_interval, report_progress=step.report_progress,
                                       status_failures_tolerated=self.status_failures_tolerated)
        self.defer(trigger=trigger, method_name="execute_complete")

    def _submission_options(self) -> dict[str, Any]:
        """Further ``submit_job`` arguments of this kind of run (the DLQ replay operator adds its request)."""
        return {}

    def _summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The run summary a finished task returns (XCom); the replay operator adds its totals."""
        return summary

    def _log_lines(self, step: Next) -> None:
        degraded = isinstance(step, Finished) and step.ending is Ending.DEGRADED
        for line in step.lines:
            (self.log.error if degraded and line is step.lines[-1] else self.log.info)(line)

    def on_kill(self) -> None:
        """Marking the task failed or clearing it stops the Spark job (gracefully where it can) and records ``stopped``."""
        handle = self._conduit_handle
        if handle is None:
            handle = optional_handle((StateDir(self.state_dir).read_recovery() or {}).get("current"))
        if handle:
            self.log.info("stopping run %s", handle.run_id)
            try:
                SparkPipelineHook.kill_job(handle, graceful=True)
            finally:
                record_stopped(self.state_dir, handle.run_id, "stopped by user (task killed)")


def _renamed(old_name: str, old_value: Any, name: str, value: Any) -> Any:
    """An argument given by its deprecated name: warn, and use it (giving both is an error)."""
    if old_value is None:
        return value
    if value is not None:
        raise ValueError(f"{old_name} and {name} are the same argument: give {name} only")
    warnings.warn(f"{old_name} is deprecated: use {name}", AirflowProviderDeprecationWarning, stacklevel=3)
    return old_value


def _backoff_timer(delay_seconds: float, state_dir: str) -> BackoffTrigger:
    from airflow.sdk import timezone

    return BackoffTrigger(timezone.utcnow() + timedelta(seconds=max(0.0, float(delay_seconds))), os.path.abspath(state_dir))
