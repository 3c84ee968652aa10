"""Connectors and processors at run time: csv / parquet / generator sources, fan-in, fan-out with
destination processors, the log DLQ (secrets redacted), custom-processor retries, analysis errors."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec, RetrySpec, SourceSpec
from airflow_conduit.pipeline.secrets import Secret
from airflow_conduit.recovery import codes
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, proc, read_json_rows, write_lines

pytestmark = pytest.mark.spark


def test_csv_parquet_and_generator_fan_in_then_fan_out_with_destination_processors(spark, tmp_path):
    write_lines(tmp_path / "csv", "a.csv", ["id,name,amount", "100,alice,1.5", "101,bob,not-a-number", "102,carol",
                                             ",nobody,2.0", "103,dave,4.0"])
    spark.createDataFrame([(200, "p0", 0.5), (201, "p1", None)], "id BIGINT, name STRING, amount DOUBLE") \
        .coalesce(1).write.parquet(str(tmp_path / "pq"))
    sources = [
        file_source(tmp_path / "csv", sid="csv", fmt="csv",
                    processors=[proc("csv-tag", "field.set", field="origin", value="'csv'")]),
        file_source(tmp_path / "pq", sid="pq", fmt="parquet", schema=None),
        SourceSpec(id="gen", plugin="generator",
                   settings={"records": 20, "fields": {"id": "BIGINT", "name": "STRING", "amount": "DOUBLE"},
                             "bad-record-ratio": 0.25, "seed": 7}),
    ]
    destinations = [
        file_dest(tmp_path / "all", did="all", processors=[proc("drop-origin", "field.exclude", fields=["origin"])]),
        file_dest(tmp_path / "big", did="big", fmt="csv", processors=[
            proc("only-big", "filter", condition="amount > 1"),
            proc("rename", "field.rename", mapping={"name": "who"}),
            proc("cents", "sql", select=["*", "CAST(amount * 100 AS BIGINT) AS cents"]),
        ]),
    ]
    spec = pipeline("fan", sources, destinations, dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    dlq = read_json_rows(spark, tmp_path / "dlq")
    csv_bad = sorted((r["source_position"], r["exception_class"].rsplit(".", 1)[1]) for r in dlq if r["source_id"] == "csv")
    # line numbers count the header line; a short line (102,carol) is malformed CSV, as Spark sees it
    assert csv_bad == [(3, "WrongTypeError"), (4, "MalformedRecordError"), (5, "MissingFieldError")]
    gen_bad = [r for r in dlq if r["source_id"] == "gen"]
    assert len(gen_bad) == 5  # bad-record-ratio 0.25 of 20, evenly spread
    assert gen_bad and all(r["stage"] == "source" and r["record"].startswith("{broken") for r in gen_bad)

    all_rows = read_json_rows(spark, tmp_path / "all")
    ids = sorted(r["id"] for r in all_rows)
    gen_good = 20 - len(gen_bad)
    assert [i for i in ids if i >= 100] == [100, 103, 200, 201]  # parquet 201 has no amount: allowed (nullable)
    assert len([i for i in ids if i < 100]) == gen_good
    assert "origin" not in all_rows[0]

    big = [r.asDict() for r in spark.read.option("header", True).csv(str(tmp_path / "big")).collect()]
    assert all(float(r["amount"]) > 1 and r["who"] and int(r["cents"]) == int(float(r["amount"]) * 100) for r in big)
    assert report.totals["read"] == 6 - 1 + 2 + 20  # csv lines without the header
    assert report.totals["written"]["all"] == len(all_rows)
    assert report.totals["read"] == report.totals["dlq"] + report.totals["filtered"] + len(all_rows)


def test_json_decode_and_log_dlq_redacts_secrets(spark, tmp_path, caplog):
    write_lines(tmp_path / "in", "a.json", [
        json.dumps({"id": 1, "name": "ok", "payload": json.dumps({"k": "v", "n": 1})}),
        json.dumps({"id": 2, "name": "bad payload", "payload": "{nope"}),
        json.dumps({"id": 3, "name": "typed wrong", "payload": json.dumps({"k": "v", "n": "one"})}),
    ])
    secret = "hunter2-very-secret"
    spec = pipeline(
        "decode",
        [file_source(tmp_path / "in", schema="id BIGINT NOT NULL, name STRING, payload STRING",
                     processors=[proc("decode", "json.decode", field="payload", schema="k STRING, n INT", target="doc")])],
        [file_dest(tmp_path / "out")],
        dlq=DeadLetterQueueSpec(plugin="log", settings={"level": "warn", "message": "nacked", "password": Secret(secret)},
                                window_size=0, include_configs=True),
    )
    with caplog.at_level(logging.WARNING, logger="airflow_conduit.spark.log"):
        code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    rows = read_json_rows(spark, tmp_path / "out")
    assert [(r["id"], r["doc"]["k"], r["doc"]["n"]) for r in rows] == [(1, "v", 1)]
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("airflow_conduit.spark.log")]
    assert len(logged) == 2 and all(m.startswith("nacked [batch 0]: ") for m in logged)
    records = [json.loads(m.split(": ", 1)[1]) for m in logged]
    assert {r["stage"] for r in records} == {"processor"} and {r["component_id"] for r in records} == {"decode"}
    assert sorted(r["exception_class"].rsplit(".", 1)[1] for r in records) == ["MalformedRecordError", "WrongTypeError"]
    assert secret not in "\n".join(logged)


def test_custom_processor_retries_transient_failures_within_the_timeout(spark, tmp_path):
    counters = tmp_path / "attempts"
    counters.mkdir()
    write_lines(tmp_path / "in", "a.json", [json.dumps({"id": i, "name": str(counters), "amount": 1.0}) for i in (1, 2, 3, 4)])
    spec = pipeline(
        "retries",
        [file_source(tmp_path / "in")],
        [file_dest(tmp_path / "out")],
        processors=[proc("flaky", "custom", function="conduit_test_functions:flaky")],
        dlq=dlq_file(tmp_path / "dlq"),
        retry=RetrySpec(timeout_seconds=1.0, delay_max_seconds=0.05),
    )
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, 4]  # 2 and 4 recovered
    (dead,) = read_json_rows(spark, tmp_path / "dlq")  # 3 is down for longer than errors.retry.timeout
    assert dead["exception_class"] == "airflow_conduit.recovery.errors.TransientError" and dead["attempt"] > 2
    assert (counters / "attempts-2").read_text() == "3" and (counters / "attempts-1").read_text() == "1"
    assert report.counters["total-retries"] == 2 + 2 + (dead["attempt"] - 1)


def test_a_sql_processor_on_a_missing_column_fails_fatal_as_analysis_error(spark, tmp_path):
    write_lines(tmp_path / "in", "a.json", [good(1)])
    spec = pipeline("analysis", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")],
                    processors=[proc("broken", "sql", select=["*", "no_such_column + 1 AS x"])])
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.ANALYSIS and report.error["sqlstate"].startswith("42")
    assert report.error["error_condition"].startswith("UNRESOLVED_COLUMN")
    assert (report.error["stage"], report.error["component_id"], report.error["component_type"]) == ("processor", "broken", "sql")


def test_continuous_generator_stops_gracefully_on_request_with_every_batch_complete(spark, tmp_path):
    import threading
    import time

    source = SourceSpec(id="gen", plugin="generator",
                        settings={"records": 30, "rate": 10, "fields": {"id": "BIGINT", "name": "STRING"},
                                  "bad-record-ratio": 0.1})
    spec = pipeline("live", [source], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"),
                    mode="continuous", trigger_interval_seconds=0.5)
    runners = []

    def stop_when_all_generated():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if runners and runners[0].report.totals["read"] >= 30:
                runners[0].request_stop("test")
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=stop_when_all_generated, daemon=True)
    watcher.start()
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1", on_runner=runners.append)
    watcher.join(timeout=5)
    assert code == 0 and report.status == "stopped" and report.ended_at and report.stop_reason == "test"
    assert len([b for b in report.batches if b["read"]]) == 6  # rate 10/s x 0.5 s = 5 records per batch
    out = sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out"))
    dlq = sorted(r["source_position"] for r in read_json_rows(spark, tmp_path / "dlq"))
    assert len(dlq) == 3 and sorted(out + dlq) == list(range(30))  # offsets: every record exactly once
