"""Deferrable sensors on a pipeline's state directory: its recovery state, and its dead letter queue."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Sequence

from airflow.sdk import BaseSensorOperator

from airflow_conduit.runs.state_dir import StateDir
from airflow_conduit.recovery.clock import parse_iso
from airflow_conduit.recovery.state import PipelineState
from airflow_conduit.triggers.state_dir import DeadLetterQueueTrigger, PipelineStateTrigger

PIPELINE_STATES = tuple(str(state) for state in PipelineState)


class PipelineStateSensor(BaseSensorOperator):
    """Wait until the pipeline kept in ``state_dir`` reaches one of ``target_states``.

    The state is the one the operator (or ``airflow-conduit run``) writes to ``STATE_DIR/recovery.json``
    at every transition. Deferrable by default: no worker slot is held while waiting.

    :param state_dir: the pipeline's state directory (the operator's ``state_dir``)
    :param target_states: e.g. ``["degraded"]`` for an alert, ``["running"]`` to wait for a start
    """

    template_fields: Sequence[str] = ("state_dir",)

    def __init__(
        self,
        *,
        state_dir: str,
        target_states: Sequence[str] = ("running",),
        deferrable: bool = True,
        poll_interval: float = 10.0,
        **kwargs: Any,
    ):
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        unknown = set(target_states) - set(PIPELINE_STATES)
        if unknown:
            raise ValueError(f"unknown pipeline state(s) {sorted(unknown)}: expected some of {PIPELINE_STATES}")
        self.state_dir = state_dir
        self.target_states = list(target_states)
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    def poke(self, context: Any) -> bool:
        state = StateDir(self.state_dir).pipeline_state()
        self.log.info("pipeline in %s is %s; waiting for %s", self.state_dir, state or "unknown", self.target_states)
        return state in self.target_states

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return str(StateDir(self.state_dir).pipeline_state())
        self.defer(
            trigger=PipelineStateTrigger(self.state_dir, self.target_states, self.poll_interval),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict | None = None) -> str:
        state = (event or {}).get("pipeline_state") or StateDir(self.state_dir).pipeline_state()
        self.log.info("pipeline in %s is %s", self.state_dir, state)
        return str(state)


class DeadLetterQueueSensor(BaseSensorOperator):
    """Succeed when the pipeline's DLQ received more than ``threshold`` records since ``since``.

    Counts come from the run reports in ``STATE_DIR/runs/`` (per-batch ``dlq`` counts with their
    times). For alerting DAGs: put a notification task downstream. Deferrable by default.

    :param state_dir: the pipeline's state directory
    :param threshold: succeed when the count is greater than this (templated)
    :param since: ISO-8601 time or datetime (templated, e.g. ``{{ data_interval_start }}``); None = ever
    """

    template_fields: Sequence[str] = ("state_dir", "since", "threshold")

    def __init__(
        self,
        *,
        state_dir: str,
        threshold: int = 0,
        since: str | datetime | None = None,
        deferrable: bool = True,
        poll_interval: float = 30.0,
        **kwargs: Any,
    ):
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.state_dir = state_dir
        self.threshold = threshold
        self.since = since
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    def _threshold(self) -> int:
        """The threshold as a number (it may come from a template such as ``{{ params.threshold }}``)."""
        try:
            return int(self.threshold)
        except (TypeError, ValueError):
            raise ValueError(f"{self.task_id}: threshold must be a whole number, got {self.threshold!r}") from None

    def _since(self) -> str | None:
        moment = parse_iso(self.since)
        return moment.isoformat() if moment else None

    def count(self) -> int:
        return StateDir(self.state_dir).dlq_records_since(self._since())

    def poke(self, context: Any) -> bool:
        count = self.count()
        self.log.info("DLQ of %s: %d records since %s (threshold %d)", self.state_dir, count, self._since() or "ever", self._threshold())
        return count > self._threshold()

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            super().execute(context)
            return self.count()
        if self.poke(context):
            return self.count()
        self.defer(
            trigger=DeadLetterQueueTrigger(self.state_dir, self._threshold(), self._since(), self.poll_interval),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict | None = None) -> int:
        count = (event or {}).get("dlq_records", self.count())
        self.log.info("DLQ of %s holds %d records since %s: more than %d", self.state_dir, count, self._since() or "ever", self._threshold())
        return count
