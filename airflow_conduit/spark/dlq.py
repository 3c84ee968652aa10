"""DLQ records: the original record plus its error context (KIP-298, Kafka Connect's DLQ headers).

One flat row per nacked record, so that any destination type (file json /
csv / parquet, jdbc, log) can hold it. Column names follow Kafka Connect's
``__connect.errors.*`` headers where one exists.
"""

from __future__ import annotations

import json

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.pipeline.model import PipelineSpec
from airflow_conduit.pipeline.secrets import redact
from airflow_conduit.spark import columns as C


def component_configs(spec: PipelineSpec) -> dict[str, str]:
    """component id -> JSON of its settings with secrets masked (for include-configs)."""
    out: dict[str, str] = {}
    for comp in spec.components():
        out[comp.id] = json.dumps({"plugin": comp.plugin, "settings": redact(dict(comp.settings))}, default=str, sort_keys=True)
    return out


def dlq_records(nacked: DataFrame, spec: PipelineSpec, *, run_id: str, batch_id: int, time_of_error: str) -> DataFrame:
    """``nacked``: rows with a non-null error; returns the DLQ rows in source order."""
    dlq = spec.dead_letter_queue
    err = F.col(C.ERROR)
    if dlq.include_configs:
        configs = component_configs(spec)
        pairs = []
        for key, value in configs.items():
            pairs += [F.lit(key), F.lit(value)]
        configs_col = F.try_element_at(F.create_map(*pairs), err["component_id"]) if pairs else F.lit(None)
    else:
        configs_col = F.lit(None)
    return nacked.orderBy(*C.ORDER_COLUMNS).select(
        F.lit(spec.id).alias("pipeline_id"),
        F.lit(run_id).alias("run_id"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.col(C.SOURCE_ID).alias("source_id"),
        F.col(C.FILE).alias("source_file"),
        F.col(C.POSITION).alias("source_position"),
        err["stage"].alias("stage"),
        err["component_id"].alias("component_id"),
        err["component_type"].alias("component_type"),
        err["exception_class"].alias("exception_class"),
        err["message"].alias("exception_message"),
        err["stacktrace"].alias("exception_stacktrace"),
        F.coalesce(err["attempt"], F.lit(1)).alias("attempt"),
        F.lit(time_of_error).alias("time_of_error"),
        (F.col(C.RAW) if dlq.include_messages else F.lit(None).cast("string")).alias("record"),
        configs_col.cast("string").alias("configs"),
    )
