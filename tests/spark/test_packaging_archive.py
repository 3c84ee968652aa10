"""The --py-files archive: the pure core and spark/ only, nothing that imports airflow."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

from airflow_conduit.spark.packaging import build_py_files_archive, entrypoint_path


def test_archive_holds_the_core_and_spark_and_no_airflow_imports(tmp_path):
    path = build_py_files_archive(tmp_path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        sources = {name: archive.read(name).decode() for name in names}
    tops = {n.split("/")[1] for n in names if n.count("/") >= 2}
    assert tops == {"recovery", "runs", "pipeline", "spark"}
    assert "airflow_conduit/__init__.py" in names and "airflow_conduit/spark/entrypoint.py" in names
    assert "airflow_conduit/runs/report.py" in names
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(m == "airflow" or m.startswith("airflow.") for m in modules), name
    assert build_py_files_archive(tmp_path / "again") and Path(path).read_bytes() == (tmp_path / "again" / Path(path).name).read_bytes()
    assert Path(entrypoint_path()).is_file() and entrypoint_path().endswith("airflow_conduit/spark/entrypoint.py")
