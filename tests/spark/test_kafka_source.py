"""Source kafka on a real broker and real local Spark: every record once in the destination or the DLQ,
metadata for processors, offsets in the checkpoint."""

from __future__ import annotations

import base64
import json

import pytest

from airflow_conduit.pipeline.model import SourceSpec
from airflow_conduit.spark.replay import replay
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, pipeline, proc, read_json_rows

SCHEMA = "id BIGINT NOT NULL, name STRING, amount DOUBLE"


def kafka_source(kafka, topic: str, sid: str = "in", processors=(), **settings) -> SourceSpec:
    values = {"servers": kafka.bootstrap, "topics": [topic], "format": "json", "schema": SCHEMA,
              "starting-offsets": "earliest", "fail-on-data-loss": True, **settings}
    return SourceSpec(id=sid, plugin="kafka", settings=values, processors=tuple(processors))


def good(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "amount": i * 1.5}).encode()


# (value, key, headers, why it is bad or None)
PARTITION_0 = [
    (good(1), b"k1", [("trace", b"t1")], None),
    (b"not json at all", b"k2", None, "airflow_conduit.spark.MalformedRecordError"),
    (b'{"id": "seven", "name": "x", "amount": 1}', None, None, "airflow_conduit.spark.WrongTypeError"),
    (good(4), b"k4", [("trace", b"t4"), ("trace", b"t4-last")], None),
]
PARTITION_1 = [
    (b'{"name": "no id"}', b"k5", None, "airflow_conduit.spark.MissingFieldError"),
    (b'{"id": 6, "name": "caf\xe9"}', b"k6", None, "airflow_conduit.spark.InvalidUtf8Error"),
    (good(7), b"k7", [("bin", b"\xff\x00")], "airflow_conduit.spark.InvalidUtf8MetadataError"),
    (good(8), b"\xfe\xff", None, "airflow_conduit.spark.InvalidUtf8MetadataError"),
    (None, b"k9", None, "airflow_conduit.spark.NoValueError"),
    (good(10), b"k10", None, None),
]


def produce(kafka, topic, partition, rows):
    kafka.produce(topic, [r[0] for r in rows], keys=[r[1] for r in rows], headers=[r[2] for r in rows], partition=partition)


def expected_record(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(value).decode("ascii")


def test_every_record_once_in_the_destination_or_the_dlq_with_its_kafka_position(spark, kafka, tmp_path):
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, PARTITION_0)
    produce(kafka, topic, 1, PARTITION_1)
    processors = [
        proc("key", "field.set", field="key", value="_kafka_key"),
        proc("where", "field.set", field="origin", value="concat(_kafka_topic, '/', _kafka_partition, '/', _kafka_offset)"),
        proc("trace", "field.set", field="trace", value="_kafka_headers['trace']"),
    ]
    spec = pipeline("kafka-json", [kafka_source(kafka, topic, processors=processors)], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    out = {r["id"]: r for r in read_json_rows(spark, tmp_path / "out")}
    assert sorted(out) == [1, 4, 10]
    assert out[1]["key"] == "k1" and out[1]["origin"] == f"{topic}/0/0" and out[1]["trace"] == "t1"
    assert out[4]["trace"] == "t4-last"  # a repeated header name: its last value
    assert out[10]["origin"] == f"{topic}/1/5" and out[10]["trace"] is None
    assert not any(name.startswith("_kafka_") for name in out[1]), "metadata is not written unless copied"

    dlq = {r["source_file"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    expected = {
        f"{topic}/{p}/{offset}": row
        for p, rows in ((0, PARTITION_0), (1, PARTITION_1))
        for offset, row in enumerate(rows)
        if row[3] is not None
    }
    assert sorted(dlq) == sorted(expected)
    for position, (value, _key, _headers, exception_class) in expected.items():
        row = dlq[position]
        assert row["exception_class"] == exception_class, (position, row["exception_message"])
        assert row["source_id"] == "in" and row["stage"] == "source" and row["component_type"] == "kafka"
        assert row["source_position"] == int(position.rsplit("/", 1)[1])
        assert row["source_split_start"] == int(position.split("/")[1])
        if value is not None:
            assert row["record"] == expected_record(value), position
    assert "header(s) bin" in dlq[f"{topic}/1/2"]["exception_message"]
    assert "key is not valid UTF-8" in dlq[f"{topic}/1/3"]["exception_message"]
    assert "(key bytes, hex: feff)" in dlq[f"{topic}/1/3"]["exception_message"].lower()
    assert base64.b64decode(dlq[f"{topic}/1/1"]["record"]) == PARTITION_1[1][0]
    assert report.totals["read"] == len(PARTITION_0) + len(PARTITION_1)
    assert report.totals["dlq"] == len(expected)


def test_a_restart_resumes_from_the_checkpoint_without_reading_again(spark, kafka, tmp_path):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [good(i) for i in range(5)])
    spec = pipeline("kafka-restart", [kafka_source(kafka, topic, **{"max-records-per-batch": 2})],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    code, first = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, first.error
    assert first.totals["read"] == 5 and len(first.batches) == 3  # 2 + 2 + 1: max-records-per-batch
    kafka.produce(topic, [good(i) for i in range(5, 8)])
    code, second = execute(spark, spec, state_dir=tmp_path / "state", run_id="r2")
    assert code == 0, second.error
    assert second.totals["read"] == 3
    ids = sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out"))
    assert ids == list(range(8))


def test_raw_values_as_strings_and_as_bytes(spark, kafka, tmp_path):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [b"plain text", b"\xff\xfe binary", None])
    strings = pipeline("kafka-raw-s", [kafka_source(kafka, topic, format="raw", schema=None)],
                       [file_dest(tmp_path / "s")], dlq=dlq_file(tmp_path / "s-dlq"))
    code, report = execute(spark, strings, state_dir=tmp_path / "state-s", run_id="r1")
    assert code == 0, report.error
    assert sorted((r.get("value") or "") for r in read_json_rows(spark, tmp_path / "s")) == ["", "plain text"]
    [bad] = read_json_rows(spark, tmp_path / "s-dlq")
    assert bad["exception_class"] == "airflow_conduit.spark.InvalidUtf8Error"
    assert base64.b64decode(bad["record"]) == b"\xff\xfe binary"

    binary = pipeline("kafka-raw-b", [kafka_source(kafka, topic, format="raw", schema=None, **{"raw-type": "binary"})],
                      [file_dest(tmp_path / "b", fmt="parquet")], dlq=dlq_file(tmp_path / "b-dlq"))
    code, report = execute(spark, binary, state_dir=tmp_path / "state-b", run_id="r1")
    assert code == 0, report.error
    values = sorted((bytes(r["value"]) if r["value"] is not None else b"") for r in spark.read.parquet(str(tmp_path / "b")).collect())
    assert values == sorted([b"", b"\xff\xfe binary", b"plain text"])
    assert read_json_rows(spark, tmp_path / "b-dlq") == []


def test_a_json_value_that_is_not_utf8_is_explained_by_one_branch_of_the_error_column(spark):
    """The value's error takes an invalid UTF-8 value first; the JSON reasons below it have no branch of their own
    for one, which no record would take and every plan of a batch would analyse, optimise and generate code for."""
    from pyspark.sql import functions as F

    from airflow_conduit.spark import columns as C
    from airflow_conduit.spark import kafka_source, parsing
    from airflow_conduit.spark.sources import SourcePlan

    spec = SourceSpec(id="in", plugin="kafka", settings={"servers": "127.0.0.1:1", "topics": ["t"], "format": "json", "schema": SCHEMA})
    plan = SourcePlan(spec=spec, index=0, schema=parsing.parse_schema(SCHEMA), parser="kafka")
    columns = kafka_source.record_columns(plan, keep_originals=False, seq=F.lit(0))
    error = next(column for column in columns if str(column._jc.toString()).endswith(f"AS {C.ERROR}"))
    assert str(error._jc.toString()).count("invalid UTF-8 byte 0x") == 1


def test_spark_shows_the_sasl_password_redacted_in_the_query_plan(spark):
    from airflow_conduit.spark.kafka_source import reader_options

    settings = {"servers": "127.0.0.1:1", "topics": ["t"], "security-protocol": "sasl_ssl", "sasl-mechanism": "plain",
                "sasl-username": "u", "sasl-password": "Pw-in-plan-9"}
    options = reader_options(settings)
    assert "Pw-in-plan-9" in options["kafka.sasl.jaas.config"]  # the job hands it to Spark ...
    frame = spark.readStream.format("kafka").options(**options).load()
    plan = frame._jdf.queryExecution().toString()
    assert "kafka.sasl.jaas.config=*********(redacted)" in plan  # ... which never shows it
    assert "Pw-in-plan-9" not in plan


def test_csv_values_are_parsed_as_one_line_each_and_bad_ones_go_to_the_dlq(spark, kafka, tmp_path):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [b"1,n1,1.5", b"two,n2,2.0", b",no id,3.0", b"4,n4,4.5"])
    spec = pipeline("kafka-csv", [kafka_source(kafka, topic, format="csv")], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 4]
    dlq = {r["source_file"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert dlq[f"{topic}/0/1"]["exception_class"] == "airflow_conduit.spark.WrongTypeError"
    assert dlq[f"{topic}/0/1"]["record"] == "two,n2,2.0"
    assert dlq[f"{topic}/0/2"]["exception_class"] == "airflow_conduit.spark.MissingFieldError"
    assert sorted(dlq) == [f"{topic}/0/1", f"{topic}/0/2"]


EDGE_VALUES = [b"", b"   ", b"null", b"[]", b"{}"]
MALFORMED = "airflow_conduit.spark.MalformedRecordError"
MISSING = "airflow_conduit.spark.MissingFieldError"


@pytest.mark.parametrize("schema, expected", [
    # no NOT NULL field: `{}` is a valid empty object, a record of NULL fields
    ("id BIGINT, name STRING", {"": MALFORMED, "   ": MALFORMED, "null": MALFORMED, "[]": MALFORMED, "{}": None}),
    # a NOT NULL field: `{}` lacks it; the others are not JSON objects whatever the schema
    ("id BIGINT NOT NULL, name STRING", {"": MALFORMED, "   ": MALFORMED, "null": MALFORMED, "[]": MALFORMED, "{}": MISSING}),
], ids=["nullable", "not-null"])
def test_empty_blank_null_and_array_values_are_malformed_in_the_pass_and_in_the_replay_dry_run(
    spark, kafka, tmp_path, schema, expected
):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, EDGE_VALUES)
    spec = pipeline("kafka-edges", [kafka_source(kafka, topic, schema=schema)], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    dlq = {r["record"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert {record: row["exception_class"] for record, row in dlq.items()} == {
        value: cls for value, cls in expected.items() if cls is not None}
    for value, cls in expected.items():
        if cls == MALFORMED:
            assert dlq[value]["exception_message"] == "malformed JSON record: not a JSON object", value
    written = read_json_rows(spark, tmp_path / "out")
    if expected["{}"] is None:
        assert [{k: row.get(k) for k in ("id", "name")} for row in written] == [{"id": None, "name": None}]
    else:
        assert written == []
    assert report.totals["read"] == len(EDGE_VALUES) and report.totals["dlq"] == len(dlq)

    # the replay's dry run parses the same payloads as the pass did: the same reasons
    dry = replay(spark, spec, state_dir=tmp_path / "state", dry_run=True, force=True)
    assert dry.selected == len(dlq) and dry.still_failing == len(dlq) and dry.passed == 0
    malformed = sum(1 for cls in expected.values() if cls == MALFORMED)
    assert dry.errors.pop("in: malformed JSON record: not a JSON object") == malformed
    if expected["{}"] == MISSING:
        assert dry.errors == {"in: record is missing required field(s): id": 1}
    else:
        assert dry.errors == {}
