"""The --py-files archive: the pure core and spark/ only, nothing that imports airflow."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from airflow_conduit.spark.packaging import build_py_files_archive, entrypoint_path


def test_archive_holds_the_core_and_spark_and_no_airflow_imports(tmp_path):
    path = build_py_files_archive(tmp_path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        sources = {name: archive.read(name).decode() for name in names if name.endswith(".py")}
    tops = {n.split("/")[1] for n in names if n.count("/") >= 2}
    # A module the archive's code imports must be in it: the driver imports the package from the archive.
    shipped = {n.removesuffix(".py").replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".py")}
    assert tops == {"recovery", "runs", "pipeline", "spark"}
    assert "airflow_conduit/__init__.py" in names and "airflow_conduit/spark/entrypoint.py" in names
    assert "airflow_conduit/runs/report.py" in names
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(m == "airflow" or m.startswith("airflow.") for m in modules), name
            ours = [m for m in modules if m.startswith("airflow_conduit.")]
            assert all(m in shipped for m in ours), f"{name} imports {ours}, not all in the archive"
    assert build_py_files_archive(tmp_path / "again") and Path(path).read_bytes() == (tmp_path / "again" / Path(path).name).read_bytes()
    assert Path(entrypoint_path()).is_file() and entrypoint_path().endswith("airflow_conduit/spark/entrypoint.py")


def test_each_module_ships_with_byte_code_that_python_imports_instead_of_compiling(tmp_path):
    path = build_py_files_archive(tmp_path)
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    modules = {n for n in names if n.endswith(".py")}
    assert {n + "c" for n in modules} <= names
    probe = ("import importlib, json, sys; m = importlib.import_module('airflow_conduit.pipeline.loader'); "
             "print(json.dumps([m.__file__, m.load_pipeline.__name__]))")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {path!r}); {probe}"],
                         capture_output=True, text=True, check=True)
    loaded_from, name = __import__("json").loads(out.stdout)
    assert loaded_from == f"{path}/airflow_conduit/pipeline/loader.pyc" and name == "load_pipeline"


def test_byte_code_that_does_not_match_its_source_is_ignored_for_the_source(tmp_path):
    """A .pyc is checked against its source's hash: a stale one is never run."""
    path = build_py_files_archive(tmp_path)
    stale = tmp_path / "stale.zip"
    with zipfile.ZipFile(path) as archive, zipfile.ZipFile(stale, "w") as out:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == "airflow_conduit/pipeline/locations.py":
                data += b"\nEDITED = True\n"
            out.writestr(info, data)
    probe = "import airflow_conduit.pipeline.locations as m; print(m.__file__, m.EDITED)"
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(stale)!r}); {probe}"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"{stale}/airflow_conduit/pipeline/locations.py", "True"]
