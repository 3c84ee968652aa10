"""A batch's few rows written by the driver as one file of a file destination, without a Spark job.

A file DLQ's rows of a batch are already on the driver (the pass's observation gathers them): a Spark write
of them is a job of its own, planned and scheduled for a few thousand rows. Here they are written as Spark
would lay them out (``<path>/batch_id=<n>/part-00000-<uuid>-c000.<ext>`` and ``_SUCCESS``; JSON lines without
NULL fields, or Parquet through pyarrow), so that readers (Spark, a DLQ replay, the UI) cannot tell.

Idempotent and atomic per batch, as Spark's overwrite of the batch's folder: the file is written in a hidden
folder next to it (Spark's file listing skips names starting with ``.``), which then replaces the batch's
folder by renames; a leftover of a killed attempt is removed when the batch is written again.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import unquote, urlparse

# Spark SQL type name (DataType.typeName) -> pyarrow type factory name; other types: not written here
ARROW_TYPES = {"string": "string", "long": "int64", "integer": "int32", "boolean": "bool_", "double": "float64"}
FORMATS = ("json", "parquet")


def local_folder(path: str) -> Path | None:
    """``path`` as a local folder, or None when it is on another file system (s3a, hdfs, ...)."""
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(path)
    return None


def _arrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:  # pragma: no cover - pyarrow comes with PySpark's SQL extras
        return None
    return pyarrow


def can_write(path: str, fmt: str, types: Sequence[str]) -> bool:
    """Whether ``write_batch`` can write rows of these column types (``DataType.typeName``) in ``fmt`` at ``path``."""
    if fmt not in FORMATS or local_folder(path) is None:
        return False
    if fmt == "parquet":
        return all(t in ARROW_TYPES for t in types) and _arrow() is not None
    return True


def _json_lines(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> bytes:
    """Rows as Spark's JSON writer writes them: one object per line, fields in order, NULL fields left out."""
    lines = (json.dumps({c: v for c, v in zip(columns, row) if v is not None}, ensure_ascii=False, separators=(",", ":"))
             for row in rows)
    return "".join(line + "\n" for line in lines).encode("utf-8")


def _write_parquet(file: Path, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    pa = _arrow()
    schema = pa.schema([pa.field(c, getattr(pa, ARROW_TYPES[t])(), nullable=True) for c, t in zip(columns, types)])
    data = [pa.array([row[i] for row in rows], type=schema.field(i).type) for i in range(len(columns))]
    pa.parquet.write_table(pa.Table.from_arrays(data, schema=schema), str(file), compression="snappy")


def write_batch(path: str, batch_id: int, fmt: str, columns: Sequence[str], types: Sequence[str],
                rows: Sequence[Sequence[Any]]) -> Path:
    """Replace ``<path>/batch_id=<batch_id>`` with one file of ``rows`` (see the module docstring); returns the folder."""
    root = local_folder(path)
    assert root is not None and fmt in FORMATS, (path, fmt)
    root.mkdir(parents=True, exist_ok=True)
    name = f"batch_id={batch_id}"
    for leftover in root.glob(f".{name}.*"):  # a killed attempt's (only this batch's: no other writer's)
        shutil.rmtree(leftover, ignore_errors=True)
    token = uuid.uuid4()
    staging = root / f".{name}.{token}.tmp"
    staging.mkdir()
    if fmt == "json":
        (staging / f"part-00000-{token}-c000.json").write_bytes(_json_lines(columns, rows))
    else:
        _write_parquet(staging / f"part-00000-{token}-c000.snappy.parquet", columns, types, rows)
    (staging / "_SUCCESS").touch()
    target = root / name
    old = root / f".{name}.{token}.old"
    if target.exists():
        os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    return target
