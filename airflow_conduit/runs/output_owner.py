"""An output folder has one owner: the pipeline (its state directory) that first wrote there.

A file destination or DLQ replaces ``<path>/batch_id=<n>`` as a whole for batch n, which is what makes a re-run
batch exact; two pipelines writing to one path would replace each other's batches, and a pipeline started on a
folder that already holds data would replace what is there. So each output folder gets an ownership marker
(``OWNER_FILE``, hidden from Spark's readers by its leading dot) the first time a pipeline uses it, and every
run checks it before anything is written.

The owner is a state directory, not a path: ``STATE_DIR/owner.json`` holds the pipeline's id and a random token
made when the state directory is first used. The token, not the state directory's path, decides, so a pipeline
whose whole folder was moved (inputs, outputs and state together) still owns its outputs, while a second pipeline,
or the same spec with a new state directory (its batch numbers start at 0 again), is refused.

Pure Python (stdlib only): the runner calls it with the local folders of its destinations and its DLQ.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError
from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic

OWNER_FILE = ".conduit-owner"  # in an output folder: which pipeline (state directory) writes there (JSON; no .json suffix: readers globbing *.json skip it)
STATE_DIR_IDENTITY_FILE = "owner.json"  # in the state directory: the pipeline id and the token its outputs name


class OutputOwnedElsewhere(FatalError):
    """A destination or DLQ folder belongs to another pipeline, or holds data this pipeline did not write."""

    code = codes.OUTPUT_OWNED_ELSEWHERE


@dataclass(frozen=True)
class Owner:
    pipeline_id: str
    state_dir: str
    token: str

    def describe(self) -> str:
        return f"pipeline {self.pipeline_id!r} (state dir {self.state_dir})"


def state_dir_owner(state_dir: str | os.PathLike[str], pipeline_id: str) -> Owner:
    """This state directory's identity, made (and kept) the first time it is asked for."""
    folder = Path(state_dir).absolute()
    path = folder / STATE_DIR_IDENTITY_FILE
    try:
        known = read_json(path) or {}
    except ValueError:  # not ours: made again below
        known = {}
    token = known.get("token") if isinstance(known.get("token"), str) else None
    if token is None:
        token = uuid.uuid4().hex
        write_json_atomic(path, {"pipeline_id": pipeline_id, "token": token, "created_at": utc_now_iso()})
    return Owner(pipeline_id=pipeline_id, state_dir=str(folder), token=token)


def claim(folder: Path, owner: Owner, *, what: str, written_before: bool) -> None:
    """Make ``folder`` this owner's output, or raise ``OutputOwnedElsewhere`` before anything is written there.

    ``what`` names the setting (``destination 'lake' (path)``); ``written_before`` says whether this state
    directory already committed batches to it (its commit markers): a folder written before ownership markers
    existed is taken over by the pipeline that wrote it, and only by it.
    """
    if folder.exists() and not folder.is_dir():
        return  # a file where the folder should be: no pipeline's batches to protect; the write fails with its own error
    marker = folder / OWNER_FILE
    recorded = _read_marker(marker)
    if recorded is not None:
        if recorded.get("token") == owner.token:
            if recorded.get("state_dir") != owner.state_dir or recorded.get("pipeline_id") != owner.pipeline_id:
                _write_marker(marker, owner)  # the same state directory, moved or renamed: keep the marker current
            return
        other = Owner(str(recorded.get("pipeline_id")), str(recorded.get("state_dir")), str(recorded.get("token")))
        raise OutputOwnedElsewhere(  # short: an error's summary keeps 500 characters
            f"{what} {folder} is the output of {other.describe()}; {owner.describe()} would replace its batches "
            f"there. Give each pipeline its own path (docs/destinations.md, one owner per output)"
        )
    entries = _entries(folder)
    if entries and not written_before:
        shown = ", ".join(sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
        raise OutputOwnedElsewhere(
            f"{what} {folder} already holds data that {owner.describe()} did not write ({shown}); it would replace "
            f"the batch_id=<n> folders there. Choose an empty path or move that data away (docs/destinations.md, one "
            f"owner per output)"
        )
    _write_marker(marker, owner)


def _entries(folder: Path) -> list[str]:
    try:
        return [name for name in os.listdir(folder) if name != OWNER_FILE]
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        return [folder.name]


def _read_marker(marker: Path) -> dict | None:
    try:
        found = read_json(marker)
    except ValueError:
        return {"pipeline_id": "unknown (unreadable marker)", "state_dir": "unknown", "token": None}
    return found if isinstance(found, dict) else None


def _write_marker(marker: Path, owner: Owner) -> None:
    marker.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, {"pipeline_id": owner.pipeline_id, "state_dir": owner.state_dir, "token": owner.token,
                               "claimed_at": utc_now_iso()})

