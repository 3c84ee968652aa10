"""Conduit's error classification and backoff for any task, through Airflow 3.3's ``retry_policy`` (AIP-105).

For users of the plain ``SparkSubmitOperator`` (or any operator): one line gives
"fatal errors fail at once, transient ones retry with Conduit's backoff"::

    SparkSubmitOperator(..., retries=5, retry_policy=SparkErrorRetryPolicy(min_delay="10s", max_delay="5m"))

The failure text (the exception, its causes, and the spark-submit output tail
the Spark provider puts in its exception) and spark-submit's exit code go
through the recovery engine's classifier (``recovery.classify``): the same
rules, codes and user ``error-rules`` as ``RecoveringSparkPipelineOperator``.
The delay of retry N is the policy's delay for restart N (``recovery.policies``).

Limits (Airflow's retry model, not ours): it cannot retry past the task's
``retries``; there is no ``max-retries-window`` and no healthy-period reset
(each Airflow try is one attempt); the pipeline is resubmitted from scratch on
each try. docs/operators.md compares it with the operator.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Mapping

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from airflow_conduit.recovery.classify import classify
from airflow_conduit.recovery.options import RecoveryOptions, policy_for

# SparkSubmitHook.submit: "Cannot execute: <cmd>. Error code is: 1." (the spark-submit exit code)
_SPARK_SUBMIT_EXIT = re.compile(r"Error code is: (-?\d+)")


def failure_text(exception: BaseException) -> str:
    """The exception and its causes, outermost first (the Spark provider appends spark-submit's output tail)."""
    parts, seen = [], set()
    current: BaseException | None = exception
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def spark_submit_exit_code(text: str) -> int | None:
    match = _SPARK_SUBMIT_EXIT.search(text)
    return int(match.group(1)) if match else None


class SparkErrorRetryPolicy(RetryPolicy):
    """Fail at once on a fatal error, retry a transient one after the recovery policy's backoff delay.

    :param options: recovery options (a ``RecoveryOptions`` or a mapping such as
        ``{"min-delay": "10s", "policy": "exponential", "error-rules": [...]}``); keyword arguments
        (``min_delay="10s"``) are merged over them. Only the delay options and ``error-rules`` matter here.
    """

    def __init__(self, options: RecoveryOptions | Mapping[str, Any] | None = None, **option_kwargs: Any):
        if isinstance(options, RecoveryOptions):
            mapping = options.to_dict()
        else:
            mapping = dict(options or {})
        mapping.update({key.replace("_", "-"): value for key, value in option_kwargs.items()})
        self.options = RecoveryOptions.from_mapping(mapping)
        self._policy = policy_for(self.options)

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None) -> RetryDecision:
        text = failure_text(exception)
        verdict = classify(text, self.options.error_rules, exit_code=spark_submit_exit_code(text))
        what = f"code {verdict.code}, {verdict.reason}"
        if verdict.fatal:
            return RetryDecision.fail(reason=f"fatal error ({what}): not retried")
        delay = self._policy.delay(max(1, int(try_number)))
        return RetryDecision.retry(
            delay=timedelta(seconds=delay),
            reason=f"transient error ({what}): retry in {delay:g}s (try {try_number} of {max_tries})",
        )

    def serialize(self) -> dict[str, Any]:
        return {"__type": type(self).__name__, "options": self.options.to_dict()}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> "SparkErrorRetryPolicy":
        return cls(data.get("options"))
