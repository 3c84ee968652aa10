"""Whether a pipeline task's Spark application reports lineage, and the Spark settings that make it do so.

Lineage is on when Airflow's OpenLineage provider is installed and configured (``[openlineage] transport``,
``config_path`` or ``config_conn_id`` set, ``disabled`` false: the provider's own ``conf.is_disabled``) and
the operator is not among ``[openlineage] disabled_for_operators``. Then the run's driver gets OpenLineage's
Spark listener (``io.openlineage:openlineage-spark_2.13``, pinned in ``spark/connectors/openlineage/pom.xml``)
and, following the provider's settings:

- ``spark_inject_parent_job_info``: the task's run as the parent of the Spark application's runs, through the
  provider's ``inject_parent_job_information_into_spark_properties``;
- ``spark_inject_transport_info``: the task's transport, through the provider's
  ``inject_transport_information_into_spark_properties`` (HTTP, or HTTP inside a composite); a ``file``
  transport, which the provider's helper leaves out, becomes the listener's file transport writing
  ``<log_file_path>.spark`` beside the task's file (two processes never append to one file).

The listener is added only when its application has a transport: injected, or the task's own
``spark.openlineage.transport.*`` in ``spark_conf``; otherwise the task-level events stand alone (a warning says so).
``spark.openlineage.disabled = true`` in a task's ``spark_conf`` keeps the listener off for that task.
With lineage off nothing here touches the Spark settings. docs/lineage.md.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from airflow_conduit.spark.connector_jars import folder_jars, pinned_packages

log = logging.getLogger(__name__)

LISTENER_CLASS = "io.openlineage.spark.agent.OpenLineageSparkListener"
LISTENER_SET = "openlineage"  # spark/connectors/openlineage/pom.xml, jars/openlineage/lib
LISTENER_ARTIFACT = "openlineage-spark"
TRANSPORT_PREFIX = "spark.openlineage.transport."
SPARK_FILE_SUFFIX = ".spark"

# openlineage-spark's own filters (docs/lineage.md, volume): no RDD job events, no SQL execution whose plan's root is
# one of these nodes, none of the largest facets. Its node filter applies the lists to plans that are not over a stream
# only: a micro-batch write inside ``foreachBatch`` is reported whatever they say (SparkNodesFilter, 1.53.0).
FILTERED_NODES = (
    "org.apache.spark.sql.execution.datasources.InsertIntoHadoopFsRelationCommand",
    "org.apache.spark.sql.execution.datasources.v2.OverwriteByExpression",
    "org.apache.spark.sql.catalyst.plans.logical.OverwriteByExpression",
    "org.apache.spark.sql.catalyst.plans.logical.AppendData",
    "org.apache.spark.sql.catalyst.plans.logical.CollectMetrics",
    "org.apache.spark.sql.delta.commands.WriteIntoDelta",
    "org.apache.spark.sql.execution.datasources.SaveIntoDataSourceCommand",
    "org.apache.spark.sql.catalyst.plans.logical.Project",
    "org.apache.spark.sql.catalyst.plans.logical.Filter",
    "org.apache.spark.sql.catalyst.plans.logical.Union",
    "org.apache.spark.sql.catalyst.plans.logical.Generate",
    "org.apache.spark.sql.catalyst.plans.logical.Join",
    "org.apache.spark.sql.catalyst.plans.logical.Sort",
)
FILTER_SETTINGS = {
    "spark.openlineage.filter.rddEventsDisabled": "true",
    "spark.openlineage.filter.deniedSparkNodes": "[" + ";".join(FILTERED_NODES) + "]",
    "spark.openlineage.facets.spark_unknown.disabled": "true",
    "spark.openlineage.facets.spark.logicalPlan.disabled": "true",
    "spark.openlineage.facets.debug.disabled": "true",
}
# The listener's own switch: in a task's ``spark_conf``, that task's runs get no listener at all (task-level events only).
LISTENER_OFF = "spark.openlineage.disabled"


def provider_conf():
    """The OpenLineage provider's ``conf`` module, or None when the provider is not installed."""
    try:
        from airflow.providers.openlineage import conf
    except ImportError:
        return None
    return conf


def lineage_enabled(operator: Any = None) -> bool:
    """Whether lineage is on for ``operator``'s task (see the module's docstring)."""
    conf = provider_conf()
    if conf is None:
        return False
    try:
        if conf.is_disabled():
            return False
        return operator is None or type(operator).__name__ not in conf.disabled_operators() and \
            f"{type(operator).__module__}.{type(operator).__name__}" not in conf.disabled_operators()
    except Exception:  # noqa: BLE001 - a provider config that cannot be read turns lineage off, not the task
        log.warning("the OpenLineage provider's configuration could not be read: lineage is off", exc_info=True)
        return False


def _has_transport(conf: Mapping[str, Any]) -> bool:
    return any(str(key).startswith(TRANSPORT_PREFIX) for key in conf)


def file_transport_settings(transport: Mapping[str, Any]) -> dict[str, str]:
    """A ``file`` transport of the task as the listener's: ``<log_file_path>.spark`` (the provider's helper
    injects HTTP transports only)."""
    path = transport.get("log_file_path")
    if transport.get("type") != "file" or not path:
        return {}
    return {"spark.openlineage.transport.type": "file",
            "spark.openlineage.transport.location": os.path.abspath(str(path)) + SPARK_FILE_SUFFIX}


def listener_classpath(conf: Mapping[str, Any]) -> dict[str, str]:
    """The listener's jar on the driver's classpath (``jars/openlineage/lib`` or ``$AIRFLOW_CONDUIT_JARS_DIR``),
    else its pinned coordinates in ``spark.jars.packages``; nothing when the user names it there already."""
    packages = [p.strip() for p in str(conf.get("spark.jars.packages") or "").split(",") if p.strip()]
    if any(len(p.split(":")) >= 2 and p.split(":")[1].startswith(LISTENER_ARTIFACT) for p in packages):
        return {}
    jars = folder_jars(LISTENER_SET)
    if jars:
        path = [p for p in str(conf.get("spark.driver.extraClassPath") or "").split(os.pathsep) if p]
        return {"spark.driver.extraClassPath": os.pathsep.join([*path, *(j for j in jars if j not in path)])}
    coordinates = [str(c) for c in pinned_packages(LISTENER_SET)]
    return {"spark.jars.packages": ",".join([*packages, *(c for c in coordinates if c not in packages)])}


def with_listener(conf: Mapping[str, Any], *, app_name: str | None = None) -> dict[str, Any]:
    """``conf`` with the listener added (``spark.extraListeners``, its jar) and the job's namespace and name."""
    out = dict(conf)
    listeners = [name.strip() for name in str(out.get("spark.extraListeners") or "").split(",") if name.strip()]
    if LISTENER_CLASS not in listeners:
        out["spark.extraListeners"] = ",".join([*listeners, LISTENER_CLASS])
    out.update(listener_classpath(out))
    conf_module = provider_conf()
    if conf_module is not None:
        out.setdefault("spark.openlineage.namespace", conf_module.namespace())
    if app_name:
        out.setdefault("spark.openlineage.appName", app_name)
    return out


def lineage_spark_conf(conf: Mapping[str, Any] | None, context: Any, *, app_name: str | None = None,
                       operator: Any = None) -> dict[str, Any] | None:
    """The task's Spark settings with lineage's added when lineage is on; ``conf`` itself, untouched, when off."""
    if not lineage_enabled(operator) or str((conf or {}).get(LISTENER_OFF, "")).strip().lower() == "true":
        return conf  # type: ignore[return-value]
    conf_module = provider_conf()
    from airflow.providers.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
        inject_transport_information_into_spark_properties,
    )

    out: dict[str, Any] = dict(conf or {})
    if conf_module.spark_inject_parent_job_info():
        out = inject_parent_job_information_into_spark_properties(out, context)
    if conf_module.spark_inject_transport_info() and not _has_transport(out):
        out = inject_transport_information_into_spark_properties(out, context)
        if not _has_transport(out):
            out.update(file_transport_settings(conf_module.transport()))
    if not _has_transport(out):
        log.warning(
            "OpenLineage is on, but the Spark application would have no transport: set [openlineage] "
            "spark_inject_transport_info = true (an http or file transport), or spark.openlineage.transport.* in the "
            "operator's spark_conf; the task's own events are sent, the application's are not")
        return conf  # type: ignore[return-value]
    return with_listener(out, app_name=app_name)
