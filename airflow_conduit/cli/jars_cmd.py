"""``airflow-conduit jars fetch DIR`` and ``jars packages``: the connector jars, for machines without internet.

``jars packages`` prints the pinned coordinates as ``spark.jars.packages`` takes them (a cluster that
reaches Maven Central or a mirror of it).

Spark's own Ivy resolves the pinned coordinates (``spark/connectors/<connector>/pom.xml``) from Maven Central
into a scratch folder; the connector's own jars (the pom's ``includeArtifactIds``, not the ones PySpark
ships already) are copied to ``DIR/<connector>/lib``. Copy DIR to the workers (or the cluster's nodes) and set
``AIRFLOW_CONDUIT_JARS_DIR=DIR`` there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from airflow_conduit.spark.connector_jars import (
    CONNECTOR_ARTIFACTS,
    IVY_SETTINGS,
    JARS_DIR_ENV,
    kept_artifacts,
    pinned_packages,
)

EXIT_FAILED = 1


def _spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit")


def _kept(ivy_jar: Path, artifacts: tuple[str, ...]) -> str | None:
    """The Maven file name (``artifact-version.jar``) of an Ivy-retrieved ``group_artifact-version.jar`` when its
    artifact is one of ``artifacts``, else None."""
    _, _, rest = ivy_jar.name.partition("_")
    for artifact in artifacts:
        version = rest.removeprefix(artifact + "-")
        if version != rest and version[:1].isdigit():
            return rest
    return None


def resolve(connectors: list[str], scratch: Path) -> Path:
    """Spark's Ivy resolution of ``connectors``' pinned coordinates into ``scratch``; the folder of the jars."""
    packages = ",".join(str(c) for connector in connectors for c in pinned_packages(connector))
    script = scratch / "resolve_only.py"
    script.write_text("# spark-submit resolves --packages before it runs this: nothing to do here\n")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [_spark_submit(), "--master", "local[1]", "--conf", f"spark.jars.ivy={scratch / 'ivy'}",
         "--conf", f"spark.jars.ivySettings={IVY_SETTINGS}",
         "--packages", packages, str(script)],
        env=env, capture_output=True, text=True,
    )
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()]
        why = [line for line in said if "Exception" in line or "download failed" in line or "not found" in line]
        raise RuntimeError(f"Spark could not resolve {packages} from Maven Central: {(why or said or ['no output'])[0]}")
    return scratch / "ivy" / "jars"


def fetch(target: Path, connectors: list[str]) -> dict[str, list[Path]]:
    """Fetch ``connectors``' jars into ``target/<connector>/lib``; the jars written, per connector."""
    with tempfile.TemporaryDirectory(prefix="airflow-conduit-jars-") as scratch:
        resolved = resolve(connectors, Path(scratch))
        written: dict[str, list[Path]] = {}
        for connector in connectors:
            lib = target / connector / "lib"
            lib.mkdir(parents=True, exist_ok=True)
            written[connector] = []
            for jar in sorted(resolved.glob("*.jar")):
                name = _kept(jar, kept_artifacts(connector))
                if name:
                    shutil.copyfile(jar, lib / name)
                    written[connector].append(lib / name)
        return written


def run_fetch(args: argparse.Namespace) -> int:
    connectors = sorted(set(args.connector or CONNECTOR_ARTIFACTS))
    target = Path(args.dir).absolute()
    try:
        written = fetch(target, connectors)
    except (RuntimeError, OSError) as exc:
        print(f"airflow-conduit jars fetch: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for connector, jars in written.items():
        print(f"{connector}: {len(jars)} jars in {target / connector / 'lib'}")
    print(f"on the machines that run the pipelines: {JARS_DIR_ENV}={target}")
    return 0


def run_packages(args: argparse.Namespace) -> int:
    connectors = sorted(set(args.connector or CONNECTOR_ARTIFACTS))
    print(",".join(str(c) for connector in connectors for c in pinned_packages(connector)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    jars = subparsers.add_parser("jars", help="the Kafka and Delta connector jars and OpenLineage's Spark listener, for machines without internet")
    commands = jars.add_subparsers(dest="jars_command", required=True, metavar="SUBCOMMAND")
    fetch_parser = commands.add_parser(
        "fetch", help="download the pinned connector jars into DIR/<connector>/lib (then set "
                      f"{JARS_DIR_ENV}=DIR where pipelines run)")
    fetch_parser.add_argument("dir", metavar="DIR", help="the folder to fill")
    fetch_parser.add_argument("--connector", action="append", choices=sorted(CONNECTOR_ARTIFACTS),
                              help="only this connector (repeatable; default: all)")
    fetch_parser.set_defaults(func=run_fetch)
    packages_parser = commands.add_parser(
        "packages", help="print the pinned coordinates, comma-separated, as spark.jars.packages takes them")
    packages_parser.add_argument("--connector", action="append", choices=sorted(CONNECTOR_ARTIFACTS),
                                 help="only this connector (repeatable; default: all)")
    packages_parser.set_defaults(func=run_packages)
