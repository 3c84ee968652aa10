"""Per-record errors: every bad record lands in the DLQ with its stage and context; the counts add up."""

from __future__ import annotations

import base64
import json
import os

import pytest

from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, read_json_rows, write_lines

pytestmark = pytest.mark.spark


def test_bad_records_go_to_the_dlq_with_stage_and_context(spark, tmp_path):
    src = tmp_path / "in"
    write_lines(src, "a.json", [
        good(1),
        '{"id": 2, "name": "n2", "amount": 3',          # malformed JSON (line 2)
        '{"id": "three", "name": "n3", "amount": 1}',   # wrong type
        '{"name": "no id", "amount": 2.5}',              # missing required field
        good(5).replace("n5", "boom5"),                  # custom processor raises
        good(6).replace("n6", "drop6"),                  # custom processor drops it
        good(7),
        '[1, 2]',                                        # valid JSON, not an object
        good(9).replace('"amount": 13.5', '"amount": -1'),  # filtered by the filter processor
    ])
    spec = pipeline(
        "records",
        [file_source(src)],
        [file_dest(tmp_path / "out")],
        processors=[
            proc("keep-positive", "filter", condition="amount >= 0"),
            proc("tagger", "custom", function="conduit_test_functions:tag_or_fail"),
            proc("currency", "field.set", field="currency", value="'EUR'"),
        ],
        dlq=dlq_file(tmp_path / "dlq", size=0, include_configs=True),
    )
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    written = read_json_rows(spark, tmp_path / "out")
    assert sorted(r["id"] for r in written) == [1, 7]
    assert {r["tag"] for r in written} == {"t-1", "t-7"}
    assert {r["currency"] for r in written} == {"EUR"}

    dlq = {(r["source_position"]): r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert sorted(dlq) == [2, 3, 4, 5, 8]
    assert dlq[2]["stage"] == "source" and dlq[2]["exception_class"].endswith("MalformedRecordError")
    assert dlq[3]["stage"] == "source" and dlq[3]["exception_class"].endswith("WrongTypeError")
    # worked out after the pass (parsing.PENDING_REASON): exactly the field of the wrong type is named
    assert "wrong type: id (expected" in dlq[3]["exception_message"]
    assert not any(r["exception_class"].startswith("__ac_") for r in dlq.values())
    assert dlq[4]["exception_class"].endswith("MissingFieldError") and "id" in dlq[4]["exception_message"]
    assert dlq[8]["exception_class"].endswith("MalformedRecordError")
    boom = dlq[5]
    assert boom["stage"] == "processor" and boom["component_id"] == "tagger" and boom["component_type"] == "custom"
    assert boom["exception_class"] == "ValueError" and "boom5" in boom["exception_message"]
    assert "Traceback" in boom["exception_stacktrace"]
    assert json.loads(boom["record"])["name"] == "boom5"  # include-messages: the original record
    assert json.loads(boom["configs"])["settings"]["function"] == "conduit_test_functions:tag_or_fail"
    for row in dlq.values():
        assert row["pipeline_id"] == "records" and row["run_id"] == "r1" and row["batch_id"] == 0
        assert row["source_id"] == "in" and row["source_file"].endswith("a.json") and row["attempt"] == 1

    totals = report.totals
    assert totals["read"] == 9
    assert totals["dlq"] == 5 and totals["filtered"] == 2 and totals["written"] == {"out": 2}
    assert totals["read"] == totals["dlq"] + totals["filtered"] + totals["written"]["out"]
    assert report.counters["total-record-failures"] == 5
    assert report.counters["deadletterqueue-records-produced"] == 5
    assert report.status == "succeeded" and report.first_record_written_at is not None


# -- strict UTF-8 and the parser's size limits ------------------------------------------------------------


def _write_bytes(folder, name: str, lines: list[bytes]):
    """Like write_lines, for lines that are not (all) UTF-8."""
    path = write_lines(folder, name, [])  # a later modification time than every file written before
    mtime = path.stat().st_mtime
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    os.utime(path, (mtime, mtime))
    return path


def _run(spark, tmp_path, source):
    spec = pipeline("edges", [source], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq", size=0))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    # read without Spark: Spark's JSON reader would not read back a value over its own 20,000,000-character limit
    dlq = [json.loads(line) for part in (tmp_path / "dlq").rglob("part-*.json") for line in part.open(encoding="utf-8")]
    return report, read_json_rows(spark, tmp_path / "out"), {r["source_position"]: r for r in dlq}


def test_json_lines_that_are_not_utf8_go_to_the_dlq_with_the_byte_and_their_bytes(spark, tmp_path):
    lines = [
        good(1).encode(),
        b'{"id": 2, "name": "caf\xe9", "amount": 1.0}',          # latin-1 e-acute: 0xE9 at byte offset 22
        good(3).replace("n3", "caf\u00e9").encode(),               # real UTF-8: a good record
        b'{"id": 4, "other": "\xff", "amount": 1.0}',             # in a field outside the schema
        b'{"id": 5, "name": "\xed\xa0\x80", "amount": 1.0}',  # a UTF-16 surrogate encoded as UTF-8
    ]
    _write_bytes(tmp_path / "in", "a.json", lines)
    report, written, dlq = _run(spark, tmp_path, file_source(tmp_path / "in"))

    assert sorted(r["id"] for r in written) == [1, 3]
    assert {r["name"] for r in written} == {"n1", "caf\u00e9"}
    assert not any("\ufffd" in json.dumps(r, ensure_ascii=False) for r in written)
    assert sorted(dlq) == [2, 4, 5]
    expected = {2: "0xE9 at byte offset 22", 4: "0xFF at byte offset 20", 5: "0xED at byte offset 19"}
    for position, where in expected.items():
        row = dlq[position]
        assert row["stage"] == "source" and row["exception_class"] == "airflow_conduit.spark.InvalidUtf8Error"
        assert row["exception_message"].startswith(f"invalid UTF-8 byte {where} of the record"), row["exception_message"]
        assert base64.b64decode(row["record"]) == lines[position - 1]  # every byte kept
        assert lines[position - 1][int(where.rsplit(" ", 1)[1])] == int(where[2:4], 16)
    assert report.totals["read"] == 5 and report.totals["dlq"] == 3 and report.totals["written"] == {"out": 2}


def test_csv_lines_that_are_not_utf8_go_to_the_dlq_naming_the_field(spark, tmp_path):
    lines = [
        b"id,name,amount",
        b"1,n1,1.5",
        b"2,caf\xe9,2.0",          # an invalid byte in a string field: the reader decodes it as U+FFFD
        "3,caf\u00e9,3.0".encode(),  # real UTF-8
        b"4,n4,4\xff",             # in a number: the line does not parse
    ]
    _write_bytes(tmp_path / "in", "a.csv", lines)
    report, written, dlq = _run(spark, tmp_path, file_source(tmp_path / "in", fmt="csv"))

    assert sorted(r["id"] for r in written) == [1, 3]
    assert not any("\ufffd" in json.dumps(r, ensure_ascii=False) for r in written)
    assert sorted(dlq) == [3, 5]  # line numbers (the header is line 1)
    assert all(r["exception_class"] == "airflow_conduit.spark.InvalidUtf8Error" for r in dlq.values())
    assert "as U+FFFD in field(s) name " in dlq[3]["exception_message"]
    assert base64.b64decode(dlq[3]["record"]) == lines[2]  # the line's bytes, base64-encoded (they are not UTF-8)
    assert "as U+FFFD at character 6 of the line" in dlq[5]["exception_message"]
    assert base64.b64decode(dlq[5]["record"]) == lines[4]
    assert report.totals["read"] == 4 and report.totals["dlq"] == 2


def test_a_record_over_the_parser_size_limits_is_kept_with_a_message_that_says_so(spark, tmp_path):
    limit = 20_000_000  # Spark 4.2's JSON maxStringLen default
    long_value = json.dumps({"id": 2, "name": "x" * (limit + 1), "amount": 1.0})
    long_number = '{"id": 3, "name": "n3", "amount": 1' + "0" * 1200 + "}"
    write_lines(tmp_path / "in", "a.json", [good(1), long_value, long_number, '{"id": 4, "name": ', good(5)])
    report, written, dlq = _run(spark, tmp_path, file_source(tmp_path / "in"))

    assert sorted(r["id"] for r in written) == [1, 5]
    assert sorted(dlq) == [2, 3, 4]
    assert dlq[2]["exception_class"] == "airflow_conduit.spark.RecordTooLargeError"
    assert dlq[2]["exception_message"] == (
        "record exceeds the parser's size limit of 20,000,000 characters for a string value "
        f"(source setting max-string-length); the record is {len(long_value):,} characters long"
    )
    assert dlq[2]["record"] == long_value  # kept whole
    assert dlq[3]["exception_class"] == "airflow_conduit.spark.RecordTooLargeError"
    assert "size limit of 1,000 digits for a number" in dlq[3]["exception_message"]
    assert dlq[4]["exception_class"].endswith("MalformedRecordError")  # still malformed when it is


def test_max_string_length_raises_the_json_parser_limit(spark, tmp_path):
    value = "y" * 300
    write_lines(tmp_path / "in", "a.json", [json.dumps({"id": 1, "name": value, "amount": 1.0}), good(2)])
    report, written, dlq = _run(spark, tmp_path, file_source(tmp_path / "in", **{"max-string-length": 100}))
    assert [r["id"] for r in written] == [2]
    assert "size limit of 100 characters for a string value" in dlq[1]["exception_message"]


def test_each_json_source_names_its_own_wrong_typed_fields(spark, tmp_path):
    """Which fields the reader left NULL is kept per line against its own source's schema (the reason is worked
    out after the pass, from those flags and one parse of the line): two sources with other fields in another
    order each name exactly their field of the wrong type."""
    write_lines(tmp_path / "a", "a.json", ['{"id": 1, "name": "x", "amount": "lots"}', good(2)])
    write_lines(tmp_path / "b", "b.json", ['{"amount": 2.5, "id": "seven", "note": "n"}', '{"amount": 1.0, "id": 3, "note": "ok"}'])
    spec = pipeline(
        "two-schemas",
        [file_source(tmp_path / "a", sid="a"), file_source(tmp_path / "b", sid="b", schema="amount DOUBLE, id BIGINT NOT NULL, note STRING")],
        [file_dest(tmp_path / "out")],
        dlq=dlq_file(tmp_path / "dlq"),
    )
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    dlq = {r["source_id"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert sorted(dlq) == ["a", "b"]
    assert dlq["a"]["exception_class"].endswith("WrongTypeError") and dlq["b"]["exception_class"].endswith("WrongTypeError")
    assert "wrong type: amount (expected id bigint, name string, amount double)" in dlq["a"]["exception_message"]
    assert "wrong type: id (expected amount double, id bigint, note string)" in dlq["b"]["exception_message"]


def test_without_include_messages_a_rejected_line_still_gets_its_reason_but_not_its_text(spark, tmp_path):
    """The pass gathers a rejected line's text once (``dlq.ORIGINAL``): the DLQ record's ``record``, or, with
    ``include-messages: false``, only what its reason is worked out from; the batch's own columns (pipeline,
    run, batch, time) are added after the pass."""
    write_lines(tmp_path / "in", "a.json", [good(1), '{"id": 2, "name": ', '{"id": "two", "name": "n", "amount": 1.0}'])
    spec = pipeline(
        "no-messages", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")],
        dlq=dlq_file(tmp_path / "dlq", include_messages=False, include_configs=True),
    )
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r9")
    assert code == 0, report.error
    dlq = {r["source_position"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert sorted(dlq) == [2, 3]
    assert dlq[2]["exception_class"].endswith("MalformedRecordError")
    assert dlq[3]["exception_class"].endswith("WrongTypeError") and "wrong type: id (expected" in dlq[3]["exception_message"]
    for row in dlq.values():
        assert row.get("record") is None  # include-messages: false
        assert (row["pipeline_id"], row["run_id"], row["batch_id"], row["source_id"]) == ("no-messages", "r9", 0, "in")
        assert row["time_of_error"] and json.loads(row["configs"])["plugin"] == "file"


@pytest.mark.parametrize("schema, empty_object", [
    ("id BIGINT, name STRING", None),  # `{}`: a record of NULL fields
    ("id BIGINT NOT NULL, name STRING", "airflow_conduit.spark.MissingFieldError"),
], ids=["nullable", "not-null"])
def test_a_json_file_s_blank_lines_are_not_records_and_null_and_empty_object_lines_are(spark, tmp_path, schema, empty_object):
    """A file's blank line (empty or whitespace only) separates records, as in JSON Lines; `null` is a malformed
    record and `{}` an empty object. (A Kafka message is always a record: test_kafka_source.)"""
    write_lines(tmp_path / "in", "edges.json", ['{"id": 1}', "", "   ", "null", "{}", "\t", '{"id": 2}'])
    spec = pipeline("edges", [file_source(tmp_path / "in", schema=schema)], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    dlq = {r["source_position"]: (r["record"], r["exception_class"]) for r in read_json_rows(spark, tmp_path / "dlq")}
    expected_dlq = {4: ("null", "airflow_conduit.spark.MalformedRecordError")}
    if empty_object:
        expected_dlq[5] = ("{}", empty_object)
    assert dlq == expected_dlq  # line numbers count the blank lines
    ids = sorted((r.get("id") is None, r.get("id")) for r in read_json_rows(spark, tmp_path / "out"))
    assert ids == [(False, 1), (False, 2)] + ([] if empty_object else [(True, None)])
    assert report.totals["read"] == 4  # the two records, `null` and `{}`: three blank lines are no records
