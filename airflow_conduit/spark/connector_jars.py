"""The Spark connector jars a pipeline needs (Kafka, Delta Lake), and the settings that load them.

PySpark's wheel ships no connectors. ``make install`` fetches pinned jars from Maven Central into
``jars/<connector>/lib/`` (versions in ``jars/<connector>/pom.xml``, nothing else); a pipeline gets the
jars of the plugins it uses and no others. On a cluster where those folders do not exist, set
``spark.jars.packages`` to the coordinates in docs/pipelines.md (connection extras or the operator's
``conf``): a connector named there is not added again from the local folders.

No pyspark import: the launchers (hooks) use this module as well as the Spark session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

JARS_DIR_ENV = "AIRFLOW_CONDUIT_JARS_DIR"
DEFAULT_JARS_DIR = Path(__file__).resolve().parents[2] / "jars"

# Connector -> the artifact whose presence in ``spark.jars.packages`` means the user supplies it.
CONNECTOR_ARTIFACTS = {
    "kafka": "spark-sql-kafka-0-10",
    "delta": "delta-spark",
}
# Session settings a connector needs besides its jars.
CONNECTOR_SETTINGS: dict[str, dict[str, str]] = {
    "delta": {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    },
}

# Session settings a connector gets in a local session (master ``local[...]``) unless set. Delta rebuilds a
# table's state (a write with a transaction id reads the table's transaction ids from it) in
# ``snapshotPartitions`` tasks, 50 by default, sized for a cluster and a big table: on a few local cores the
# tasks' own cost is most of each micro-batch's write.
LOCAL_SETTINGS: dict[str, dict[str, str]] = {
    "delta": {"spark.databricks.delta.snapshotPartitions": "1"},
}


def local_settings(connectors: set[str] | frozenset[str]) -> dict[str, str]:
    """The ``LOCAL_SETTINGS`` of ``connectors``."""
    return {key: value for connector in sorted(connectors) for key, value in LOCAL_SETTINGS.get(connector, {}).items()}


class ConnectorJarsMissing(RuntimeError):
    """A pipeline needs a connector whose jars are neither installed here nor named in spark.jars.packages."""


def jars_dir() -> Path:
    return Path(os.environ.get(JARS_DIR_ENV) or DEFAULT_JARS_DIR)


def connectors_of(spec: Any) -> set[str]:
    """The connectors (``kafka``, ``delta``) a pipeline spec's sources, destinations and DLQ use."""
    plugins = {source.plugin for source in spec.sources}
    plugins |= {destination.plugin for destination in spec.destinations}
    plugins.add(spec.dead_letter_queue.plugin)
    return {plugin for plugin in plugins if plugin in CONNECTOR_ARTIFACTS}


def connector_jars(connector: str) -> list[str]:
    """The installed jars of one connector, sorted; ``ConnectorJarsMissing`` when there are none."""
    folder = jars_dir() / connector / "lib"
    jars = sorted(str(path) for path in folder.glob("*.jar"))
    if not jars:
        artifact = CONNECTOR_ARTIFACTS[connector]
        raise ConnectorJarsMissing(
            f"the {connector} connector's jars are not installed in {folder}: run `make install`, set "
            f"{JARS_DIR_ENV} to a folder holding {connector}/lib/*.jar, or name {artifact} in spark.jars.packages "
            "(docs/pipelines.md, connector jars)"
        )
    return jars


def _supplied_as_package(connector: str, conf: dict[str, Any]) -> bool:
    packages = str(conf.get("spark.jars.packages") or "")
    return CONNECTOR_ARTIFACTS[connector] in packages


def with_connectors(conf: dict[str, Any], connectors: set[str] | frozenset[str]) -> dict[str, Any]:
    """``conf`` with the jars and settings of ``connectors`` added; the user's own ``spark.jars`` kept in front,
    a connector already named in ``spark.jars.packages`` not added again, a setting the user chose kept."""
    out = dict(conf)
    jars = [jar for jar in str(out.get("spark.jars") or "").split(",") if jar]
    for connector in sorted(connectors):
        if not _supplied_as_package(connector, out):
            jars += [jar for jar in connector_jars(connector) if jar not in jars]
        for key, value in CONNECTOR_SETTINGS.get(connector, {}).items():
            out.setdefault(key, value)
    if jars:
        out["spark.jars"] = ",".join(jars)
    return out


def connectors_of_spec_file(spec_path: str | os.PathLike) -> set[str]:
    """``connectors_of`` for a spec file (the launchers have the path, not the model). A spec that does not load
    needs no connector here: the job refuses it itself, with the spec's problems, through the run report."""
    from airflow_conduit.pipeline.loader import load_pipeline
    from airflow_conduit.pipeline.problems import SpecError

    try:
        return connectors_of(load_pipeline(str(spec_path)))
    except SpecError:
        return set()
