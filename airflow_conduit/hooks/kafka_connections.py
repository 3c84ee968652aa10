"""The Airflow connections a pipeline's Kafka plugins name (setting ``connection``), resolved for its Spark job.

The Spark job never imports Airflow. Before each submission the hook reads every ``kafka`` connection
the spec names (``BaseHook.get_connection``: the metadata database, ``AIRFLOW_CONN_*`` variables or a
secrets backend, as any Airflow task) and hands them to the driver in one environment variable,
``AIRFLOW_CONDUIT_CONNECTIONS`` (JSON ``{conn_id: {conn_type, host, port, login, password, extra}}``):
never in argv, never in a log line. The job maps them to Kafka client properties
(``pipeline/kafka_settings.java_client_properties``). Resolved anew for every run, so a rotated
password is picked up at the next restart.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow_conduit.pipeline.kafka_settings import CONNECTION_TYPE, CONNECTIONS_ENV


def kafka_connection_ids(spec) -> dict[str, str]:
    """conn id -> where the spec names it (``source 'in'``), for every Kafka plugin with a ``connection``."""
    named: dict[str, str] = {}
    components = [*(("source", s) for s in spec.sources), *(("destination", d) for d in spec.destinations)]
    for role, component in components:
        if component.plugin == "kafka" and component.settings.get("connection"):
            named.setdefault(str(component.settings["connection"]), f"{role} {component.id!r}")
    dlq = spec.dead_letter_queue
    if dlq.plugin == "kafka" and dlq.settings.get("connection"):
        named.setdefault(str(dlq.settings["connection"]), "the dead letter queue")
    return named


def resolve(conn_id: str, where: str, spec_file: str) -> dict[str, Any]:
    """One connection as the job reads it; a missing one or one of another type is a named error."""
    from airflow.sdk import BaseHook  # here: a spec that names no connection runs without loading Airflow
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_conduit.hooks.errors import KafkaConnectionError

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise KafkaConnectionError(
            f"{spec_file}: settings.connection of {where}: the Airflow connection {conn_id!r} does not exist; define "
            f"it with type {CONNECTION_TYPE!r} and the client config in its extra (airflow connections add, "
            f"AIRFLOW_CONN_{conn_id.upper()}, or a secrets backend)"
        ) from None
    if conn.conn_type and conn.conn_type != CONNECTION_TYPE:
        raise KafkaConnectionError(
            f"{spec_file}: settings.connection of {where}: the Airflow connection {conn_id!r} has type "
            f"{conn.conn_type!r}; a Kafka plugin needs type {CONNECTION_TYPE!r}"
        )
    return {
        "conn_type": conn.conn_type,
        "host": conn.host,
        "port": conn.port,
        "login": conn.login,
        "password": conn.password,
        "extra": conn.extra_dejson,
    }


def driver_environment(spec_path: str | os.PathLike) -> dict[str, str]:
    """``{AIRFLOW_CONDUIT_CONNECTIONS: json}`` for the job of ``spec_path``; ``{}`` when it names no connection.
    A spec that does not load names none: the job refuses it itself, with its problems, in the run report."""
    from airflow_conduit.pipeline.loader import load_pipeline
    from airflow_conduit.pipeline.problems import SpecError

    try:
        spec = load_pipeline(str(spec_path))
    except SpecError:
        return {}
    named = kafka_connection_ids(spec)
    if not named:
        return {}
    resolved = {conn_id: resolve(conn_id, where, os.fspath(spec_path)) for conn_id, where in named.items()}
    return {CONNECTIONS_ENV: json.dumps(resolved)}


def check(spec, spec_file: str) -> None:
    """Refuse, before anything starts, a spec whose Kafka connections are missing or of another type."""
    for conn_id, where in kafka_connection_ids(spec).items():
        resolve(conn_id, where, spec_file)


def hand_over_connections(backend, spec_path: str) -> None:
    """Put the Kafka connections the spec names in the driver's environment (``backend.env``; a backend without
    one, the standalone one, hands its driver none)."""
    env = getattr(backend, "env", None)
    if env is None:
        return
    env.pop(CONNECTIONS_ENV, None)
    env.update(driver_environment(spec_path))
