"""The driver's path: Spark's pyspark.zip is dropped only when the rest of the path imports that very PySpark."""

from __future__ import annotations

from pathlib import Path

from airflow_conduit.spark.pyspark_path import without_redundant_pyspark_zip


def _pip_layout(root: Path) -> tuple[Path, Path]:
    """site-packages/pyspark (the package and SPARK_HOME at once) with its python/lib/pyspark.zip."""
    site = root / "site-packages"
    home = site / "pyspark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "__init__.py").write_text("")
    zip_path = home / "python" / "lib" / "pyspark.zip"
    zip_path.write_bytes(b"")
    return site, zip_path


def test_the_zip_of_the_installed_pyspark_is_dropped(tmp_path):
    site, zip_path = _pip_layout(tmp_path)
    path = [str(tmp_path / "app.zip"), str(zip_path), str(site / "pyspark" / "python" / "lib" / "py4j-src.zip"), str(site)]
    assert without_redundant_pyspark_zip(path) == [path[0], path[2], path[3]]


def test_the_zip_stays_when_the_rest_of_the_path_has_no_pyspark(tmp_path):
    _, zip_path = _pip_layout(tmp_path)
    path = [str(zip_path), str(tmp_path / "elsewhere")]
    assert without_redundant_pyspark_zip(path) == path


def test_the_zip_stays_when_another_pyspark_comes_first_on_the_rest_of_the_path(tmp_path):
    site, zip_path = _pip_layout(tmp_path)
    other = tmp_path / "other"
    (other / "pyspark").mkdir(parents=True)
    (other / "pyspark" / "__init__.py").write_text("")
    path = [str(zip_path), str(other), str(site)]
    assert without_redundant_pyspark_zip(path) == path


def test_a_spark_distribution_zip_stays(tmp_path):
    """A Spark distribution's SPARK_HOME is not a Python package: its zip is the only PySpark there is."""
    home = tmp_path / "spark-4.2.0-bin"
    (home / "python" / "lib").mkdir(parents=True)
    zip_path = home / "python" / "lib" / "pyspark.zip"
    zip_path.write_bytes(b"")
    path = [str(zip_path), str(tmp_path)]
    assert without_redundant_pyspark_zip(path) == path
