"""Pipeline spec: the pure model of a Conduit-style pipeline (no airflow, no pyspark).

``load_pipeline(path)`` reads and validates a spec file (raising ``SpecError``
with every problem), ``validate_file(path)`` lists the problems, and
``redact``/``redacted_dict`` give secret-free copies for logs, reports and the DLQ.
"""

from airflow_conduit.pipeline.loader import load_pipeline, load_pipeline_from_string, validate_file
from airflow_conduit.pipeline.model import (
    DeadLetterQueueSpec,
    DestinationSpec,
    ErrorsSpec,
    PipelineSpec,
    ProcessorSpec,
    RetrySpec,
    SourceSpec,
)
from airflow_conduit.pipeline.problems import Problem, SpecError
from airflow_conduit.pipeline.secrets import Secret, redact, redacted_dict, reveal

__all__ = [
    "DeadLetterQueueSpec",
    "DestinationSpec",
    "ErrorsSpec",
    "PipelineSpec",
    "Problem",
    "ProcessorSpec",
    "RetrySpec",
    "Secret",
    "SourceSpec",
    "SpecError",
    "load_pipeline",
    "load_pipeline_from_string",
    "redact",
    "redacted_dict",
    "reveal",
    "validate_file",
]
