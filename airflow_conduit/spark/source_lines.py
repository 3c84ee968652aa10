"""A DLQ record's line in its source file: its physical line number and its bytes, found after the pass.

Spark's JSON and CSV readers do not say where a record was in its file: the
pass knows only a record's index among the records of its file split (its
index in the split's partition). Records are the reader's lines that are not
blank (Hadoop's line reader splits on ``\\n``, ``\\r\\n`` and a lone ``\\r``;
a JSON line of JSON whitespace only, a CSV line of bytes <= space only, makes
no record; a CSV file's first non-blank line is its header), so after a
blank line the index is no longer the line number, and the reader's text of
a line has lost its ``\\r``.

So, for the DLQ's records only, after the pass, each file that holds one is
read again up to its last DLQ record and the records are counted as the
reader counted them: that gives the physical line number (what ``sed -n Np``
prints: lines end at ``\\n`` only) and the line's bytes as they are in the
file (CRLF kept). Good records carry nothing for it; files without DLQ
records are not read.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.spark.sources import SourcePlan, csv_header

JSON_BLANK = b" \t\r"  # Jackson's whitespace (a line holds no \n): a line of it makes no record
CSV_BLANK = bytes(range(33))  # Java's String.trim: a CSV line of these makes no record
CHUNK = 64 << 20  # a file is read in pieces of about this size, each ending at a line end
KEYS = ("source_id", "source_file", "source_split_start", "source_position")


@dataclass(frozen=True)
class LineRules:
    """How one source's reader turns lines into records."""

    blank: bytes
    header: bool  # the file's first non-blank line is not a record (CSV with a header)

    def first_position(self, split: int) -> int:
        """The pass's ``source_position`` of a split's first record (``sources._position``)."""
        return 1 + (1 if self.header and split == 0 else 0)


def rules_of(plan: SourcePlan) -> LineRules | None:
    """The line rules of a file source read line by line (json, csv); None for the others."""
    if plan.parser == "json":
        return LineRules(JSON_BLANK, header=False)
    if plan.parser == "csv":
        return LineRules(CSV_BLANK, header=csv_header(plan.spec))
    return None


def _reader_lines(line: bytes) -> list[bytes]:
    """The reader's lines within one physical line (split on a lone ``\\r``; a final ``\\r`` is CRLF's)."""
    if b"\r" not in line:
        return [line]
    parts = line.split(b"\r")
    if parts[-1] == b"":
        parts.pop()
    return parts or [b""]


def _physical_lines(chunks: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    """(0-based line index, the line's bytes without its ``\\n``) of a file given in pieces ending at line ends."""
    index = 0
    for chunk in chunks:
        lines = chunk.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for line in lines:
            yield index, line
            index += 1


def _skip_first_reader_line(data: bytes, start: int) -> int:
    """Where a split starting at ``start`` > 0 begins reading (Hadoop drops the line it starts in)."""
    at = min((i for i in (data.find(b"\n", start), data.find(b"\r", start)) if i >= 0), default=len(data))
    if data[at:at + 2] == b"\r\n":
        return at + 2
    return at + 1


def locate(chunks: Iterator[bytes], rules: LineRules, wanted: set[int]) -> dict[int, tuple[int, bytes]]:
    """record index in the file (0-based, as the reader counts from the file's start) -> (line number, line bytes).

    Reads only as far as the last wanted record.
    """
    found: dict[int, tuple[int, bytes]] = {}
    if not wanted:
        return found
    last = max(wanted)
    record = -1 if rules.header else 0  # the header line takes index -1
    blank = rules.blank
    for index, line in _physical_lines(chunks):
        for part in _reader_lines(line):
            if not part or (part[0] in blank and not part.strip(blank)):
                continue
            if record in wanted:
                found[record] = (index + 1, line)
            record += 1
        if record > last:
            break
    return found


def _split_chunks(data: bytes, start: int) -> Iterator[bytes]:
    """The file from the start of a split (``start`` > 0), as one piece whose first line is the split's first line."""
    yield data[_skip_first_reader_line(data, start):]


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


def _local_chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        rest = b""
        while True:
            block = f.read(CHUNK)
            if not block:
                if rest:
                    yield rest
                return
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            rest = block[cut:]
            yield block[:cut]


def _hadoop_bytes(spark: SparkSession, uri: str) -> bytes:
    """A file of any Hadoop file system (s3a, hdfs, ...) read whole through the driver's JVM."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(path)
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def read_lines(spark: SparkSession, uri: str, rules: LineRules, wanted: dict[int, set[int]]) -> dict[tuple[int, int], tuple[int, bytes]]:
    """(split start, index in the split) -> (line number, line bytes), for the wanted records of one file."""
    out: dict[tuple[int, int], tuple[int, bytes]] = {}
    local = _local_path(uri)
    data: bytes | None = None
    for split, indices in wanted.items():
        if split == 0:
            chunks = _local_chunks(local) if local is not None else iter([_hadoop_bytes(spark, uri)])
            found = locate(chunks, rules, indices)
        else:  # a file larger than a split: read whole, then from the split's first line
            if data is None:
                data = open(local, "rb").read() if local is not None else _hadoop_bytes(spark, uri)
            before = data.count(b"\n", 0, _skip_first_reader_line(data, split))
            found = {
                i: (number + before, line)
                for i, (number, line) in locate(_split_chunks(data, split), LineRules(rules.blank, False), indices).items()
            }
        out.update({(split, i): v for i, v in found.items()})
    return out


# -- the DLQ rows -----------------------------------------------------------------------------------------

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
        for (source_id, file), wanted in per_file.items():
            rules = self.rules[source_id]
            try:
                found = read_lines(spark, file, rules, wanted)
            except OSError:  # the file is gone (moved away after the pass): the reader's numbers stay
                continue
            for (split, index), (number, line) in found.items():
                position = index + rules.first_position(split)
                out.append((source_id, file, split, position, number, as_record(line)))
        return out

    def apply(self, spark: SparkSession, rows: DataFrame, keys: list[tuple]) -> DataFrame:
        """``rows`` (the DLQ's columns) with ``source_position`` = the line number and ``record`` = the line."""
        if not self.needed:
            return rows
        resolved = self.resolve(spark, keys)
        if not resolved:
            return rows
        lines = spark.createDataFrame(resolved, schema=_RESOLVED, verifySchema=False)
        joined = rows.join(F.broadcast(lines), on=list(KEYS), how="left")
        found = F.col("__ac_line").isNotNull()
        replaced = {"source_position": F.coalesce(F.col("__ac_line"), F.col("source_position"))}
        if self.include_messages:
            replaced["record"] = F.when(found, F.col("__ac_line_text")).otherwise(F.col("record"))
        return joined.select(*[replaced.get(c, F.col(c)).alias(c) for c in rows.columns])
