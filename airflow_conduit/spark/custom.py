"""The ``custom`` processor: a user's Python function, record in, record out, errors caught per record.

The function gets the record as a dict of JSON values (timestamps as ISO
strings) and returns a dict (the new record) or None (drop it: filtered,
acked). An exception nacks that record only: it goes to the DLQ with the
exception class, message and stack trace. Exceptions that say "try again"
(``TransientError``, ``ConnectionError``, ``TimeoutError``) are retried with
exponential backoff (tenacity) within ``errors.retry.timeout`` with at most
``errors.retry.delay.max`` between attempts (KIP-298); the retries are counted.

The function is shipped to the executors by value (cloudpickle), so its
module does not have to be installed there; what it imports does.
"""

from __future__ import annotations

import importlib
import json
import traceback
from typing import Any, Callable

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.pipeline.model import ProcessorSpec
from airflow_conduit.recovery.record_retry import record_retrying
from airflow_conduit.spark import columns as C

RESULT = "__ac_custom"
RESULT_TYPE = (
    "struct<out:string,dropped:boolean,exception_class:string,message:string,stacktrace:string,attempts:int>"
)


def load_function(ref: str) -> Callable[[dict[str, Any]], Any]:
    """Import ``package.module:function`` (a dotted attribute path after the colon is allowed)."""
    module_name, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"custom processor function {ref!r} is not callable")
    return obj


def _ship_by_value(fn: Callable) -> None:
    module = importlib.import_module(fn.__module__)
    if module.__name__ in ("__main__", "builtins"):
        return
    try:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    except Exception:  # noqa: BLE001 - by reference still works when the module is installed on executors
        pass


def _qualified(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def make_caller(fn: Callable, timeout_s: float, delay_max_s: float) -> Callable:
    """The per-record function run in the Python workers (returns a RESULT_TYPE tuple)."""

    def call(is_active: bool, record_json: str):
        if not is_active:
            return (None, False, None, None, None, 0)
        record = json.loads(record_json) if record_json else {}
        attempts = 0

        def once():
            nonlocal attempts
            attempts += 1
            return fn(dict(record))

        try:
            result = record_retrying(timeout_s, delay_max_s)(once) if timeout_s > 0 else once()
        except Exception as exc:  # noqa: BLE001 - every per-record failure becomes a DLQ record
            return (None, False, _qualified(exc), str(exc)[:4000], traceback.format_exc()[-8000:], attempts)
        if result is None:
            return (None, True, None, None, None, attempts)
        if not isinstance(result, dict):
            message = f"custom processor must return a dict or None, got {type(result).__name__}"
            return (None, False, "TypeError", message, None, attempts)
        try:
            return (json.dumps(result, default=str), False, None, None, None, attempts)
        except (TypeError, ValueError) as exc:
            return (None, False, _qualified(exc), f"result is not JSON serialisable: {exc}", None, attempts)

    return call


def _output_schema(df: DataFrame, input_schema: T.StructType) -> T.StructType:
    """Input fields the function kept (with their input types), then new fields (types inferred); ``df`` has outputs."""
    outs = df.where(F.col(RESULT)["out"].isNotNull()).select(F.col(RESULT)["out"].alias("out"))
    inferred = df.sparkSession.read.json(outs.rdd.map(lambda row: row[0]))
    names = set(inferred.schema.fieldNames())
    kept = [f for f in input_schema.fields if f.name in names]
    new = [f for f in inferred.schema.fields if f.name not in set(input_schema.fieldNames())]
    return T.StructType(kept + new)


def apply_custom(df: DataFrame, proc: ProcessorSpec, ctx) -> DataFrame:
    fn = load_function(str(proc.settings["function"]))
    _ship_by_value(fn)
    retry = ctx.spec.errors.retry
    caller = F.udf(make_caller(fn, float(retry.timeout_seconds), float(retry.delay_max_seconds)), RESULT_TYPE)
    user = C.user_columns(df)
    input_schema = T.StructType([df.schema[c] for c in user])
    record = F.to_json(F.struct(*[F.col(C.quote(c)) for c in user]), {"ignoreNullFields": "false"})
    # computed once (cached by the job below): the function runs once per record, whatever reads the
    # batch afterwards; the runner releases the cache when the batch ends
    called = df.withColumn(RESULT, caller(C.active(), record)).persist(StorageLevel.MEMORY_AND_DISK)
    ctx.cached.append(called)
    stats = called.agg(  # one pass for both: retries (KIP-298 counter) and whether any record came out
        F.coalesce(F.sum(F.greatest(F.col(RESULT)["attempts"] - 1, F.lit(0))), F.lit(0)).alias("retries"),
        F.count(F.col(RESULT)["out"]).alias("outputs"),
    ).first()
    ctx.retries += int(stats["retries"])
    schema = _output_schema(called, input_schema) if stats["outputs"] else input_schema
    res = F.col(RESULT)
    parsed = F.from_json(res["out"], schema)
    out = called.select(
        *[F.col(c) for c in C.internal_columns(called)],
        *[parsed[f.name].alias(f.name) for f in schema.fields],
    )
    out = C.with_error(
        out,
        res["exception_class"].isNotNull(),
        stage="processor",
        component_id=proc.id,
        component_type=proc.plugin,
        exception_class=res["exception_class"],
        message=res["message"],
        stacktrace=res["stacktrace"],
        attempt=res["attempts"],
    )
    out = out.withColumn(C.FILTERED, F.col(C.FILTERED) | (C.active() & F.coalesce(res["dropped"], F.lit(False))))
    return out.drop(RESULT)
