"""JVM options of the driver and executors that run a pipeline (no pyspark import: the launchers use it too).

Spark compiles each stage of a batch into one Java method (whole-stage code generation). The runner's
first stage carries, per schema field, the field's value, its error checks and its DLQ context, so its
method grows with the schema and passes HotSpot's size limit for JIT compilation at about ten fields
(``-XX:+DontCompileHugeMethods``, on by default): the whole per-record loop of the pass would then run in
the bytecode interpreter. Compiling it anyway is faster than Spark's own fallback
(``spark.sql.codegen.hugeMethodLimit``, which gives up whole-stage code generation for such a stage);
benchmark 1b (docs/benchmarks.md) compares the two.

A run's driver JVM loads some 20,000 classes (Spark, Catalyst, Hadoop, Parquet) before its first batch is written;
parsing and verifying them is most of a small run's start. ``make install`` saves them in a class data sharing
archive (``class_archive.py``), which the local launchers hand to the driver JVM with ``-XX:SharedArchiveFile``:
it maps them instead. A missing archive adds no option; one the JVM cannot use (another JDK, other jars) it
ignores with a one-line warning, and the run starts as it would without it.

Touches: HotSpot's ``-XX:DontCompileHugeMethods`` and ``-XX:SharedArchiveFile`` (JDK flags, not Spark's). On a JDK
upgrade check that both are still accepted (an unknown ``-XX`` flag stops the JVM) and rebuild the archive (``make
install``). Pinned by tests/spark/test_session.py::test_the_local_driver_jvm_compiles_huge_generated_methods and
tests/spark/test_class_archive.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

JIT_OPTIONS = ("-XX:-DontCompileHugeMethods",)  # compile the pass's large generated method like any other
JAVA_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CLASS_ARCHIVE_ENV = "AIRFLOW_CONDUIT_CLASS_ARCHIVE"  # the archive's path; empty: no archive
# Options by which a user chose the driver's class data sharing themselves: the archive is then not added.
CLASS_SHARING_FLAGS = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")


def with_jit_options(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with ``JIT_OPTIONS`` appended to the driver's and the executors' Java options. A user's own
    options are kept, in front; a flag the user already set either way (``-XX:+...`` or ``-XX:-...``) is theirs."""
    out = dict(conf)
    for key in JAVA_OPTION_KEYS:
        options = str(out.get(key) or "").split()
        options += [option for option in JIT_OPTIONS if not any(_flag(option) == _flag(o) for o in options)]
        out[key] = " ".join(options)
    return out


def _flag(option: str) -> str:
    """The name of a ``-XX:[+-]Name`` or ``-XX:Name=value`` option, else the option itself."""
    if option.startswith("-XX:"):
        return option[4:].lstrip("+-").split("=", 1)[0]
    return option


def class_archive_path() -> Path | None:
    """Where ``make install`` saves the driver's class data sharing archive: ``$AIRFLOW_CONDUIT_CLASS_ARCHIVE``, else
    ``share/airflow-conduit/spark-classes.jsa`` under this Python's prefix (the virtual environment); None when the
    variable is set empty (no archive)."""
    configured = os.environ.get(CLASS_ARCHIVE_ENV)
    if configured is not None:
        return Path(configured) if configured.strip() else None
    return Path(sys.prefix) / "share" / "airflow-conduit" / "spark-classes.jsa"


def with_class_archive(conf: dict[str, Any], archive: Path | None = None) -> dict[str, Any]:
    """``conf`` with ``-XX:SharedArchiveFile=<archive>`` appended to the driver's Java options when the archive exists
    (``class_archive_path``). Options of the user's own that choose class sharing (``-Xshare:...``,
    ``-XX:SharedArchiveFile=...``, ``-XX:ArchiveClassesAtExit=...``) are kept and nothing is added. Only the driver:
    executors of a cluster run on other machines, with other jars."""
    archive = archive if archive is not None else class_archive_path()
    options = str(conf.get(DRIVER_JAVA_OPTIONS) or "").split()
    if archive is None or not archive.is_file() or any(_flag(o).startswith(CLASS_SHARING_FLAGS) for o in options):
        return dict(conf)
    return {**conf, DRIVER_JAVA_OPTIONS: " ".join([*options, f"-XX:SharedArchiveFile={archive}"])}
