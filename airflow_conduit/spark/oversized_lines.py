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

import os
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import unquote, urlparse

from airflow_conduit.spark.parsing import JSON_MAX_STRING_LENGTH, RECORD_TOO_LARGE

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


def scan(pieces: Iterator[bytes], bound: int, uri: str = "") -> list[LongLine]:
    """The lines of a file (given in pieces of any size) whose length with its line end reaches ``bound``."""
    found: list[LongLine] = []
    start = 0  # the current line's first byte in the file
    offset = 0  # the piece's first byte in the file
    number = 1
    prefix = bytearray()
    for piece in pieces:
        at = 0
        while True:
            nl = piece.find(b"\n", at)
            end = len(piece) if nl < 0 else nl + 1
            if len(prefix) < PREFIX_BYTES:  # the line's bytes without its line end
                prefix += piece[at:min(len(piece) if nl < 0 else nl, at + PREFIX_BYTES - len(prefix))]
            if nl < 0:
                break
            length = offset + end - start
            if length >= bound:
                found.append(LongLine(uri, number, start, length, bytes(prefix)))
            number += 1
            start = offset + end
            prefix = bytearray()
            at = end
        offset += len(piece)
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
    return scan(_hadoop_pieces(spark, uri, bound), bound, uri)


def _hadoop_pieces(spark, uri: str, bound: int) -> Iterator[bytes]:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path) or fs.getFileStatus(path).getLen() < bound:
        return
    stream = fs.open(path)
    try:
        buffer = spark.sparkContext._gateway.new_array(jvm.byte, PIECE)
        while True:
            n = stream.read(buffer, 0, PIECE)
            if n is None or n < 0:
                return
            yield bytes(buffer)[:n]  # py4j copies the array
    finally:
        stream.close()


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
