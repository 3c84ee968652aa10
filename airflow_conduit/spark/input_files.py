"""Input files that changed after they were read: found, reported and repeated, never silent.

Spark's file source reads a file once, by name (its checkpoint's source log
keeps each file's path and the modification time it was listed with): lines
appended to a file it already read are never read. The runner keeps, per
file it read, its modification time and size as read
(``STATE_DIR/input-files/read.json``), and at each batch and when a run
starts and ends compares them with the file now. A file whose size or
modification time changed is an **input file changed** finding
(``INPUT_FILE_CHANGED``): a WARN line in the driver log naming the file and
the byte range not processed, an entry in the run report
(``input_files_changed``) and in ``STATE_DIR/input-files/changed.json``,
which every later run reports again (driver log and report) until the file
is removed from it. The bytes are not processed: deliver files complete
(write elsewhere, then move or rename into the folder) and deliver missing
lines as a new file (docs/sources.md, delivering input files).

What a check stats: a batch's cost must not grow with every file a pipeline
ever read (a remote stat is a request). When a run starts and ends, every
file read so far; at a batch, the files that may still be written (*unsettled*:
modified less than ``SETTLE_MS`` before they were last stat'd), and every file
once ``SWEEP_SECONDS`` have passed since the last full check. The ledger files
are rewritten only when what they hold changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic
from airflow_conduit.spark.jvm import files as hadoop_files
from airflow_conduit.spark.jvm.file_scan import listed_lengths

log = logging.getLogger(__name__)

FOLDER = "input-files"
CODE = "INPUT_FILE_CHANGED"
RENAMED = "INPUT_FILE_RENAMED"  # a file already read, found again under another name: not read again
GONE = "INPUT_FILE_GONE"  # a file listed for a batch and gone before it was read: its records were not processed
Stat = Callable[[str], "tuple[int, int] | None"]  # uri -> (size, modification time in ms), None when gone
SETTLE_MS = 60_000  # a file modified less than this before a stat may still be written: checked at every batch
SWEEP_SECONDS = 60.0  # at most this long between two checks of every file read, while a run goes on


def local_stat(uri: str) -> tuple[int, int] | None:
    """(size, mtime in ms) of a local file, None when it is gone; a remote one goes through ``hadoop_stat``."""
    parsed = urlparse(uri)
    try:
        st = os.stat(unquote(parsed.path))
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns // 1_000_000


FINGERPRINT_BYTES = 64 * 1024  # a file's fingerprint hashes its size and this many bytes at each end


def local_identity(uri: str) -> dict[str, Any] | None:
    """What tells a local file apart from another beyond its name: device, inode, size, mtime and a fingerprint
    (SHA-256 of its size and first and last ``FINGERPRINT_BYTES``); None when it is gone or not local."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return None
    path = unquote(parsed.path)
    try:
        st = os.stat(path)
        digest = hashlib.sha256(str(st.st_size).encode())
        with open(path, "rb") as f:
            digest.update(f.read(FINGERPRINT_BYTES))
            if st.st_size > FINGERPRINT_BYTES:
                f.seek(max(FINGERPRINT_BYTES, st.st_size - FINGERPRINT_BYTES))
                digest.update(f.read(FINGERPRINT_BYTES))
    except OSError:
        return None
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ms": st.st_mtime_ns // 1_000_000,
            "fingerprint": digest.hexdigest()[:32]}


def same_file(read: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether ``now`` (a file under another name) is the file ``read`` was: the same content (size, modification
    time and fingerprint) on the same inode, or the same content moved from another file system."""
    kept = read.get("identity")
    if not kept:
        return False
    content = all(kept.get(k) == now.get(k) for k in ("size", "mtime_ms", "fingerprint"))
    return content  # same inode or not: a move across file systems copies the bytes and keeps the mtime


LAST_LINE_SETTLE_SECONDS = 10.0  # a file still being written is read once unchanged this long...
LAST_LINE_WAIT_SECONDS = 300.0  # ...or once this long has passed (the batch then reads what is there)


def _local(uri: str) -> str | None:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else None


def needs_settling(uri: str, listed: int) -> bool:
    """Whether a local file listed at ``listed`` bytes was being written then: it has grown since, or its last
    listed line has no line end (Hadoop's reader reads a line that starts at or before the listed end to its end,
    so such a line is read complete only once its writer finished it)."""
    path = _local(uri)
    if path is None or listed <= 0:
        return False
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(listed - 1)
            return size != listed or f.read(1) != b"\n"
    except OSError:
        return False


def wait_until_settled(uri: str, *, settle: float = LAST_LINE_SETTLE_SECONDS, limit: float = LAST_LINE_WAIT_SECONDS,
                       clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until the local file's size and modification time are unchanged for ``settle`` seconds (True), or
    ``limit`` seconds have passed (False: it is still written)."""
    start = clock()
    last, since = local_stat(uri), clock()
    while clock() - start < limit:
        if clock() - since >= settle:
            return True
        sleep(min(0.25, settle))
        now = local_stat(uri)
        if now != last:
            last, since = now, clock()
    return False


def processed_to(uri: str, listed: int) -> int:
    """Where what the reader read of a file listed at ``listed`` bytes ends: Hadoop's line reader reads each line
    that starts at or before the listed end, to its line end. So the end of the first line end at or after
    ``listed`` (the file's end when there is none): a line boundary."""
    path = _local(uri)
    if path is None:
        return listed
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= listed:
            return size
        f.seek(listed)
        at = listed
        while True:
            piece = f.read(1 << 20)
            if not piece:
                return at
            nl = piece.find(b"\n")
            if nl >= 0:
                return at + nl + 1
            at += len(piece)


def hadoop_stat(spark) -> Stat:
    """``local_stat`` for local files, Hadoop's FileSystem (through the driver's JVM) for the others."""
    def stat(uri: str) -> tuple[int, int] | None:
        if urlparse(uri).scheme in ("", "file"):
            return local_stat(uri)
        return hadoop_files.stat(spark, uri)

    return stat


def source_log_entries(checkpoint: Path, batch_id: int) -> list[dict[str, Any]]:
    """The files Spark's file sources listed for ``batch_id`` (``sources/<n>/<batch>[.compact]``: path, timestamp)."""
    out: list[dict[str, Any]] = []
    root = checkpoint / "sources"
    if not root.is_dir():
        return out
    for source in sorted(root.iterdir()):
        for name in (str(batch_id), f"{batch_id}.compact"):
            path = source / name
            if not path.is_file():
                continue
            for line in path.read_text(encoding="utf-8").splitlines()[1:]:  # line 1 is the log's version
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("batchId") == batch_id and entry.get("path"):
                    out.append(entry)
    return out


def _finding(uri: str, read: dict[str, Any], now: tuple[int, int], at: str) -> dict[str, Any]:
    size_now, mtime_now = now
    read_bytes = read.get("size")
    return {
        "file": uri, "batch_id": read.get("batch_id"), "read_bytes": read_bytes, "read_mtime_ms": read.get("mtime_ms"),
        "size_now": size_now, "mtime_now_ms": mtime_now, "detected_at": at,
    }


def describe(finding: dict[str, Any]) -> str:
    """The WARN line of a finding: the file, what was read and the byte range not processed."""
    if finding.get("renamed_from"):
        return (f"{RENAMED}: input file {finding['file']} is {finding['renamed_from']} (read in batch "
                f"{finding.get('batch_id')}) under a new name: not read again")
    if finding.get("gone_before_read"):
        return (f"{GONE}: input file {finding['file']} (listed for batch {finding.get('batch_id')}) was deleted or "
                "moved away before it was read: none of its records were processed; deliver it again (under a new "
                "name) if they are wanted")
    read, now = finding.get("read_bytes"), finding.get("size_now")
    if read is not None and now > read:
        what = f"grew from {read:,} to {now:,} bytes: bytes {read:,}..{now:,} (end excluded) were not processed"
    elif read is not None and now != read:
        what = f"was rewritten ({read:,} bytes read, {now:,} now): its new content was not processed"
    else:
        what = "was modified after it was read: what changed was not processed"
    return (f"{CODE}: input file {finding['file']} (read in batch {finding.get('batch_id')}) {what}; Spark's file source "
            "reads a file once: deliver files complete (write elsewhere, then move into the folder) and deliver "
            "missing lines as a new file")


class InputFiles:
    """The files a pipeline read, as read, and the ones that changed since (see the module docstring)."""

    def __init__(
        self,
        state_dir: Path,
        stat: Stat = local_stat,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        sweep_seconds: float | None = None,
        identity: Callable[[str], "dict[str, Any] | None"] = local_identity,
    ):
        self.folder = Path(state_dir) / FOLDER
        self.stat = stat
        self.identity = identity
        self.clock = clock
        self.wall_ms = wall_ms
        self.sweep_seconds = SWEEP_SECONDS if sweep_seconds is None else sweep_seconds
        self.read: dict[str, dict[str, Any]] = read_json(self.folder / "read.json") or {}
        self.changed: dict[str, dict[str, Any]] = read_json(self.folder / "changed.json") or {}
        self.unsettled: set[str] = set(self.read)  # unknown until a stat: a full check settles them
        self._swept_at: float | None = None  # when every file was last checked
        self._dirty: set[str] = set()  # the ledger files to rewrite ("read.json", "changed.json")
        self.noted: list[str] = []  # the files the last note_batch saw first
        self._by_fingerprint: dict[str, list[str]] | None = None  # the files read, by content (renamed files)

    def _settled(self, now: tuple[int, int]) -> bool:
        return now[1] <= self.wall_ms() - SETTLE_MS

    def note_batch(self, checkpoint: Path, batch_id: int, number: int | None = None) -> tuple[list[str], list[dict[str, Any]]]:
        """Remember the files the checkpoint's batch ``batch_id`` (the runner's batch ``number``) reads, with the
        size they had when Spark listed them (when the file is unchanged since: its modification time is still
        the listed one) and, for a local file, its identity (``local_identity``).

        Returns (the files not to read: already read under another name or gone, the findings about them)."""
        skip: list[str] = []
        findings: list[dict[str, Any]] = []
        self.noted = []
        batch = batch_id if number is None else number
        for entry in source_log_entries(checkpoint, batch_id):
            uri = entry["path"]
            if uri in self.read:
                if self.read[uri].get("renamed_from"):  # a re-run of the batch: still not read
                    skip.append(uri)
                continue
            if self.changed.get(uri, {}).get("gone_before_read"):  # a re-run of the batch: reported already
                skip.append(uri)
                continue
            now = self.stat(uri)
            listed = int(entry.get("timestamp") or 0)
            at = utc_now_iso()
            if now is None:  # listed, then deleted or moved away before this batch read it
                finding = {"file": uri, "batch_id": batch, "read_bytes": None, "read_mtime_ms": listed,
                           "size_now": None, "mtime_now_ms": None, "gone_before_read": True, "detected_at": at}
                self.changed[uri] = finding
                self._dirty.add("changed.json")
                findings.append(finding)
                skip.append(uri)  # not read: a read of a file gone fails the batch, and its restart reads nothing
                log.warning(describe(finding))
                continue
            size = now[0] if now[1] == listed else None
            identity = self.identity(uri)
            self.read[uri] = {"batch_id": batch, "mtime_ms": listed, "size": size}
            if identity is not None:
                self.read[uri]["identity"] = identity
                earlier = self._renamed_from(uri, identity)
                if earlier is not None:
                    self.read[uri].update(renamed_from=earlier, batch_id=self.read[earlier].get("batch_id"))
                    finding = {"file": uri, "renamed_from": earlier, "batch_id": self.read[earlier].get("batch_id"),
                               "read_bytes": size, "size_now": now[0], "detected_at": at}
                    findings.append(finding)
                    skip.append(uri)
                    log.warning(describe(finding))
            self._dirty.add("read.json")
            self.noted.append(uri)
            if size is None or not self._settled(now):
                self.unsettled.add(uri)
        return skip, findings

    def read_up_to(self, uri: str, size: int) -> None:
        """What the batch reads of a file that settled after its listing: ``size`` bytes (``processed_to``), as the
        file is now."""
        now = self.stat(uri)
        if uri in self.read and now is not None:
            self.read[uri].update(size=size, mtime_ms=now[1])
            self._dirty.add("read.json")

    def _renamed_from(self, uri: str, identity: dict[str, Any]) -> str | None:
        """The file already read that ``uri`` is under another name, when that name is gone (a copy is a new file).
        Looked up by fingerprint: a batch's cost does not grow with the files read before it."""
        if self._by_fingerprint is None:
            self._by_fingerprint = {}
            for earlier, read in self.read.items():
                if read.get("identity"):
                    self._by_fingerprint.setdefault(read["identity"].get("fingerprint"), []).append(earlier)
        candidates = self._by_fingerprint.setdefault(identity.get("fingerprint"), [])
        found = None
        for earlier in candidates:
            path = _local(earlier)
            if earlier != uri and same_file(self.read[earlier], identity) and path is not None and not os.path.exists(path):
                found = self.read[earlier].get("renamed_from") or earlier
                break
        candidates.append(uri)
        return found

    def sweep_due(self) -> bool:
        """Whether the last check of every file read is ``sweep_seconds`` old."""
        return self._swept_at is None or self.clock() - self._swept_at >= self.sweep_seconds

    def check(self, *, every_file: bool = False, reading: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Files changed since they were read and not reported yet (each is also kept in ``changed``).

        Checks the unsettled files, or every file read when ``every_file`` or when the last full check is
        ``sweep_seconds`` old. The files in ``reading`` (the batch's own, about to be read) are not: one still growing
        is waited for (``settle_still_written``), not reported as changed after a read that has not happened."""
        sweep = every_file or self._swept_at is None or self.clock() - self._swept_at >= self.sweep_seconds
        if sweep:
            self._swept_at = self.clock()
        found: list[dict[str, Any]] = []
        at = utc_now_iso()
        reading = set(reading)
        for uri in list(self.read if sweep else self.unsettled):
            if uri in reading:
                continue
            read = self.read[uri]
            if uri in self.changed:
                self.unsettled.discard(uri)
                continue
            now = self.stat(uri)
            if now is None:  # moved away or deleted after it was read (archiving read files is fine): nothing lost
                self.unsettled.discard(uri)
                continue
            if now[1] == read.get("mtime_ms") and (read.get("size") is None or now[0] == read["size"]):
                if read.get("size") is not None and self._settled(now):
                    self.unsettled.discard(uri)
                else:
                    self.unsettled.add(uri)
                continue
            finding = _finding(uri, read, now, at)
            self.changed[uri] = finding
            self.unsettled.discard(uri)
            self._dirty.add("changed.json")
            found.append(finding)
            log.warning(describe(finding))
        return found

    def repeat_known(self) -> list[dict[str, Any]]:
        """The changes found by earlier runs, logged again (a restart is never silent about them)."""
        for finding in self.changed.values():
            log.warning("%s (found earlier, at %s)", describe(finding), finding.get("detected_at"))
        return list(self.changed.values())

    def save(self) -> None:
        """Rewrite the ledger files whose content changed since they were read or last saved."""
        if "read.json" in self._dirty:
            write_json_atomic(self.folder / "read.json", self.read, durable=False)  # per batch: see write_json_atomic
        if "changed.json" in self._dirty:
            write_json_atomic(self.folder / "changed.json", self.changed, durable=False)
        self._dirty.clear()


def settle_still_written(files: InputFiles, batch) -> None:
    """Wait, before the batch reads them, for the batch's new local files that were still being written when
    Spark listed them (``needs_settling``): their last line is then read complete, never a truncated record in
    the DLQ; what the batch reads of them ends at a line end (``processed_to``), where a later finding starts."""
    fresh = [uri for uri in files.noted if uri in files.unsettled and _may_be_half_written(uri, files.read[uri])]
    if not fresh:  # the usual case: no JVM call
        return
    listed = {_as_read(uri): n for uri, n in listed_lengths(batch).items()}
    for uri in fresh:
        size = listed.get(_as_read(uri))
        if size is None or not needs_settling(uri, size):
            continue
        log.info("input file %s is still being written: the batch waits for it to settle", uri)
        if not wait_until_settled(uri):
            log.warning("input file %s was still being written after %.0f s: the batch reads it as it is", uri,
                        LAST_LINE_WAIT_SECONDS)
        files.read_up_to(uri, processed_to(uri, size))
    files.save()


def _may_be_half_written(uri: str, read: dict[str, Any]) -> bool:
    """A local file modified since Spark listed it (its size as listed unknown), or whose last byte is no line end."""
    path = _local(uri)
    if path is None:
        return False
    if read.get("size") is None:
        return True
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


def _as_read(uri: str) -> str:
    """A file's URI as the pass's ``source_file`` writes it (``file:/x``, not ``file:///x``)."""
    return "file:/" + uri[len("file:///"):] if uri.startswith("file:///") else uri


def without_files(batch, uris: list[str]):
    """The batch without these files (read before under another name, or gone): not read at all."""
    if not uris:
        return batch
    from pyspark.sql import functions as F

    names = sorted({form for uri in uris for form in (uri, _as_read(uri), "file:///" + _as_read(uri)[len("file:/"):])})
    return batch.where(~F.input_file_name().isin(names))
