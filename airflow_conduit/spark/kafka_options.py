"""A Kafka plugin's settings -> the ``kafka.``-prefixed options of Spark's Kafka source and sink.

The client properties come from ``pipeline/kafka_settings.java_client_properties``; an Airflow connection
named by the setting ``connection`` is read from the driver's environment (``AIRFLOW_CONDUIT_CONNECTIONS``,
put there by the operator or ``airflow-conduit run``). Secret values are revealed here only, at the moment
they become Spark options (Spark redacts option values matching ``spark.redaction.regex`` in its plans and
UI; the Kafka client prints password-type properties as ``[hidden]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_conduit.pipeline.kafka_settings import (
    CONNECTIONS_ENV,
    KafkaClientConfigError,
    java_client_properties,
)
from airflow_conduit.pipeline.secrets import Secret


def handed_over_connections(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The connections the control plane resolved for this run (``{}`` when none)."""
    text = (os.environ if environ is None else environ).get(CONNECTIONS_ENV)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise KafkaClientConfigError(f"the environment variable {CONNECTIONS_ENV} is not a JSON object") from None
    if not isinstance(value, dict):
        raise KafkaClientConfigError(f"the environment variable {CONNECTIONS_ENV} is not a JSON object")
    return value


def client_options(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark's ``kafka.*`` options of a Kafka plugin's settings (secrets revealed: hand them to Spark only)."""
    props = java_client_properties(settings, handed_over_connections(environ) if settings.get("connection") else None)
    return {
        f"kafka.{name}": value.get_secret_value() if isinstance(value, Secret) else str(value)
        for name, value in props.items()
    }


def bootstrap_servers(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """The bootstrap servers a Kafka plugin talks to (no secrets: fit for messages and reports)."""
    props = java_client_properties(settings, handed_over_connections(environ) if settings.get("connection") else None)
    return str(props["bootstrap.servers"])
