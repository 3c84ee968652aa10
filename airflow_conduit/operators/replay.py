"""DeadLetterQueueReplayOperator: replay a pipeline's dead-lettered records through its current spec, on Spark.

It is the pipeline operator with another kind of run: the same spec, state
directory, Spark connection and recovery options; the job is submitted through
``SparkPipelineHook`` with ``--replay`` (``spark/entrypoint.py`` runs
``spark/replay.py``), watched by the same deferred trigger, and a failure goes
to the same recovery engine (restart with backoff, or degrade). A replay that
was killed is resumed by the next submission with the same records and batch
id, so a restart never writes a record twice.

The return value (XCom) is the pipeline operator's run summary with
``replay``: replayed, now passing per destination, still failing, skipped as
already replayed (and, for a dry run, what would still fail grouped by error).
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk.exceptions import AirflowFailException

from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
from airflow_conduit.pipeline.replay_request import ReplayFilter, ReplayRequest, ReplayRequestError, as_bool

FILTER_ARGUMENTS = ("stages", "components", "error_classes", "rules", "batch_min", "batch_max", "since", "until")


class DeadLetterQueueReplayOperator(RecoveringSparkPipelineOperator):
    """Replay the DLQ records of the pipeline kept in ``state_dir`` through its (fixed) spec.

    Records that now pass are written to the destinations exactly once, under the replay's own batch
    id; records that still fail go back to the DLQ with their new error and a replay count; a record
    is never replayed twice. Works for file and JDBC DLQs. Runs one driver on the state dir like the
    pipeline (its lease): schedule it when the pipeline is not running (e.g. downstream of it).

    Every argument of ``RecoveringSparkPipelineOperator`` (spec, state_dir, conn_id, recovery options,
    poll_interval, backend_options; with ``backend_options={"faults": ...}`` in tests, ``"batch": K`` of
    ``crash_after_destination`` names replay K), and:

    :param stages: only records failed at these stages (``source``, ``processor``, ``destination``...)
    :param components: only records failed by these component ids
    :param error_classes: only records with these ``exception_class`` values
    :param rules: only records these expectation rules dropped
    :param batch_min/batch_max: only records of pipeline batches in this range
    :param since/until: only records dead-lettered in [since, until) (ISO-8601; templated, e.g. ``{{ data_interval_start }}``)
    :param dry_run: report what would pass and what would still fail, grouped by error; write nothing
    :param force: also take records whose spec is unchanged since they failed (docs/dlq.md, the replay rule)

    The filters are templated; a list may be given as a list, as comma-separated text or as JSON
    (``"{{ params.rules | tojson }}"``); empty text or ``None`` means no filter.
    """

    template_fields: Sequence[str] = (*RecoveringSparkPipelineOperator.template_fields, *FILTER_ARGUMENTS, "dry_run", "force")
    ui_color = "#fdf1dc"
    lineage_reads_dlq = True  # its lineage input is the DLQ (operators/lineage.py)

    def __init__(
        self,
        *,
        stages: list[str] | str | None = None,
        components: list[str] | str | None = None,
        error_classes: list[str] | str | None = None,
        rules: list[str] | str | None = None,
        batch_min: int | str | None = None,
        batch_max: int | str | None = None,
        since: str | None = None,
        until: str | None = None,
        dry_run: bool | str = False,
        force: bool | str = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.stages = stages
        self.components = components
        self.error_classes = error_classes
        self.rules = rules
        self.batch_min = batch_min
        self.batch_max = batch_max
        self.since = since
        self.until = until
        self.dry_run = dry_run
        self.force = force

    def replay_request(self) -> ReplayRequest:
        """The (rendered) arguments as a checked request; a bad one fails the task naming the argument."""
        values = {name: getattr(self, name) for name in FILTER_ARGUMENTS}
        values["exception_classes"] = values.pop("error_classes")
        try:
            filters = ReplayFilter.from_mapping(values, where=f"{self.task_id}: replay filters")
            return ReplayRequest(filters, as_bool(self.dry_run, f"{self.task_id}: dry_run"), as_bool(self.force, f"{self.task_id}: force"))
        except ReplayRequestError as exc:
            raise AirflowFailException(f"{exc}; nothing was submitted") from None

    def execute(self, context: Any) -> Any:
        request = self.replay_request()  # refused before the spec, the connection or Spark
        self.log.info("DLQ replay%s; filters: %s", " (dry run: nothing is written)" if request.dry_run else "",
                      request.filters.to_dict() or "none (every replayable record not replayed yet)")
        return super().execute(context)

    def _submission_options(self) -> dict[str, Any]:
        return {"replay": self.replay_request().to_json()}

    def _summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The run summary with the replay's totals beside it (and in the task log)."""
        from airflow_conduit.runs.report import replay_totals_text

        summary = super()._summary(summary)
        totals = (summary.get("report") or {}).get("replay")
        summary["replay"] = totals
        if totals:
            self.log.info("%s", replay_totals_text(totals))
            for error, count in sorted((totals.get("errors") or {}).items(), key=lambda item: -item[1]):
                self.log.info("  would still fail: %d  %s", count, error)
        return summary
