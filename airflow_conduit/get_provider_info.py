"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

Must import nothing from airflow: Airflow calls it while building its own configuration.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from airflow_conduit import __version__

PACKAGE_NAME = "airflow-conduit"


def installed_version() -> str:
    """The version of the installed distribution (what pip and `airflow providers list` show); the source's own
    ``__version__`` only when the package is imported from a folder without its metadata."""
    try:
        return version(PACKAGE_NAME)
    except PackageNotFoundError:
        return __version__

# Global recovery defaults (Conduit's `pipelines.error-recovery.*` with Conduit's defaults).
# Airflow option names use underscores so that AIRFLOW__CONDUIT__MIN_DELAY works as an env var.
RECOVERY_CONFIG_OPTIONS = {
    "min_delay": ("Conduit `min-delay`: minimum delay before restarting the pipeline after an error.", "1s"),
    "max_delay": ("Conduit `max-delay`: maximum delay before restarting the pipeline after an error.", "10m"),
    "backoff_factor": ("Conduit `backoff-factor`: factor applied to the last delay when recovering.", "2"),
    "max_retries": (
        "Conduit `max-retries`: restarts allowed within any `max-retries-window`; -1 = infinite, 0 = recovery disabled.",
        "-1",
    ),
    "max_retries_window": ("Conduit `max-retries-window`: the window over which `max-retries` is counted.", "5m"),
    "policy": ("Backoff policy: exponential (Conduit), strimzi, or fixed.", "exponential"),
    "variable": (
        "Name of an Airflow Variable holding JSON recovery options that override these defaults "
        "(operator arguments override both).",
        "conduit_recovery",
    ),
}

# What every job submitted from this worker gets beyond its Spark connection (docs/configuration.md, worker defaults).
WORKER_CONFIG_OPTIONS = {
    "worker_jars": (
        "Comma-separated jars added to spark.jars of every pipeline job, each one only when the file exists on the "
        "worker (the default is the PostgreSQL JDBC driver of Debian's libpostgresql-jdbc-java, for jdbc "
        "destinations); empty = none. A task's backend_options={'worker_jars': [...]} overrides it.",
        "/usr/share/java/postgresql.jar",
    ),
    "spark_local_ip": (
        "SPARK_LOCAL_IP of the spark-submit the local backend starts, unless the worker's environment sets it; "
        "empty = let Spark pick the address (a client-mode driver that executors on other hosts must reach). "
        "A task's backend_options={'spark_local_ip': ...} overrides it.",
        "127.0.0.1",
    ),
}


def _config_section() -> dict:
    options = {
        name: {"description": description, "version_added": "0.1.0", "type": "string", "example": None, "default": default}
        for name, (description, default) in RECOVERY_CONFIG_OPTIONS.items()
    }
    options.update({
        name: {"description": description, "version_added": "0.1.0", "type": "string", "example": None, "default": default}
        for name, (description, default) in WORKER_CONFIG_OPTIONS.items()
    })
    return {
        "conduit": {
            "description": "Defaults of airflow-conduit's pipeline recovery (Conduit's pipelines.error-recovery.* "
            "options) and of what every pipeline job gets on this worker.",
            "options": options,
        }
    }


def get_provider_info() -> dict:
    return {
        "package-name": PACKAGE_NAME,
        "name": "Conduit pipelines on Spark",
        "description": "Conduit-style recovering data pipelines on Apache Spark: backoff restarts under a windowed "
        "retry budget, fatal vs transient errors, dead letter queue.",
        "versions": [installed_version()],
        "integrations": [
            {
                "integration-name": "Conduit pipelines on Spark",
                "external-doc-url": "https://conduit.io/docs/using/other-features/pipeline-recovery",
                "tags": ["apache"],
            }
        ],
        "operators": [
            {"integration-name": "Conduit pipelines on Spark", "python-modules": ["airflow_conduit.operators.pipeline", "airflow_conduit.operators.replay"]}
        ],
        # The hook uses the Spark provider's ``spark`` connection type and form (no fields of its own), so it is
        # listed under "hooks" only: a "connection-types" entry for ``spark`` would clash with the Spark provider's.
        "hooks": [
            {"integration-name": "Conduit pipelines on Spark", "python-modules": ["airflow_conduit.hooks.spark_pipeline"]}
        ],
        "sensors": [
            {"integration-name": "Conduit pipelines on Spark", "python-modules": ["airflow_conduit.sensors.pipeline"]}
        ],
        "triggers": [
            {
                "integration-name": "Conduit pipelines on Spark",
                "python-modules": ["airflow_conduit.triggers.pipeline", "airflow_conduit.triggers.state_dir"],
            }
        ],
        "extra-links": [
            "airflow_conduit.operators.links.SparkUILink",
            "airflow_conduit.operators.links.DeadLetterQueueLink",
        ],
        "plugins": [{"name": "airflow_conduit", "plugin-class": "airflow_conduit.plugins.conduit_ui.ConduitUIPlugin"}],
        "config": _config_section(),
    }
