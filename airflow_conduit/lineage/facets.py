"""A pipeline task's OpenLineage: its datasets with their facets, built from the spec and the run reports.

Imports openlineage (Airflow's OpenLineage provider installs it): only the operators' lineage mixin imports this
module, when the provider's listener asks for the facets. Names and counts come from ``lineage.datasets``.

- START: inputs (every source's dataset), outputs (every destination's and the DLQ's);
- COMPLETE: the same, with on each input the DLQ's records of that source per stage and error class
  (``conduit_deadLetterQueue``, and the standard ``dataQualityMetrics`` with the records read when the pipeline has
  one input), the expectation rules checking it (``dataQualityAssertions``), and on each output the records written
  (``outputStatistics``); the run's totals as ``conduit_totals``;
- FAIL: the same, and the last failure's classification (``conduit_failure``; the provider adds ``errorMessage``
  from the task's exception).
"""

from __future__ import annotations

from typing import Any

import attr
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    InputDatasetFacet,
    RunFacet,
    data_quality_assertions_dataset,
    data_quality_metrics_input_dataset,
    output_statistics_output_dataset,
)

from airflow_conduit.lineage.datasets import Failure, PipelineDataset, PipelineDatasets, RunCounts, rule_sources
from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID

# No schema of ours is hosted: the facets are described in the package's docs/lineage.md, named relative to it.
FACETS_DOC = "docs/lineage.md"
DLQ_FACET = "conduit_deadLetterQueue"
FAILURE_FACET = "conduit_failure"
TOTALS_FACET = "conduit_totals"


@attr.define
class DeadLetterQueueInputDatasetFacet(InputDatasetFacet):
    """The DLQ records that came from this input in the task's runs: in all, and per stage and error class."""

    records: int
    byStage: dict[str, dict[str, int]]  # noqa: N815 - stage -> error class -> records
    deadLetterQueue: dict[str, str] | None = attr.field(default=None)  # noqa: N815 - the DLQ dataset: namespace, name

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_DOC}#dead-letter-queue-facet"


@attr.define
class PipelineFailureRunFacet(RunFacet):
    """How the pipeline's last failure was classified: fatal (degraded) or transient (restarted), code, cause."""

    fatal: bool
    code: int
    codeName: str  # noqa: N815
    message: str
    reason: str = ""
    stage: str | None = attr.field(default=None)
    exceptionClass: str | None = attr.field(default=None)  # noqa: N815
    degradedReason: str | None = attr.field(default=None)  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_DOC}#failure-facet"


@attr.define
class PipelineTotalsRunFacet(RunFacet):
    """The records the task's runs read, filtered, sent to the DLQ and wrote per destination."""

    read: int
    filtered: int
    deadLettered: int  # noqa: N815
    written: dict[str, int]
    sparkRuns: int  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_DOC}#totals-facet"


def _qualified(dataset: PipelineDataset | None) -> dict[str, str] | None:
    return None if dataset is None else {"namespace": dataset.name.namespace, "name": dataset.name.name}


def input_datasets(datasets: PipelineDatasets, counts: RunCounts | None = None, spec: Any = None) -> list[InputDataset]:
    """The inputs; with ``counts``, each with its DLQ facet, its expectation rules and (one input) the records read."""
    found = []
    rules = rule_sources(spec) if spec is not None and counts is not None else {}
    for dataset in datasets.inputs:
        facets: dict[str, Any] = {}
        if counts is not None:
            by_stage = counts.dlq_of_source(dataset.component_id)
            facets[DLQ_FACET] = DeadLetterQueueInputDatasetFacet(
                records=sum(n for classes in by_stage.values() for n in classes.values()),
                byStage=by_stage, deadLetterQueue=_qualified(datasets.dlq))
            if len(datasets.inputs) == 1:
                facets["dataQualityMetrics"] = data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet(
                    columnMetrics={}, rowCount=counts.read)
            assertions = _assertions(counts, rules, dataset.component_id)
            if assertions:
                facets["dataQualityAssertions"] = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
                    assertions=assertions)
        found.append(InputDataset(namespace=dataset.name.namespace, name=dataset.name.name, inputFacets=facets))
    return found


def _assertions(counts: RunCounts, rules: dict[str, tuple[str, ...]], source_id: str) -> list[Any]:
    """Each expectation rule checking ``source_id``'s records: success when no record failed it."""
    found = []
    for processor, named in sorted(counts.expectations.items()):
        if source_id not in rules.get(processor, ()):
            continue
        for name, rule in sorted(named.items()):
            passed, failed = int(rule.get("passed") or 0), int(rule.get("failed") or 0)
            found.append(data_quality_assertions_dataset.Assertion(
                assertion="expect", success=failed == 0, name=f"{processor}.{name}", severity=rule.get("action"),
                expected="0 failed", actual=f"{failed} failed, {passed} passed"))
    return found


def output_datasets(datasets: PipelineDatasets, counts: RunCounts | None = None) -> list[OutputDataset]:
    """The outputs (destinations, then the DLQ); with ``counts``, each with the records written to it."""
    found = []
    for dataset in datasets.outputs:
        facets: dict[str, Any] = {}
        if counts is not None:
            rows = counts.dlq if dataset.component_id == DEAD_LETTER_QUEUE_ID else counts.written.get(dataset.component_id, 0)
            facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=int(rows))
        found.append(OutputDataset(namespace=dataset.name.namespace, name=dataset.name.name, outputFacets=facets))
    return found


def totals_facet(counts: RunCounts) -> PipelineTotalsRunFacet:
    return PipelineTotalsRunFacet(read=counts.read, filtered=counts.filtered, deadLettered=counts.dlq,
                                  written=dict(counts.written), sparkRuns=counts.runs)


def failure_facets(failure: Failure) -> dict[str, Any]:
    """The classification of the failure as ``conduit_failure``. The standard ``errorMessage`` facet is the
    provider's own, from the task's exception: a degraded pipeline's message names the classification too."""
    return {
        FAILURE_FACET: PipelineFailureRunFacet(
            fatal=failure.fatal, code=failure.code, codeName=failure.code_name, message=failure.message,
            reason=failure.reason, stage=failure.stage, exceptionClass=failure.exception_class,
            degradedReason=failure.degraded_reason),
    }


def operator_lineage(datasets: PipelineDatasets, counts: RunCounts | None = None, spec: Any = None,
                     failure: Failure | None = None):
    """The provider's ``OperatorLineage`` of a task."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    run_facets: dict[str, Any] = {}
    if counts is not None:
        run_facets[TOTALS_FACET] = totals_facet(counts)
    if failure is not None:
        run_facets.update(failure_facets(failure))
    return OperatorLineage(inputs=input_datasets(datasets, counts, spec), outputs=output_datasets(datasets, counts),
                           run_facets=run_facets)
