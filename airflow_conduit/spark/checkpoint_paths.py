"""Does the checkpoint's record of the files read still point at the spec's input folders?

Spark's checkpoint keeps each file source's files read as absolute paths
(``checkpoints/<query>/sources/<n>/<batch>``: a ``v1`` line, then one JSON line per file). A pipeline folder
moved to another path (inputs, outputs and state dir together) leaves them pointing at the old place: a batch
re-run from the checkpoint fails with Spark's ``Wrong basePath`` on every restart, and a new batch would list
every file at the new place as unseen and read it again. So a run checks before its query starts and stops
with ``CheckpointMoved`` (fatal), saying what moved and how to continue.
"""

from __future__ import annotations

import json
import os
import logging
from pathlib import Path
from urllib.parse import unquote, urlparse

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError

GLOB_CHARACTERS = "*?[{"
log = logging.getLogger(__name__)


class CheckpointMoved(FatalError):
    """The checkpoint read a file source's files at another path than the spec's: the pipeline's folder moved."""

    code = codes.CHECKPOINT_MOVED


def recorded_files(checkpoint: Path, source_index: int, *, limit: int = 50) -> list[str]:
    """Up to ``limit`` local paths of the files the checkpoint recorded for source ``source_index`` (the newest log
    file's, which holds every file after a compaction), or [] when there is no such log."""
    folder = checkpoint / "sources" / str(source_index)
    try:
        names = [n for n in os.listdir(folder) if n.split(".")[0].isdigit() and not n.endswith(".crc")]
    except OSError:
        return []
    if not names:
        return []
    newest = max(names, key=lambda n: int(n.split(".")[0]))
    found: list[str] = []
    try:
        with open(folder / newest, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if len(found) >= limit:
                    break
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # the "v1" line
                path = entry.get("path") if isinstance(entry, dict) else None
                local = _local(path) if isinstance(path, str) else None
                if local is not None:
                    found.append(local)
    except OSError:
        return []
    return found


def input_folder(path_setting: str) -> str | None:
    """The local folder a file source's ``path`` lists (the part before any glob character), absolute."""
    local = _local(path_setting)
    if local is None:
        return None
    if any(ch in local for ch in GLOB_CHARACTERS):
        local = os.path.dirname(local[: min(local.index(ch) for ch in GLOB_CHARACTERS if ch in local)])
    return os.path.abspath(local)


def check_sources(checkpoint: Path, sources: list[tuple[int, str, str]]) -> None:
    """Raise ``CheckpointMoved`` when a file source's recorded files are none of them under its folder.

    ``sources``: (index in the query's union, source id, its ``path`` setting) of every file source.
    """
    for index, source_id, path_setting in sources:
        folder = input_folder(path_setting)
        files = recorded_files(checkpoint, index)
        if folder is None or not files:
            continue
        roots = {folder, os.path.realpath(folder)}
        if any(_under(f, root) or _under(os.path.realpath(f), root) for f in files for root in roots):
            continue
        moved_from, moved_to = _what_moved(os.path.dirname(files[0]), folder)
        log.error("source %r: the checkpoint %s read %s; the spec's path is %s", source_id, checkpoint, files[0], folder)
        raise CheckpointMoved(  # short: an error's summary keeps 500 characters
            f"source {source_id!r}: the pipeline's files moved from {moved_from} to {moved_to}; Spark's checkpoint "
            f"keeps the old paths. To go on, move them back, or replace the old folder with the new one in the files "
            f"of STATE_DIR/checkpoints/{checkpoint.name}/sources and delete the .crc files there (docs/sources.md, "
            f"moving a pipeline's folder)"
        )


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _what_moved(old: str, new: str) -> tuple[str, str]:
    """The two folders that differ once the path parts both end with are taken off (``/a/p/in``, ``/b/p/in``:
    ``/a/p`` -> ``/b/p``... down to the parts that differ)."""
    old_parts, new_parts = Path(old).parts, Path(new).parts
    common = 0
    while common < min(len(old_parts), len(new_parts)) - 1 and old_parts[-1 - common] == new_parts[-1 - common]:
        common += 1
    return (str(Path(*old_parts[: len(old_parts) - common])), str(Path(*new_parts[: len(new_parts) - common])))


def _local(path: str) -> str | None:
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    if parsed.scheme == "":
        return path
    return None
