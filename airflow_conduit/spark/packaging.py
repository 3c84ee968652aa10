"""What spark-submit needs: the ``--py-files`` archive and the entry point file.

The archive holds ``airflow_conduit/__init__.py``, the leaf modules (``LEAF_MODULES``) and the pure core
(``recovery/``, ``runs/``, ``pipeline/``) plus ``spark/``, taken from the installed
package: no Airflow layers, so it runs on clusters where only Spark and
Python exist.

Each module goes in with its byte code next to it (``module.pyc``, checked against the module's source
hash): Python keeps no byte code for what it imports from a zip, so without it the driver would compile
every module of the archive at each start. The byte code is the installed package's own cache when it
is fresh, else compiled here; a Python of another version ignores it and compiles the source.
"""

from __future__ import annotations

import contextlib
import importlib.util
import marshal
import os
import py_compile
import zipfile
from pathlib import Path

import airflow_conduit

SHIPPED_PACKAGES = ("recovery", "runs", "pipeline", "spark")
LEAF_MODULES = ("__init__.py", "names.py", "compat.py")  # the top-level modules every layer may import
ARCHIVE_NAME = "airflow_conduit.zip"
HASH_BASED_CHECKED = 0b11  # PEP 552 flags: hash-based byte code, checked against the source's hash


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
    files = [root / name for name in LEAF_MODULES]
    for name in SHIPPED_PACKAGES:
        files += sorted(p for p in (root / name).rglob("*.py") if "__pycache__" not in p.parts)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                arcname = "airflow_conduit/" + path.relative_to(root).as_posix()
                source = path.read_bytes()
                _add(archive, arcname, source)
                compiled = byte_code(path, source)
                if compiled is not None:
                    _add(archive, arcname + "c", compiled, zipfile.ZIP_STORED)  # read once, locally: not worth deflating
        os.replace(tmp, target)
    except BaseException:  # a full disk: no half archive left behind, taking the space a restart needs
        tmp.unlink(missing_ok=True)
        raise
    return str(target)


def _add(archive: zipfile.ZipFile, arcname: str, data: bytes, compression: int = zipfile.ZIP_DEFLATED) -> None:
    info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = compression
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)


def byte_code(path: Path, source: bytes) -> bytes | None:
    """``path``'s module as a .pyc checked against ``source``'s hash (PEP 552), which zipimport loads instead of
    compiling the source; None when the source does not compile (the driver reports that error itself)."""
    code = _cached_code(path, source)
    if code is None:
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(str(path), doraise=True)  # the cache an import would write; its content is stable
        code = _cached_code(path, source)
    if code is None:
        try:
            code = marshal.dumps(compile(source, str(path), "exec", dont_inherit=True))
        except (SyntaxError, ValueError):
            return None
    flags = HASH_BASED_CHECKED.to_bytes(4, "little")
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + code


def _cached_code(path: Path, source: bytes) -> bytes | None:
    """The marshalled code of ``path`` from this Python's ``__pycache__`` when it is of ``source`` as it is now."""
    try:
        data = Path(importlib.util.cache_from_source(str(path))).read_bytes()
        stat = path.stat()
    except (OSError, NotImplementedError, ValueError):
        return None
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    flags = int.from_bytes(data[4:8], "little")
    if flags & 0b1:
        fresh = data[8:16] == importlib.util.source_hash(source)
    else:
        fresh = (int.from_bytes(data[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
                 and int.from_bytes(data[12:16], "little") == len(source) & 0xFFFFFFFF)
    return data[16:] if fresh else None
