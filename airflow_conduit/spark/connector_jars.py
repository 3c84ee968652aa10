"""The Spark connector jars a pipeline needs (Kafka, Delta Lake), and the settings that load them.

PySpark's wheel ships no connectors. Their pinned Maven coordinates are written once, in the package's
``spark/connectors/<connector>/pom.xml``: ``make install`` fetches those poms' jars into a checkout's
``jars/<connector>/lib/`` with Maven, and this module reads the same poms. A pipeline gets the connectors it
uses and no others, from the first of:

1. ``spark.jars.packages`` of the user's own that names the connector (kept; a version other than the pinned
   one is logged as a warning naming both);
2. a folder of jars: ``$AIRFLOW_CONDUIT_JARS_DIR/<connector>/lib`` (``airflow-conduit jars fetch DIR`` fills
   one for a machine without internet), else a checkout's ``jars/<connector>/lib``;
3. the pinned coordinates in ``spark.jars.packages``: Spark resolves them with its own Ivy, from its cache or
   Maven Central (``connectors/ivysettings.xml``, unless the user names repositories or Ivy settings). With none of the three (no jars, no network) the run is refused before Spark starts, in
   one line naming the connector and the three ways to provide it.

No pyspark import: the launchers (hooks) use this module as well as the Spark session.
"""

from __future__ import annotations

import functools
import logging
import os
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

JARS_DIR_ENV = "AIRFLOW_CONDUIT_JARS_DIR"
CONNECTORS_DIR = Path(__file__).resolve().parent / "connectors"  # package data: one pom per connector
# Maven Central only (see the file): given to Spark's Ivy with the coordinates this module adds.
IVY_SETTINGS = CONNECTORS_DIR / "ivysettings.xml"
# A git checkout's jars/ (`make install` fills it); an installed package has none beside it.
CHECKOUT_JARS_DIR = Path(__file__).resolve().parents[2] / "jars"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
PROBE_TIMEOUT_SECONDS = 10.0
# Settings with which the user chose where Spark's Ivy resolves from: then this module does not probe.
RESOLVER_SETTINGS = ("spark.jars.repositories", "spark.jars.ivySettings")

# Connector -> the artifact whose presence in ``spark.jars.packages`` means the user supplies it. ``openlineage``
# (OpenLineage's Spark listener) is no spec's plugin: a run gets it when lineage is on (lineage/spark_listener.py).
CONNECTOR_ARTIFACTS = {
    "kafka": "spark-sql-kafka-0-10",
    "delta": "delta-spark",
    "openlineage": "openlineage-spark",
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

_POM = "{http://maven.apache.org/POM/4.0.0}"


def local_settings(connectors: set[str] | frozenset[str]) -> dict[str, str]:
    """The ``LOCAL_SETTINGS`` of ``connectors``."""
    return {key: value for connector in sorted(connectors) for key, value in LOCAL_SETTINGS.get(connector, {}).items()}


class ConnectorJarsMissing(RuntimeError):
    """A pipeline needs a connector that is neither in a jars folder, nor in spark.jars.packages, nor resolvable."""


@dataclass(frozen=True)
class Coordinate:
    """A Maven artifact, ``group:artifact:version`` as ``spark.jars.packages`` spells it."""

    group: str
    artifact: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    def jar_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"


def connector_pom(connector: str) -> Path:
    return CONNECTORS_DIR / connector / "pom.xml"


@functools.lru_cache(maxsize=None)
def _pom(connector: str) -> ET.Element:
    return ET.parse(connector_pom(connector)).getroot()


@functools.lru_cache(maxsize=None)
def pinned_packages(connector: str) -> tuple[Coordinate, ...]:
    """The pinned coordinates of ``connector``: its pom's dependencies."""
    return tuple(
        Coordinate(dep.findtext(f"{_POM}groupId", ""), dep.findtext(f"{_POM}artifactId", ""), dep.findtext(f"{_POM}version", ""))
        for dep in _pom(connector).iter(f"{_POM}dependency")
    )


@functools.lru_cache(maxsize=None)
def kept_artifacts(connector: str) -> tuple[str, ...]:
    """The artifact ids a jars folder of ``connector`` holds (the pom's ``includeArtifactIds``): its resolution
    also names jars PySpark ships already, which a folder must not add a second copy of."""
    text = _pom(connector).findtext(f".//{_POM}includeArtifactIds") or ""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def jars_dir() -> Path:
    """The folder whose ``<connector>/lib`` holds connector jars: ``$AIRFLOW_CONDUIT_JARS_DIR``, else a checkout's
    ``jars/`` (absent for an installed package)."""
    return Path(os.environ.get(JARS_DIR_ENV) or CHECKOUT_JARS_DIR)


def connectors_of(spec: Any) -> set[str]:
    """The connectors (``kafka``, ``delta``) a pipeline spec's sources, destinations and DLQ use."""
    plugins = {source.plugin for source in spec.sources}
    plugins |= {destination.plugin for destination in spec.destinations}
    plugins.add(spec.dead_letter_queue.plugin)
    return {plugin for plugin in plugins if plugin in CONNECTOR_ARTIFACTS}


def folder_jars(connector: str) -> list[str]:
    """The jars of ``connector`` in the jars folder (``jars_dir()``), sorted; empty when there are none."""
    return sorted(str(path) for path in (jars_dir() / connector / "lib").glob("*.jar"))


def missing_message(connector: str, why: str) -> str:
    """One line: the missing connector and the three ways to provide it."""
    packages = ",".join(str(c) for c in pinned_packages(connector))
    return (
        f"the {connector} connector's jars are not available ({why}): provide them one of three ways: "
        f"let Spark download them (network access to {MAVEN_CENTRAL}), "
        f"set {JARS_DIR_ENV} to a folder filled by `airflow-conduit jars fetch DIR` ({connector}/lib/*.jar), "
        f"or set spark.jars.packages (e.g. {packages}) with spark.jars.repositories naming a repository you reach"
    )


def _user_packages(conf: dict[str, Any]) -> list[str]:
    return [p.strip() for p in str(conf.get("spark.jars.packages") or "").split(",") if p.strip()]


def _named_by_user(connector: str, packages: list[str]) -> list[str]:
    artifact = CONNECTOR_ARTIFACTS[connector]
    return [p for p in packages if len(p.split(":")) >= 2 and p.split(":")[1].startswith(artifact)]


def warn_on_other_versions(connector: str, named: list[str]) -> None:
    """Log a warning for each of the user's coordinates of ``connector`` that is not the pinned one."""
    pinned = {str(c) for c in pinned_packages(connector)}
    main = str(pinned_packages(connector)[0])
    for package in named:
        if package not in pinned:
            log.warning(
                "spark.jars.packages names %s, the %s connector airflow-conduit pins and is tested with is %s: "
                "the pipeline runs with %s", package, connector, main, package,
            )


def cached_in_ivy_or_maven(coordinate: Coordinate, ivy_dir: str | None = None) -> bool:
    """Whether Spark's Ivy finds ``coordinate`` without the network: in its own cache or the local Maven one."""
    home = Path.home()
    ivy_roots = [Path(ivy_dir)] if ivy_dir else [home / ".ivy2.5.2", home / ".ivy2"]
    candidates = [root / "jars" / f"{coordinate.group}_{coordinate.jar_name()}" for root in ivy_roots]
    candidates.append(home / ".m2" / "repository" / Path(*coordinate.group.split(".")) / coordinate.artifact
                      / coordinate.version / coordinate.jar_name())
    return any(path.is_file() for path in candidates)


def maven_central_reachable(coordinate: Coordinate) -> bool:
    """Whether Maven Central answers for ``coordinate``'s pom (a HEAD request)."""
    url = (f"{MAVEN_CENTRAL}/{coordinate.group.replace('.', '/')}/{coordinate.artifact}/{coordinate.version}/"
           f"{coordinate.artifact}-{coordinate.version}.pom")
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=PROBE_TIMEOUT_SECONDS):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def check_resolvable(connector: str, conf: dict[str, Any],
                     reachable: Callable[[Coordinate], bool] | None = None) -> None:
    """Refuse (``ConnectorJarsMissing``, one line) a connector Spark's Ivy could resolve neither from a cache
    nor from Maven Central: before Spark starts, instead of its resolver's stack trace."""
    if any(conf.get(key) for key in RESOLVER_SETTINGS):
        return  # the user chose the repositories: Spark's own error is theirs to read
    ivy_dir = conf.get("spark.jars.ivy")
    coordinates = pinned_packages(connector)
    if all(cached_in_ivy_or_maven(c, ivy_dir) for c in coordinates):
        return
    if not (reachable or maven_central_reachable)(coordinates[0]):
        raise ConnectorJarsMissing(missing_message(
            connector, f"no jars in {jars_dir() / connector / 'lib'}, and {MAVEN_CENTRAL} cannot be reached"))


def with_connectors(conf: dict[str, Any], connectors: set[str] | frozenset[str],
                    reachable: Callable[[Coordinate], bool] | None = None) -> dict[str, Any]:
    """``conf`` with the jars (or packages) and settings of ``connectors`` added (see the module's docstring for
    the order); the user's own ``spark.jars`` and ``spark.jars.packages`` kept in front, a setting the user
    chose kept."""
    out = dict(conf)
    jars = [jar for jar in str(out.get("spark.jars") or "").split(",") if jar]
    packages = _user_packages(out)
    added_packages = False
    for connector in sorted(connectors):
        named = _named_by_user(connector, packages)
        if named:
            warn_on_other_versions(connector, named)
        else:
            found = folder_jars(connector)
            if found:
                jars += [jar for jar in found if jar not in jars]
            else:
                check_resolvable(connector, out, reachable)
                packages += [str(c) for c in pinned_packages(connector) if str(c) not in packages]
                added_packages = True
        for key, value in CONNECTOR_SETTINGS.get(connector, {}).items():
            out.setdefault(key, value)
    if jars:
        out["spark.jars"] = ",".join(jars)
    if packages:
        out["spark.jars.packages"] = ",".join(packages)
        if added_packages and not any(out.get(key) for key in RESOLVER_SETTINGS):
            out["spark.jars.ivySettings"] = str(IVY_SETTINGS)
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
