"""A DLQ record keeps its source line byte for byte and names its physical line (what ``sed -n Np`` prints).

A mixed corpus through the real runner on real local Spark: missing fields, explicit nulls, fields outside
the schema, timestamps in several formats, CRLF lines, blank lines (empty, spaces, a lone CRLF), unicode,
a CSV file with a header, and records an ``expect`` rule drops (a processor, not the parser, fails them).
The expected line numbers and bytes come from ``sed`` run on the files, not from the code under test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, pipeline, proc, read_json_rows

pytestmark = pytest.mark.spark

JSON_SCHEMA = "id BIGINT NOT NULL, customer STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"
CSV_SCHEMA = "id BIGINT NOT NULL, customer STRING NOT NULL, amount DOUBLE"

# (line bytes, bad?) in file order; a bad line is one the DLQ must hold
JSON_LINES: list[tuple[bytes, bool]] = [
    (b'{"id": 1, "customer": "c1", "amount": 1.0, "ts": "2026-11-21T10:00:00Z"}', False),
    (b"", False),
    (b'{"id": 2, "customer": null, "amount": 2.0, "ts": "2026-11-21T10:00:00Z"}', True),  # explicit null, required
    (b'   ', False),
    (b'{"id": 3, "amount": 3.0, "ts": "2026-11-21 10:00:00", "note": "outside the schema"}', True),  # missing + extra
    (b'{"id": 4, "customer": "c4", "amount": 4.0, "ts": "2026-11-21T10:00:00.000+01:00"}\r', False),  # CRLF, good
    (b'{"id": 5, "customer": "caf\xc3\xa9 \xe2\x82\xac", "amount": "five", "ts": "21/11/2026"}\r', True),  # CRLF, unicode, wrong type
    (b"\r", False),  # a blank CRLF line
    (b'{"id": 6, "customer": "c6", "amount": -6.0, "ts": "2026-11-21T10:00:00Z", "extra": [1, {"a": null}]}', True),  # expect drops
    (b'{"id": 7, "customer": "c7", "amount": 7', True),  # malformed
    (b"", False),
    (b"", False),
    (b'{"id": 8, "customer": "\xe6\x97\xa5\xe6\x9c\xac", "amount": -8.5,   "ts": 1732183200}\r', True),  # CRLF, expect drops
    (b'{"id": 9, "customer": "c9", "amount": 9.0}', False),
]

CSV_LINES: list[tuple[bytes, bool]] = [
    (b"", False),  # a blank line before the header
    (b"id,customer,amount\r", False),  # the header (CRLF)
    (b"1,c1,1.0\r", False),
    (b"\r", False),
    (b"2,c2,two\r", True),  # wrong type
    (b"3,,3.0", True),  # required field empty
    (b"  ", False),
    (b"4,caf\xc3\xa9,-4.0\r", True),  # expect drops
    (b"5,c5,5.0", False),
]


def _write(folder: Path, name: str, lines: list[tuple[bytes, bool]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"".join(line + b"\n" for line, _ in lines))
    return path


def _sed(path: Path, number: int) -> bytes:
    """Line ``number`` of the file as ``sed -n Np`` prints it, without its newline."""
    out = subprocess.run(["sed", "-n", f"{number}p", str(path)], capture_output=True, check=True).stdout
    assert out.endswith(b"\n")
    return out[:-1]


def _bad_line_numbers(path: Path, lines: list[tuple[bytes, bool]]) -> dict[int, bytes]:
    """Line number -> bytes of every bad line, found with sed (line numbers count every line)."""
    expected = {}
    for number, (line, bad) in enumerate(lines, start=1):
        if bad:
            assert _sed(path, number) == line  # the corpus is what we think it is
            expected[number] = _sed(path, number)
    return expected


def test_every_dlq_record_holds_its_source_line_byte_for_byte_at_its_sed_line_number(spark, tmp_path):
    json_file = _write(tmp_path / "json", "orders.json", JSON_LINES)
    csv_file = _write(tmp_path / "csv", "orders.csv", CSV_LINES)
    rule = {"name": "positive", "condition": "amount > 0", "action": "drop"}
    spec = pipeline(
        "lines",
        [
            file_source(tmp_path / "json", sid="json", schema=JSON_SCHEMA, processors=[proc("json-rules", "expect", rules=[rule])]),
            file_source(tmp_path / "csv", sid="csv", fmt="csv", schema=CSV_SCHEMA, processors=[proc("csv-rules", "expect", rules=[rule])]),
        ],
        [file_dest(tmp_path / "out")],
        dlq=dlq_file(tmp_path / "dlq", size=0),
    )

    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")

    assert code == 0, report.error
    dlq = read_json_rows(spark, tmp_path / "dlq")
    got = {
        (r["source_id"], r["source_position"]): (r["record"].encode("utf-8"), r["stage"], r["exception_class"].rsplit(".", 1)[1])
        for r in dlq
    }
    expected = {("json", n): line for n, line in _bad_line_numbers(json_file, JSON_LINES).items()}
    expected |= {("csv", n): line for n, line in _bad_line_numbers(csv_file, CSV_LINES).items()}
    assert len(dlq) == len(expected) == len(got)
    assert {key: raw for key, (raw, _, _) in got.items()} == expected
    # the processor's drops keep the source's bytes too (not the fields as read)
    assert got[("json", 9)][1:] == ("processor", "ExpectationFailed")
    assert got[("json", 13)][1:] == ("processor", "ExpectationFailed")
    assert got[("csv", 8)][1:] == ("processor", "ExpectationFailed")
    assert got[("json", 3)][2] == "MissingFieldError" and got[("json", 10)][2] == "MalformedRecordError"
    assert report.totals["read"] == 14 and report.totals["written"] == {"out": 5}


# Spark's JSON reader makes a line holding an array of objects one record per element, and none of "[]"
ARRAY_LINES: list[tuple[bytes, bool]] = [
    (b'{"id": 1, "customer": "c1"}', False),
    (b'[{"id": 2, "customer": "c2"}, {"id": 3, "customer": "c3"}]', False),  # two records
    (b'{"id": 4, oops', True),  # malformed
    (b"[]", False),  # no record
    (b"[1, 2]", True),  # not an object: one malformed record
    (b'[{"id": 5, "customer": null}, {"id": 6, "customer": "c6"}]', True),  # its first element misses a required field
    (b'{"id": 7, "customer": "c7"}', False),
    (b'{"id": "x", "customer": "c8"}', True),  # wrong type
]


def test_a_json_line_holding_an_array_shifts_no_dlq_line_number(spark, tmp_path):
    json_file = _write(tmp_path / "json", "arrays.json", ARRAY_LINES)
    spec = pipeline("arrays", [file_source(tmp_path / "json", sid="json", schema=CSV_SCHEMA)],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq", size=0))

    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")

    assert code == 0, report.error
    dlq = {r["source_position"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert {n: r["record"].encode("utf-8") for n, r in dlq.items()} == _bad_line_numbers(json_file, ARRAY_LINES)
    assert "not a JSON object" in dlq[5]["exception_message"]
    assert dlq[6]["exception_class"].endswith("MissingFieldError")
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 3, 6, 7]
