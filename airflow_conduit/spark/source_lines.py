"""A DLQ record's line in its source file: its physical line number and its bytes, found after the pass.

Spark's JSON and CSV readers do not say where a record was in its file: the
pass knows only a record's index among the records of its file split (its
index in the split's partition). Records are the reader's lines that are not
blank (Hadoop's line reader splits on ``\\n``, ``\\r\\n`` and a lone ``\\r``;
a JSON line of JSON whitespace only, a CSV line of bytes <= space only, makes
no record; a CSV file's first non-blank line is its header), so after a
blank line the index is no longer the line number, and the reader's text of
a line has lost its ``\\r``. A JSON line holding an array of objects is one
record per element to Spark's JSON reader (none for ``[]``); any other array
is one malformed record.

So, for the DLQ's records only, after the pass, each file that holds one is
read again up to its last DLQ record and the records are counted as the
reader counted them: that gives the physical line number (what ``sed -n Np``
prints: lines end at ``\\n`` only) and the line's bytes as they are in the
file (CRLF kept). Good records carry nothing for it; files without DLQ
records are not read.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Iterator
from urllib.parse import unquote, urlparse

try:  # installed with PySpark's SQL extras; without it, a slower loop (see _Lines)
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is in this project's environment
    _np = None
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark import columns as C
from airflow_conduit.spark.jvm import dataframe_calls
from airflow_conduit.spark.jvm import files as hadoop_files
from airflow_conduit.spark.sources import SourcePlan, csv_header, line_bound

JSON_BLANK = b" \t\r"  # Jackson's whitespace (a line holds no \n): a line of it makes no record
CSV_BLANK = bytes(range(33))  # Java's String.trim: a CSV line of these makes no record
DEFAULT_MAX_STRING_LEN = 20_000_000  # Jackson's own limit on one string value
CHUNK = 1 << 20  # a file is read in pieces of at most this size, each ending at a line end: its lines are found
# in a piece while it is in the CPU's cache, and the read stops within a piece of the last wanted record
READERS = min(4, os.cpu_count() or 1)  # threads reading local files again (see SourceLines._read_files)
log = logging.getLogger(__name__)

KEYS = ("source_id", "source_file", "source_split_start", "source_position")


@dataclass(frozen=True)
class LineRules:
    """How one source's reader turns lines into records."""

    blank: bytes
    header: bool  # the file's first non-blank line is not a record (CSV with a header)
    arrays: bool = False  # a line holding an array of objects is one record per element (Spark's JSON reader)
    max_line: int | None = None  # a line this long with its line end is skipped by the reader (oversized_lines)

    def too_long(self, line: bytes) -> bool:
        return self.max_line is not None and len(line) + 1 >= self.max_line

    def first_position(self, split: int) -> int:
        """The pass's ``source_position`` of a split's first record (``sources._position``)."""
        return 1 + (1 if self.header and split == 0 else 0)


def rules_of(plan: SourcePlan) -> LineRules | None:
    """The line rules of a file source read line by line (json, csv); None for the others."""
    if plan.parser == "json":
        return LineRules(JSON_BLANK, header=False, arrays=True, max_line=line_bound(plan.spec))
    if plan.parser == "csv":
        return LineRules(CSV_BLANK, header=csv_header(plan.spec), max_line=line_bound(plan.spec))
    return None


def _reader_lines(line: bytes) -> list[bytes]:
    """The reader's lines within one physical line (split on a lone ``\\r``; a final ``\\r`` is CRLF's)."""
    if b"\r" not in line:
        return [line]
    parts = line.split(b"\r")
    if parts[-1] == b"":
        parts.pop()
    return parts or [b""]


def _skip_first_reader_line(data: bytes, start: int) -> int:
    """Where a split starting at ``start`` > 0 begins reading (Hadoop drops the line it starts in)."""
    at = min((i for i in (data.find(b"\n", start), data.find(b"\r", start)) if i >= 0), default=len(data))
    if data[at:at + 2] == b"\r\n":
        return at + 2
    return at + 1


def _is_blank(part: bytes, blank: bytes) -> bool:
    return not part or (part[0] in blank and not part.strip(blank))


def _array_records(part: bytes) -> int:
    """The records Spark's JSON reader makes of a line starting with ``[``: one per element when every element
    is an object (what follows the array is ignored, as the reader does), else one (malformed)."""
    try:
        value, _ = json.JSONDecoder().raw_decode(part.decode("utf-8").lstrip(" \t\r"))
    except (UnicodeDecodeError, ValueError):
        return 1
    return len(value) if isinstance(value, list) and all(isinstance(v, dict) for v in value) else 1


def _records_on(part: bytes, rules: "LineRules") -> int:
    """How many records the reader makes of one of its lines."""
    if _is_blank(part, rules.blank):
        return 0
    if rules.arrays and part.lstrip(rules.blank)[:1] == b"[":
        return _array_records(part)
    return 1


class _Lines:
    """The physical lines of a chunk (the bytes between ``\\n``): how many, one line's bytes, and which lines hold
    other than exactly one of the reader's records (``exceptions``).

    With numpy (installed with PySpark's SQL extras) the line ends are found in C and a line is looked at in
    Python only when it may be blank (empty, or starting with a blank byte): a Python loop over every line of
    a large file cost about a second per 200 MB. Without numpy, that loop.
    """

    def __init__(self, chunk: bytes | memoryview):
        if _np is None or not isinstance(chunk, memoryview):
            chunk = bytes(chunk)
        self.chunk = chunk
        # a memoryview is a file's piece in the reader's buffer (``_local_chunks``): from the buffer's start
        self._raw = chunk.obj if isinstance(chunk, memoryview) else chunk
        if _np is None:
            self._lines = chunk.split(b"\n")
            if self._lines and self._lines[-1] == b"":
                self._lines.pop()
            self.count = len(self._lines)
            return
        self._bytes = _np.frombuffer(chunk, dtype=_np.uint8)
        newlines = _np.flatnonzero(self._bytes == 0x0A)
        self._ends = newlines if not chunk or chunk[-1:] == b"\n" else _np.append(newlines, len(chunk))
        self._starts = _np.concatenate(([0], newlines + 1))[: len(self._ends)]
        self.count = len(self._ends)

    def __getitem__(self, index: int) -> bytes:
        if _np is None:
            return self._lines[index]
        return bytes(self.chunk[int(self._starts[index]):int(self._ends[index])])

    def _maybe_blank(self, blank: bytes, max_line: int | None = None) -> Iterator[int]:
        """The lines that may hold other than one record: empty, starting with a byte of ``blank``, or too long."""
        if _np is None:
            yield from range(self.count)
            return
        if not self.count:
            return
        lengths = self._ends - self._starts
        first = self._bytes[_np.minimum(self._starts, len(self.chunk) - 1)]  # an empty line's is the next line's
        candidates = (lengths == 0) | _np.isin(first, _np.frombuffer(blank, dtype=_np.uint8))
        if max_line is not None:
            candidates |= lengths + 1 >= max_line
        yield from (int(i) for i in _np.flatnonzero(candidates))

    def _has_lone_cr(self) -> bool:
        """Whether a ``\\r`` ends a reader's line inside a physical line (not CRLF's, not the file's last byte)."""
        if self._raw.find(b"\r", 0, len(self.chunk)) < 0:
            return False
        if _np is None:
            return any(b"\r" in line[:-1] for line in self._lines)
        ends = self._ends[self._ends > self._starts]
        line_final = int(_np.count_nonzero(self._bytes[ends - 1] == 0x0D))
        return int(_np.count_nonzero(self._bytes == 0x0D)) > line_final

    def exceptions(self, rules: LineRules) -> Iterator[tuple[int, int]]:
        """(line index, number of records on it) for the lines that hold other than one record, in order."""
        if not self._has_lone_cr():
            # an array's line starts with "[" after blank bytes: a candidate with "[" counted as blank
            for index in self._maybe_blank(rules.blank + (b"[" if rules.arrays else b""), rules.max_line):
                line = self[index]
                n = 0 if rules.too_long(line) else _records_on(line, rules)
                if n != 1:
                    yield index, n
            return
        for index in range(self.count):
            line = self[index]
            n = sum(0 if rules.too_long(part) else _records_on(part, rules) for part in _reader_lines(line))
            if n != 1:
                yield index, n


def locate(chunks: Iterator[bytes], rules: LineRules, wanted: set[int]) -> dict[int, tuple[int, bytes]]:
    """record index in the file (0-based, as the reader counts from the file's start) -> (line number, line bytes).

    ``chunks``: the file in pieces that end at a line end. Reads only as far as the last wanted record.
    """
    found: dict[int, tuple[int, bytes]] = {}
    if not wanted:
        return found
    shift = 1 if rules.header else 0  # the header counts as record 0 here
    targets = sorted(w + shift for w in wanted)
    t = 0
    first_line = 0  # index in the file of the chunk's first line
    record = 0  # the reader's number of the next record
    for chunk in chunks:
        lines = _Lines(chunk)
        line = 0  # walk the exceptions; between them, one record per line
        for index, n in [*lines.exceptions(rules), (lines.count, None)]:
            plain_end = record + (index - line)  # records on lines line .. index-1, one each
            while t < len(targets) and targets[t] < plain_end:
                at = line + (targets[t] - record)
                found[targets[t] - shift] = (first_line + at + 1, lines[at])
                t += 1
            record, line = plain_end, index
            if n is None:
                break
            while t < len(targets) and targets[t] < record + n:  # several records on one line (a lone \r, an array)
                found[targets[t] - shift] = (first_line + index + 1, lines[index])
                t += 1
            record, line = record + n, index + 1
        if t >= len(targets):
            break
        first_line += lines.count
    return found


def as_record(line: bytes) -> str:
    """The line as the DLQ's ``record``: its text, or base64 of its bytes when they are not UTF-8 (as the pass
    keeps a JSON line that is not UTF-8)."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(line).decode("ascii")


# -- reading files ----------------------------------------------------------------------------------------


def _local_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return None


class ReadBuffer:
    """One buffer the files of a lookup are read into, grown to the largest piece asked for: its pages are
    touched once (a fresh piece per read would pay the kernel's page faults on each, several times the copy from
    the page cache)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def at_least(self, size: int) -> bytearray:
        if len(self.data) < size:
            self.data = bytearray(size)
        return self.data


def _local_chunks(path: str, start: int = 0, buffer: ReadBuffer | None = None) -> Iterator[memoryview]:
    """The file from byte ``start`` in pieces of at most about ``CHUNK`` bytes, each ending at a line end, read
    into ``buffer`` (a longer line grows a copy). A piece is valid until the next is asked for."""
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        size = min(CHUNK, max(os.fstat(f.fileno()).st_size - start, 0) + 1)  # + 1: the end seen in one read
        buf = (buffer or ReadBuffer()).at_least(size)
        kept = 0  # the previous piece's unfinished last line, moved to the buffer's start
        while True:
            if kept == len(buf):  # one line longer than the buffer
                buf = buf + bytearray(len(buf))
            view = memoryview(buf)
            end = kept
            while end < len(buf):
                got = f.readinto(view[end:])
                if not got:
                    break
                end += got
            if end < len(buf):  # the file's end
                if end:
                    yield view[:end]
                return
            cut = buf.rfind(b"\n", 0, end) + 1
            if cut == 0:
                kept = end
                continue
            yield view[:cut]
            buf[:end - cut] = buf[cut:end]
            kept = end - cut


def _local_split_start(path: str, split: int) -> tuple[int, int, int]:
    """Where a split starting at ``split`` > 0 reads its first record, how many ``\\n`` come before it, and where
    that record's physical line starts (before it when a lone ``\\r`` ended the line Hadoop's reader dropped).
    Read without holding the file."""
    with open(path, "rb") as f:
        newlines, pos, line_start = 0, 0, 0
        while pos < split:
            block = f.read(min(CHUNK, split - pos))
            if not block:
                return pos, newlines, line_start
            newlines += block.count(b"\n")
            last = block.rfind(b"\n")
            if last >= 0:
                line_start = pos + last + 1
            pos += len(block)
        while True:
            block = f.read(1 << 20)
            if not block:
                return pos, newlines, pos
            at = min((i for i in (block.find(b"\n"), block.find(b"\r")) if i >= 0), default=-1)
            if at < 0:
                pos += len(block)
                continue
            end = pos + at + 1
            if block[at:at + 1] == b"\n":
                return end, newlines + 1, end
            following = block[at + 1:at + 2] or f.read(1)
            return (end + 1, newlines + 1, end + 1) if following == b"\n" else (end, newlines, line_start)


def _local_bytes(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def read_lines(spark: SparkSession, uri: str, rules: LineRules, wanted: dict[int, set[int]],
               buffer: ReadBuffer | None = None) -> dict[tuple[int, int], tuple[int, bytes]]:
    """(split start, index in the split) -> (line number, line bytes), for the wanted records of one file.

    A local file is read in pieces into ``buffer`` (see ``_local_chunks``), up to its last wanted record; a file
    of another file system whole.
    """
    out: dict[tuple[int, int], tuple[int, bytes]] = {}
    local = _local_path(uri)
    data: bytes | None = None
    for split, indices in wanted.items():
        if local is not None:
            start, before, line_start = (0, 0, 0) if split == 0 else _local_split_start(local, split)
            chunks = _local_chunks(local, start, buffer)
            head = _local_bytes(local, line_start, start) if line_start < start else b""
        else:
            data = data if data is not None else hadoop_files.read_whole(spark, uri)
            start = 0 if split == 0 else _skip_first_reader_line(data, split)
            before = data.count(b"\n", 0, start)
            chunks = iter([data[start:]])
            head = data[data.rfind(b"\n", 0, start) + 1:start]
        split_rules = rules if split == 0 else replace(rules, header=False)  # a header is at the file's start
        found = locate(chunks, split_rules, indices)
        # a record on the split's first line, when that line began before the split's first record: its whole line
        out.update({(split, i): (number + before, head + line if number == 1 else line) for i, (number, line) in found.items()})
    return out


# -- the DLQ rows -----------------------------------------------------------------------------------------

FOUND = "__ac_found"  # the found line (number, text) of a DLQ row
ORDINAL = "__ac_ordinal"  # a DLQ entry's place in the observation's array: its line is found by it (see SourceLines.apply)
_LINES = T.ArrayType(T.StructType([T.StructField("line", T.LongType()), T.StructField("text", T.StringType())]))
_RESOLVED = T.StructType([
    T.StructField("source_id", T.StringType()),
    T.StructField("source_file", T.StringType()),
    T.StructField("source_split_start", T.LongType()),
    T.StructField("source_position", T.LongType()),
    T.StructField("__ac_line", T.LongType()),
    T.StructField("__ac_line_text", T.StringType()),
])


class SourceLines:
    """Puts each DLQ record's physical line number and its line's bytes in its DLQ row (``apply``)."""

    def __init__(self, plans: list[SourcePlan], *, include_messages: bool):
        self.rules = {p.id: r for p in plans if (r := rules_of(p)) is not None}
        self.include_messages = include_messages

    @property
    def needed(self) -> bool:
        return bool(self.rules)

    def resolve(self, spark: SparkSession, keys: list[tuple]) -> list[tuple]:
        """``KEYS`` of DLQ rows -> the same keys with the line number and the line's text (rows not found: left out)."""
        per_file: dict[tuple[str, str], dict[int, set[int]]] = {}
        for source_id, file, split, position in keys:
            rules = self.rules.get(source_id)
            if rules is None or file is None or position is None:
                continue
            split = int(split or 0)
            index = int(position) - rules.first_position(split)
            per_file.setdefault((source_id, file), {}).setdefault(split, set()).add(index)
        out: list[tuple] = []
        for (source_id, file), found in self._read_files(spark, per_file):
            rules = self.rules[source_id]
            for (split, index), (number, line) in found.items():
                position = index + rules.first_position(split)
                out.append((source_id, file, split, position, number, as_record(line)))
        return out

    def _read_files(self, spark: SparkSession, per_file: dict[tuple[str, str], dict[int, set[int]]]) -> list[tuple]:
        """((source id, file), found lines) of each file that could be read, in ``per_file``'s order. Local files
        are read by ``READERS`` threads, each with its own buffer: a read and the search for line ends in it
        (numpy) release the GIL, and the executors are idle while the driver does this. Other file systems' files
        are read through the JVM, one after the other."""
        def read(key, wanted, buffer):
            try:
                return key, read_lines(spark, key[1], self.rules[key[0]], wanted, buffer)
            except Exception as exc:  # noqa: BLE001 - gone or unreadable since the pass: the reader's numbers stay
                log.warning("DLQ records of %s keep the reader's record numbers and text: the file cannot be read "
                            "again (%s: %s)", key[1], type(exc).__name__, exc)
                return key, None

        local = [key for key in per_file if _local_path(key[1]) is not None]
        results: dict[tuple[str, str], dict | None] = {}
        if len(local) > 1 and READERS > 1:
            buffers = queue.SimpleQueue()
            for _ in range(min(READERS, len(local))):
                buffers.put(ReadBuffer())

            def read_local(key):
                buffer = buffers.get()
                try:
                    return read(key, per_file[key], buffer)
                finally:
                    buffers.put(buffer)

            with ThreadPoolExecutor(min(READERS, len(local)), thread_name_prefix="conduit-source-lines") as pool:
                results.update(pool.map(read_local, local))
        buffer = ReadBuffer()  # one for the files read here
        for key, wanted in per_file.items():
            if key not in results:
                results.update([read(key, wanted, buffer)])
        return [(key, results[key]) for key in per_file if results[key] is not None]

    def lines_of(self, spark: SparkSession, keys: list[tuple]) -> list[tuple[int, str] | None]:
        """Each key's line (number, text), or None when it is not found (a key with a NULL part matches nothing).
        Called only when ``needed``."""
        found = {tuple(r[:4]): r[4:] for r in self.resolve(spark, keys)}
        return [found.get(tuple(key)) for key in keys]

    def apply(self, spark: SparkSession, rows: DataFrame, keys: list[tuple], *, ordinal: str | None = None) -> DataFrame:
        """``rows`` (the DLQ's columns) with ``source_position`` = the line number and ``record`` = the line.

        With ``ordinal`` (a column of ``rows``: the row's index in ``keys``, dropped from the result) the lines
        come as one literal array the optimizer folds, looked up by index: the DLQ write stays one job over
        local rows. Without it (the DLQ rows of a second pass) they are joined in as a broadcast relation.
        """
        resolved = self.resolve(spark, keys) if self.needed else []
        if ordinal is not None:
            if not resolved:
                return rows.drop(ordinal)
            found = dataframe_calls.with_jvm_column(rows, FOUND, self._line_at(resolved, keys, ordinal))
            replaced = C.with_columns(found, self._replacing_found)
            return dataframe_calls.drop(replaced, self._once(("drop", ordinal), lambda: dataframe_calls.string_seq([FOUND, ordinal])))
        if not resolved:
            return rows
        lines = spark.createDataFrame(resolved, schema=_RESOLVED, verifySchema=False)
        joined = rows.join(F.broadcast(lines), on=list(KEYS), how="left")
        replaced = self._replaced(F.col("__ac_line"), F.col("__ac_line"), F.col("__ac_line_text"))
        return joined.select(*[replaced[c].alias(c) if c in replaced else F.col(c) for c in rows.columns])

    @functools.cached_property
    def _replacing_found(self) -> C.JvmColumns:
        """``_replaced`` from the ``FOUND`` column, built once per run."""
        found = F.col(FOUND)
        replaced = self._replaced(found, found["line"], found["text"])
        return C.JvmColumns(list(replaced.values()), list(replaced))

    def _replaced(self, found: Column, number: Column, text: Column) -> dict[str, Column]:
        """The DLQ columns a found line replaces: ``source_position`` (its number) and, with messages, ``record``."""
        replaced = {"source_position": F.coalesce(number, F.col("source_position"))}
        if self.include_messages:
            replaced["record"] = F.when(found.isNotNull(), text).otherwise(F.col("record"))
        return replaced

    def _once(self, key: tuple, build):
        """What every batch's ``apply`` hands the JVM the same (a JVM object), built once per run."""
        built = self.__dict__.setdefault("_built", {})
        if key not in built:
            built[key] = build()
        return built[key]

    def _line_at(self, resolved: list[tuple], keys: list[tuple], ordinal: str):
        """The line (number and text) of the row at ``ordinal`` in ``keys``, from a JSON literal of them all
        (``from_json`` of a literal is constant-folded: parsed once, on the driver), as a JVM column: the
        functions, the options and the index built once per run, the literal in one call."""
        found = {tuple(r[:4]): r[4:] for r in resolved}
        lines = [found.get(tuple(key)) for key in keys]  # a key with a NULL part matches nothing, as in a join
        text = json.dumps([None if line is None else {"line": line[0], "text": line[1]} for line in lines])
        limit = max(len(text), DEFAULT_MAX_STRING_LEN)  # a rejected line may be longer than Jackson's default
        options = self._once(("options", limit), lambda: dataframe_calls.java_map({"maxStringLen": str(limit)}))
        index = self._once(("index", ordinal), lambda: dataframe_calls.jvm_column(F.col(ordinal).cast("int") + F.lit(1)))
        parsed = C.jvm_function("from_json")(C.jvm_function("lit")(text), self._lines_type, options)
        return C.jvm_function("try_element_at")(parsed, index)

    @functools.cached_property
    def _lines_type(self) -> str:
        return _LINES.json()
