"""A batch's rows written by the driver (``spark/local_batch_files.py``) as Spark lays out a batch's folder.

Real files, read back with pyarrow and json: the folder is replaced whole (a re-run of the batch leaves only its
new rows), a killed attempt's hidden leftover is removed, NULL fields are left out of JSON lines as Spark's writer
does, and what cannot be written here (csv, another file system, an unknown type) is refused.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from airflow_conduit.spark.local_batch_files import can_write, write_batch

COLUMNS = ("batch_id", "record", "attempt")
TYPES = ("long", "string", "integer")


def _json_rows(folder):
    return [json.loads(line) for part in sorted(folder.glob("part-*.json")) for line in part.read_text("utf-8").splitlines()]


def test_json_lines_leave_out_null_fields_and_a_rewrite_replaces_the_batch(tmp_path):
    write_batch(str(tmp_path), 3, "json", COLUMNS, TYPES, [(3, "old", 1), (3, "old too", 1)])
    folder = write_batch(str(tmp_path), 3, "json", COLUMNS, TYPES, [(3, 'caf\u00e9 "x"\n', 2), (3, None, 1)])
    assert folder == tmp_path / "batch_id=3"
    assert _json_rows(folder) == [{"batch_id": 3, "record": 'caf\u00e9 "x"\n', "attempt": 2}, {"batch_id": 3, "attempt": 1}]
    assert (folder / "_SUCCESS").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch_id=3"], "nothing but the batch's folder is left"


def test_parquet_keeps_the_spark_types(tmp_path):
    folder = write_batch(str(tmp_path), 0, "parquet", COLUMNS, TYPES, [(0, "a", 1), (0, None, None)])
    (part,) = folder.glob("part-*.snappy.parquet")
    table = pq.read_table(part)
    assert [str(t) for t in table.schema.types] == ["int64", "string", "int32"]
    assert table.to_pylist() == [{"batch_id": 0, "record": "a", "attempt": 1}, {"batch_id": 0, "record": None, "attempt": None}]


def test_a_killed_attempts_leftover_of_the_batch_is_removed(tmp_path):
    leftover = tmp_path / ".batch_id=7.1234.tmp"
    leftover.mkdir(parents=True)
    (leftover / "part-00000-x-c000.json").write_text('{"record": "half"}\n')
    other = tmp_path / "batch_id=6"
    other.mkdir()
    write_batch(f"file:{tmp_path}", 7, "json", COLUMNS, TYPES, [(7, "new", 1)])
    assert not leftover.exists()
    assert other.exists(), "another batch's folder is left alone"
    assert _json_rows(tmp_path / "batch_id=7") == [{"batch_id": 7, "record": "new", "attempt": 1}]


def test_what_it_cannot_write_is_left_to_spark(tmp_path):
    assert can_write(str(tmp_path), "json", TYPES) and can_write(f"file:{tmp_path}", "parquet", TYPES)
    assert not can_write(str(tmp_path), "csv", TYPES)
    assert not can_write("s3a://bucket/dlq", "json", TYPES)
    assert not can_write(str(tmp_path), "parquet", ("long", "map"))
