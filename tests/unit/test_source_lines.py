"""Where a DLQ record's line is: the reader's record numbers mapped to physical lines, against a plain model.

The model counts as Spark's readers do, line by line (Hadoop's lines end at \\n, \\r\\n or a lone \\r; a blank
one makes no record; a CSV header is the first non-blank line); ``locate`` must agree with it on every record
of random files mixing those, read whole or in small pieces. The Spark test (tests/spark/test_dlq_source_lines.py)
checks the same against sed on a real run.
"""

from __future__ import annotations

import random
import threading

from airflow_conduit.spark.source_lines import CSV_BLANK, JSON_BLANK, LineRules, locate


# JSON lines holding an array -> the records Spark 4's JSON reader made of each (seen on a real reader): one per
# element of an array of objects (what follows the array ignored), one malformed record for any other array
SPARK_ARRAY_RECORDS = {
    b'[{"a": 1}, {"a": 2}]': 2, b"[]": 0, b" [ ] ": 0, b"[1, 2]": 1, b"[null]": 1, b'[{"a": 1}, null]': 1,
    b'[{"a": 1}] x': 1, b'[[{"a": 1}]]': 1, b'[{"a": 1}, {"a": oops}]': 1, b'[{"a": 1}]': 1, b'[{}, {}, {"c": 3}]': 3,
}


def _model(data: bytes, rules: LineRules) -> dict[int, tuple[int, bytes]]:
    out, record = {}, (-1 if rules.header else 0)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        parts = line.split(b"\r")
        if len(parts) > 1 and parts[-1] == b"":
            parts.pop()
        for part in parts:
            records = SPARK_ARRAY_RECORDS.get(part, 1) if rules.arrays else 1
            for _ in range(records if part.strip(rules.blank) else 0):
                if record >= 0:
                    out[record] = (number, line)
                record += 1
    return out


def _pieces(data: bytes, size: int):
    """``data`` in pieces of about ``size`` bytes, each ending at a line end (as the file reader gives them)."""
    start = 0
    while start < len(data):
        cut = data.find(b"\n", start + size)
        end = len(data) if cut < 0 else cut + 1
        yield data[start:end]
        start = end


import pytest

from airflow_conduit.spark import source_lines


@pytest.mark.parametrize("with_numpy", [True, False])
def test_locate_agrees_with_the_readers_count_on_random_files(with_numpy, monkeypatch):
    if not with_numpy:
        monkeypatch.setattr(source_lines, "_np", None)
    rng = random.Random(7)
    parts = [b'{"a": 1}', b"", b"   ", b"\t", b"x,y", b"caf\xc3\xa9", b"\r", b'{"b": 2}\r', b"a\rb", b"a\r\rb\r", b"\x0c", b" \r ", b"a\r\r", b"\r\r"]
    parts += list(SPARK_ARRAY_RECORDS)
    for trial in range(300):
        data = b"\n".join(rng.choice(parts) for _ in range(rng.randint(0, 40)))
        data += rng.choice([b"", b"\n", b"\r\n"])
        for rules in (LineRules(JSON_BLANK, False, arrays=True), LineRules(CSV_BLANK, True), LineRules(CSV_BLANK, False)):
            expected = _model(data, rules)
            wanted = set(expected) | {len(expected) + 3}  # one past the end: not found
            for size in (1 << 20, 7, 1):
                assert locate(_pieces(data, size), rules, wanted) == expected, (trial, data, rules, size)
            some = set(rng.sample(sorted(expected), min(3, len(expected))))
            assert locate(_pieces(data, 5), rules, some) == {k: expected[k] for k in some}


def _reader_lines_from(data: bytes, after: int) -> list[tuple[int, bytes]]:
    """(physical line number, physical line) of the reader's non-blank lines starting after byte ``after``."""
    out, pos, number = [], 0, 1
    for physical in data.split(b"\n"):
        part_start = pos
        parts = physical.split(b"\r")
        for i, part in enumerate(parts):
            if i == len(parts) - 1 and part == b"" and len(parts) > 1:
                break  # CRLF's \r (or a \r at the end of the file)
            if part_start > after and part.strip(JSON_BLANK):
                out.append((number, physical))
            part_start += len(part) + 1
        pos += len(physical) + 1
        number += 1
    if data.endswith(b"\n") and out and out[-1][0] == number - 1 and out[-1][1] == b"":
        out.pop()
    return out


def test_a_split_of_a_large_file_counts_its_records_from_its_first_whole_line_and_its_lines_from_the_file_start(tmp_path, monkeypatch):
    rng = random.Random(11)
    parts = [b'{"a": 1}', b"", b"  ", b'{"b": 22}\r', b"x\ry", b"\r"]
    path = tmp_path / "big.json"
    for trial in range(200):
        data = b"\n".join(rng.choice(parts) for _ in range(rng.randint(1, 30))) + b"\n"
        path.write_bytes(data)
        split = rng.randint(1, len(data))
        expected = dict(enumerate(_reader_lines_from(data, split)))
        wanted = {split: set(range(len(expected) + 2))}
        got = source_lines.read_lines(None, f"file:{path}", LineRules(JSON_BLANK, False), wanted)
        assert {i: v for (s, i), v in got.items()} == expected, (trial, data, split)
        monkeypatch.setattr(source_lines.hadoop_files, "read_whole", lambda spark, uri: data)  # another file system: read whole
        got = source_lines.read_lines(None, "s3a://bucket/big.json", LineRules(JSON_BLANK, False), wanted)
        assert {i: v for (s, i), v in got.items()} == expected, (trial, data, split)


def test_a_local_file_read_in_pieces_smaller_than_its_lines_gives_the_same_lines(tmp_path, monkeypatch):
    rng = random.Random(13)
    parts = [b'{"a": 1}', b"", b"  ", b'{"b": 22}\r', b"x\ry", b'{"long": "' + b"z" * 40 + b'"}', b"[]"]
    path = tmp_path / "pieces.json"
    rules = LineRules(JSON_BLANK, False, arrays=True)
    for trial in range(100):
        data = b"\n".join(rng.choice(parts) for _ in range(rng.randint(1, 30))) + rng.choice([b"", b"\n"])
        path.write_bytes(data)
        expected = _model(data, rules)
        wanted = {0: set(expected) | {len(expected) + 1}}
        for chunk in (1, 7, 16, 1 << 20):  # a piece shorter than a line grows the buffer
            monkeypatch.setattr(source_lines, "CHUNK", chunk)
            got = source_lines.read_lines(None, f"file:{path}", rules, wanted, source_lines.ReadBuffer())
            assert {i: v for (s, i), v in got.items()} == expected, (trial, data, chunk)


@pytest.mark.parametrize("readers", [1, 2])
def test_one_lookup_reads_all_its_files_into_one_buffer_per_reader(tmp_path, monkeypatch, readers):
    """A buffer per read cost the kernel's page faults on every piece of every file: one per reading thread."""
    monkeypatch.setattr(source_lines, "READERS", readers)
    made: list[int] = []

    class CountingBuffer(source_lines.ReadBuffer):
        def at_least(self, size: int) -> bytearray:
            if len(self.data) < size:
                made.append(size)
            return super().at_least(size)

    monkeypatch.setattr(source_lines, "ReadBuffer", CountingBuffer)
    keys = []
    for n in range(5):
        path = tmp_path / f"part-{n}.json"
        path.write_bytes(b"".join(b'{"n": %d, "i": %d}\n' % (n, i) for i in range(1000)))
        keys += [("in", f"file:{path}", 0, i + 1) for i in (3, 500, 999)]
    lines = source_lines.SourceLines.__new__(source_lines.SourceLines)
    lines.rules, lines.include_messages = {"in": LineRules(JSON_BLANK, False, arrays=True)}, True
    found = lines.lines_of(None, keys)
    assert [line for line, _ in found] == [4, 501, 1000] * 5
    assert found[0][1] == '{"n": 0, "i": 3}'
    assert len(made) == readers  # 5 files, one buffer per reader


def test_files_read_on_threads_give_each_key_its_line_and_skip_a_gone_file(tmp_path, monkeypatch):
    """Local files are read by several threads: every key still gets its own file's line, in the keys' order,
    and a file gone since the pass leaves only its own keys without a line."""
    monkeypatch.setattr(source_lines, "READERS", 3)
    threads = set()
    read_lines = source_lines.read_lines
    monkeypatch.setattr(source_lines, "read_lines", lambda *a: threads.add(threading.current_thread().name) or read_lines(*a))
    keys = []
    for n in range(8):
        path = tmp_path / f"part-{n}.json"
        if n != 5:
            path.write_bytes(b"".join(b'{"n": %d, "i": %d}\n' % (n, i) if i % 7 else b"\n" for i in range(2000)))
        keys += [("in", f"file:{path}", 0, position) for position in (n + 1, 1000 + n)]
    lines = source_lines.SourceLines.__new__(source_lines.SourceLines)
    lines.rules, lines.include_messages = {"in": LineRules(JSON_BLANK, False, arrays=True)}, True

    def line_of(n: int, position: int) -> tuple[int, str]:  # every 7th line (from the first) is blank
        number = next(i for i in range(2000) if i % 7 and sum(1 for j in range(i + 1) if j % 7) == position) + 1
        return number, '{"n": %d, "i": %d}' % (n, number - 1)

    expected = [None if n == 5 else line_of(n, position) for n in range(8) for position in (n + 1, 1000 + n)]
    assert lines.lines_of(None, keys) == expected
    assert threads and all(name.startswith("conduit-source-lines") for name in threads)  # read by the pool


def test_a_file_is_read_only_up_to_the_piece_of_its_last_wanted_record(tmp_path, monkeypatch):
    import builtins

    read = []

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def readinto(self, buffer):
            got = self.f.readinto(buffer)
            read.append(got)
            return got

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(source_lines, "open", lambda *a, **k: Counting(builtins.open(*a, **k)), raising=False)
    path = tmp_path / "big.json"
    line = b'{"a": "' + b"x" * 90 + b'"}\n'
    path.write_bytes(line * (8 * source_lines.CHUNK // len(line)))  # 8 pieces
    rules = LineRules(JSON_BLANK, False, arrays=True)
    got = source_lines.read_lines(None, f"file:{path}", rules, {0: {3}}, source_lines.ReadBuffer())
    assert got == {(0, 3): (4, line[:-1])}
    assert sum(read) <= source_lines.CHUNK  # the first piece, not the whole file
    read.clear()
    last = path.stat().st_size // len(line) - 1
    source_lines.read_lines(None, f"file:{path}", rules, {0: {last}}, source_lines.ReadBuffer())
    assert sum(read) == path.stat().st_size
