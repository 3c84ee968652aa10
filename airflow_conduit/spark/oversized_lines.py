"""Lines too long to read: never materialised, each one a DLQ record with its place and a prefix.

A JSON or CSV file source reads its lines with a bounded length (Hadoop's
``mapreduce.input.linerecordreader.line.maxlength``, ``reader_option``): a
line at or over the bound is skipped by the reader, so no JVM ever holds it
whole (a 100 MB line held whole, parsed and copied a few times ends the JVM
with an OutOfMemoryError). The reader skips it silently, so the driver looks
for such lines itself, in the batch's files that are big enough to hold one
(``find``), reading them in pieces of 1 MB, and the batch's DLQ gets one
``RecordTooLargeError`` record per line: its file, line number, first byte
and length, and its first ``PREFIX_BYTES`` bytes as ``record``.

The bound is the source's ``max-string-length`` (a JSON string value's
limit in characters) plus ``LINE_SLACK`` bytes for the rest of the record.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import unquote, urlparse

from airflow_conduit.spark.input_files import source_log_entries
from airflow_conduit.spark.jvm import files as hadoop_files
from airflow_conduit.spark.parsing import JSON_MAX_STRING_LENGTH, RECORD_TOO_LARGE

log = logging.getLogger(__name__)
HADOOP_MAX_LINE = "mapreduce.input.linerecordreader.line.maxlength"
LINE_SLACK = 1 << 20  # bytes a line may hold besides its longest string value
PREFIX_BYTES = 1024  # a too-long line's first bytes, kept as its DLQ record
PIECE = 1 << 20


def line_bound(max_string_length: int | None) -> int:
    """The reader's line bound in bytes (a line whose bytes, its line end included, reach it is skipped)."""
    limit = JSON_MAX_STRING_LENGTH if max_string_length is None else int(max_string_length)
    return min(limit + LINE_SLACK, 2**31 - 1)


@dataclass(frozen=True)
class LongLine:
    """A line the reader skipped: its 1-based line number, first byte, length (its line end included)."""

    uri: str
    number: int
    start: int
    length: int
    prefix: bytes

    def message(self, bound: int) -> str:
        return (f"record exceeds the reader's line limit of {bound:,} bytes (source setting max-string-length "
                f"plus {LINE_SLACK:,}): line {self.number:,} is {self.length:,} bytes long, bytes "
                f"{self.start:,}..{self.start + self.length:,} (end excluded) of the file; it was not read "
                f"(its first {min(PREFIX_BYTES, self.length):,} bytes are the DLQ record): raise max-string-length, "
                "memory permitting, and deliver the line as a new file")


def as_read(uri: str) -> str:
    """A file's URI as the pass's ``source_file`` writes it (``file:/x``, not ``file:///x``)."""
    return "file:/" + uri[len("file:///"):] if uri.startswith("file:///") else uri


def batch_entries(spark, checkpoint, checkpoint_batch: int, plans: list, not_read: list[str]) -> list[tuple]:
    """The DLQ entries of the lines the checkpoint's batch's JSON and CSV file sources skip as too long."""
    line_plans = [p for p in plans if p.parser in ("json", "csv")]
    if not line_plans:
        return []
    entries: list[tuple] = []
    for entry in source_log_entries(checkpoint, checkpoint_batch):
        if entry["path"] in not_read:
            continue
        uri = as_read(entry["path"])
        plan = plan_of(uri, line_plans)
        if plan is None:
            continue
        bound = line_bound(plan.spec.settings.get("max-string-length"))  # sources.line_bound
        found = find(uri, bound, spark)
        for line in found:
            log.warning("%s: %s: %s", RECORD_TOO_LARGE, uri, line.message(bound))
        entries += dlq_entries(found, plan.id, plan.spec.plugin, bound)
    return entries


def plan_of(uri: str, plans: list):
    """The source (of ``plans``, file sources) whose folder holds the file; the only one when there is one."""
    if len(plans) == 1:
        return plans[0]
    path = _local_path(uri) or urlparse(uri).path
    for plan in plans:
        folder = str(plan.spec.settings.get("path") or "")
        folder_path = _local_path(folder) or urlparse(folder).path
        if folder_path and path.startswith(os.path.abspath(folder_path).rstrip("/") + "/"):
            return plan
    return None


def _local_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else None


def _pieces(path: str) -> Iterator[bytes]:
    with open(path, "rb", buffering=0) as f:
        while True:
            piece = f.read(PIECE)
            if not piece:
                return
            yield piece


_LINE_END = re.compile(rb"\r\n|\r|\n")


def scan(pieces: Iterator[bytes], bound: int, uri: str = "") -> list[LongLine]:
    """The reader's lines of a file (given in pieces of any size) whose length with its line end reaches ``bound``.

    Lines end as Hadoop's reader ends them: at ``\\n``, ``\\r\\n`` or a lone ``\\r``; a line's number is its physical
    line's (``\\n``s before it, plus one: what ``sed -n Np`` prints)."""
    found: list[LongLine] = []
    start = 0  # the current line's first byte in the file
    offset = 0  # the piece's first byte in the file
    number = 1
    prefix = bytearray()
    cr_pending = False  # the previous piece ended with a \r: a \n may follow

    def line_ends(end: int, newline: bool) -> None:
        nonlocal start, number, prefix
        if end - start >= bound:
            found.append(LongLine(uri, number, start, end - start, bytes(prefix)))
        start, prefix = end, bytearray()
        if newline:
            number += 1

    for piece in pieces:
        at = 0
        if cr_pending:
            cr_pending = False
            if piece[:1] == b"\n":
                line_ends(offset + 1, True)
                at = 1
            else:
                line_ends(offset, False)
        if bound > len(piece):  # a line that starts in this piece and ends in it is shorter than the bound
            first = _LINE_END.search(piece, at)
            if first is not None and not (first.group() == b"\r" and first.end() == len(piece)):
                if len(prefix) < PREFIX_BYTES:
                    prefix += piece[at:min(first.start(), at + PREFIX_BYTES - len(prefix))]
                line_ends(offset + first.end(), first.group() != b"\r")  # the line that began before this piece
                at = first.end()
                last = max(piece.rfind(b"\n", at), piece.rfind(b"\r", at))
                if last == len(piece) - 1 and piece[last] == 0x0D:  # a final \r: its \n may come next
                    last = max(piece.rfind(b"\n", at, last), piece.rfind(b"\r", at, last))
                if last >= at:  # skip the lines that start and end here, counting their \n
                    number += piece.count(b"\n", at, last + 1)
                    start, prefix, at = offset + last + 1, bytearray(), last + 1
        for match in _LINE_END.finditer(piece, at):
            if len(prefix) < PREFIX_BYTES:
                prefix += piece[at:min(match.start(), at + PREFIX_BYTES - len(prefix))]
            if match.group() == b"\r" and match.end() == len(piece):  # \r\n across two pieces?
                cr_pending = True
                at = len(piece)
                break
            line_ends(offset + match.end(), match.group() != b"\r")
            at = match.end()
        else:
            if len(prefix) < PREFIX_BYTES:
                prefix += piece[at:at + PREFIX_BYTES - len(prefix)]
        offset += len(piece)
    if cr_pending:
        line_ends(offset, False)
    if offset - start >= bound:  # a last line without a line end
        found.append(LongLine(uri, number, start, offset - start, bytes(prefix)))
    return found


def find(uri: str, bound: int, spark=None) -> list[LongLine]:
    """The too-long lines of the file at ``uri``; a file smaller than ``bound`` has none (not read)."""
    path = _local_path(uri)
    if path is not None:
        try:
            if os.path.getsize(path) < bound:
                return []
            return scan(_pieces(path), bound, uri)
        except FileNotFoundError:
            return []
    if spark is None:
        return []
    return scan(hadoop_files.pieces(spark, uri, PIECE, at_least=bound), bound, uri)


def _text(prefix: bytes) -> str:
    """The prefix as text: cut before a character it splits; with bytes that are not UTF-8, base64-encoded."""
    for cut in range(4):
        try:
            return prefix[:len(prefix) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    import base64

    return base64.b64encode(prefix).decode("ascii")


def dlq_entries(lines: list[LongLine], source_id: str, component_type: str, bound: int) -> list[tuple]:
    """One DLQ entry (``dlq.ENTRY_FIELDS``) per line: stage source, ``RecordTooLargeError``, the prefix as record."""
    return [
        (source_id, line.uri, line.number, 0, "source", source_id, component_type, RECORD_TOO_LARGE,
         line.message(bound), None, 1, _text(line.prefix))
        for line in lines
    ]
