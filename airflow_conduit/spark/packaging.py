"""What spark-submit needs: the ``--py-files`` archive and the entry point file.

The archive holds ``airflow_conduit/__init__.py``, ``names.py`` and the pure core
(``recovery/``, ``runs/``, ``pipeline/``) plus ``spark/``, taken from the installed
package: no Airflow layers, so it runs on clusters where only Spark and
Python exist.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import airflow_conduit

SHIPPED_PACKAGES = ("recovery", "runs", "pipeline", "spark")
ARCHIVE_NAME = "airflow_conduit.zip"


def package_root() -> Path:
    return Path(airflow_conduit.__file__).resolve().parent


def entrypoint_path() -> str:
    """The .py file to give spark-submit as the application."""
    return str(package_root() / "spark" / "entrypoint.py")


def build_py_files_archive(dest_dir: str | os.PathLike[str]) -> str:
    """Write ``dest_dir/airflow_conduit.zip`` (deterministic content) and return its path."""
    root = package_root()
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / ARCHIVE_NAME
    tmp = dest / f".{ARCHIVE_NAME}.{os.getpid()}.tmp"
    files = [root / "__init__.py", root / "names.py"]
    for name in SHIPPED_PACKAGES:
        files += sorted(p for p in (root / name).rglob("*.py") if "__pycache__" not in p.parts)
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            arcname = "airflow_conduit/" + path.relative_to(root).as_posix()
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    os.replace(tmp, target)
    return str(target)
