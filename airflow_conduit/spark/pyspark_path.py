"""The driver imports PySpark from the installed package, not from Spark's ``pyspark.zip``, when both are the same.

spark-submit puts ``$SPARK_HOME/python/lib/pyspark.zip`` in front of the Python driver's path. Python
keeps no byte code for modules imported from a zip, so a driver started that way compiles PySpark's
few hundred modules from source at every start (seconds on a busy machine). Under a pip-installed
PySpark, ``SPARK_HOME`` is the installed ``pyspark`` package itself, whose modules are byte-compiled:
the zip holds the same release. Imports nothing but the standard library (it runs before PySpark is
imported).
"""

from __future__ import annotations

from importlib.machinery import PathFinder
from pathlib import Path

SPARK_PYSPARK_ZIP = ("python", "lib", "pyspark.zip")  # the zip's place under SPARK_HOME


def _spark_home_of(entry: str) -> Path | None:
    """SPARK_HOME when ``entry`` is Spark's ``python/lib/pyspark.zip``, else None."""
    path = Path(entry)
    if path.parts[-3:] != SPARK_PYSPARK_ZIP:
        return None
    return path.parents[2]


def without_redundant_pyspark_zip(path: list[str]) -> list[str]:
    """``path`` without Spark's ``pyspark.zip`` when the PySpark the rest of ``path`` imports is that very
    Spark's package (pip's layout: SPARK_HOME is the ``pyspark`` package folder); ``path`` unchanged otherwise."""
    for i, entry in enumerate(path):
        home = _spark_home_of(entry)
        if home is None or home.name != "pyspark" or not (home / "__init__.py").is_file():
            continue
        rest = path[:i] + path[i + 1:]
        found = PathFinder.find_spec("pyspark", rest)
        if found is not None and found.origin and Path(found.origin).resolve().parent == home.resolve():
            return rest
    return path
