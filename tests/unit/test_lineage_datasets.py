"""lineage.datasets: a spec's OpenLineage dataset names, its runs' counts and its last failure (pure, no Spark)."""

from __future__ import annotations

from airflow_conduit.lineage.datasets import (
    DatasetName,
    counts_over_runs,
    jdbc_dataset,
    last_failure,
    path_dataset,
    pipeline_datasets,
    replay_datasets,
    rule_sources,
    sink_dataset,
    source_datasets,
    task_run_ids,
)
from airflow_conduit.pipeline.loader import load_pipeline_from_string
from airflow_conduit.runs.report import RunReport, totals_over_runs

SPEC = """
version: "1"
pipeline:
  id: mixed
  sources:
    - id: events
      plugin: kafka
      settings: {servers: "broker-1:9092,broker-2:9092", topics: [clicks, views], schema: "id INT"}
      processors:
        - id: checks
          plugin: expect
          settings: {rules: [{name: has-id, condition: "id IS NOT NULL", action: drop}]}
    - id: files
      plugin: file
      settings: {path: in, format: json, schema: "id INT"}
    - id: fake
      plugin: generator
      settings: {fields: {id: INT}}
  processors:
    - id: late
      plugin: expect
      settings: {rules: [{name: positive, condition: "id > 0", action: warn}]}
  destinations:
    - id: db
      plugin: jdbc
      settings: {url: "jdbc:postgresql://db.example:5433/shop", table: orders}
    - id: lake
      plugin: delta
      settings: {path: "s3a://bucket/lake/orders"}
    - id: out
      plugin: kafka
      settings: {connection: kafka_main, topic: enriched}
    - id: audit
      plugin: log
  dead-letter-queue:
    plugin: file
    settings: {path: dlq, format: json}
"""


def _spec(tmp_path):
    return load_pipeline_from_string(SPEC, base_dir=str(tmp_path))


def test_every_source_destination_and_the_dlq_is_named_as_openlineage_names_it(tmp_path):
    datasets = pipeline_datasets(_spec(tmp_path), servers_of={"kafka_main": "k1:9093,k2:9093"}.get)
    assert [(d.component_id, d.name) for d in datasets.inputs] == [
        ("events", DatasetName("kafka://broker-1:9092", "clicks")),
        ("events", DatasetName("kafka://broker-1:9092", "views")),
        ("files", DatasetName("file", str(tmp_path / "in"))),
    ]  # the generator reads no dataset
    assert [(d.component_id, d.name) for d in datasets.outputs] == [
        ("db", DatasetName("postgres://db.example:5433", "shop.public.orders")),
        ("lake", DatasetName("s3a://bucket", "/lake/orders")),
        ("out", DatasetName("kafka://k1:9093", "enriched")),
        ("dead-letter-queue", DatasetName("file", str(tmp_path / "dlq"))),
    ]  # a log destination is no dataset; the DLQ comes last
    assert datasets.dlq.name == DatasetName("file", str(tmp_path / "dlq"))
    replay = replay_datasets(datasets)
    assert replay.inputs == (datasets.dlq,) and replay.outputs == datasets.outputs


def test_dataset_names_of_each_kind():
    assert jdbc_dataset("jdbc:postgresql://h/db", "sales.orders") == DatasetName("postgres://h:5432", "db.sales.orders")
    assert jdbc_dataset("jdbc:mysql://h:3306/db?useSSL=false", "t") == DatasetName("mysql://h:3306", "db.t")
    assert path_dataset("/data/in") == DatasetName("file", "/data/in")
    assert path_dataset("file:///data/in") == DatasetName("file", "/data/in")
    assert path_dataset("hdfs://nn:8020/data") == DatasetName("hdfs://nn:8020", "/data")
    assert source_datasets("kafka", {"servers": "b:9092", "topic-pattern": "orders-.*"}) == [DatasetName("kafka://b:9092", "orders-.*")]
    assert source_datasets("kafka", {"connection": "gone", "topics": ["t"]}, lambda conn_id: None) == [
        DatasetName("kafka://connection.gone", "t")]  # a connection not readable here: named by its id
    assert source_datasets("generator", {"fields": {"id": "INT"}}) == []
    assert sink_dataset("delta", {"table": "lake.orders"}) == DatasetName("spark_catalog", "lake.orders")
    assert sink_dataset("log", {}) is None


def test_expectation_rules_check_their_own_source_or_every_source(tmp_path):
    assert rule_sources(_spec(tmp_path)) == {"checks": ("events",), "late": ("events", "files", "fake")}


def _report(run_id, batches, kinds_per_batch):
    report = RunReport(pipeline_id="p", run_id=run_id)
    for (batch_id, read, dlq), kinds in zip(batches, kinds_per_batch):
        report.add_batch(batch_id, read=read, filtered=0, dlq=dlq, written={"lake": read - dlq})
        if kinds:
            report.add_dlq_kinds(kinds)
    return report.to_dict()


def test_counts_over_runs_count_a_batch_two_runs_recorded_once():
    first = _report("r-s01", [(0, 10, 2), (1, 10, 1)],
                    [{"in": {"source": {"Malformed": 2}}}, {"in": {"processor": {"Decode": 1}}}])
    second = _report("r-s02", [(1, 10, 1), (2, 5, 3)],
                     [{"in": {"processor": {"Decode": 1}}}, {"in": {"source": {"Malformed": 1, "WrongType": 2}}}])
    counts = counts_over_runs([first, None, second])
    assert (counts.read, counts.dlq, counts.runs) == (25, 6, 2)
    assert counts.dlq_kinds == {"in": {"source": {"Malformed": 3, "WrongType": 2}, "processor": {"Decode": 1}}}
    assert sum(n for stages in counts.dlq_kinds.values() for c in stages.values() for n in c.values()) == counts.dlq
    assert counts.written == totals_over_runs([first, second])["written"]  # a re-run's writes are its own


def test_the_report_keeps_dlq_kinds_per_batch_and_in_total():
    report = RunReport.from_dict(_report("r", [(0, 4, 2), (1, 4, 1)],
                                         [{"a": {"source": {"X": 2}}}, {"a": {"source": {"X": 1}}, "b": {"dlq": {"Y": 1}}}]))
    assert report.totals["dlq_kinds"] == {"a": {"source": {"X": 3}}, "b": {"dlq": {"Y": 1}}}
    assert report.batches[1]["dlq_kinds"] == {"a": {"source": {"X": 1}}, "b": {"dlq": {"Y": 1}}}


def test_the_last_failure_and_the_runs_of_a_recovery_record():
    classification = {"code": 1410, "fatal": False, "message": "driver killed", "reason": "code 1410", "stage": "runner"}
    record = {"carry": {"run_prefix": "run-x-t1", "submissions": 2,
                        "recovery": {"last_classification": classification, "degraded_reason": None, "audit": []}}}
    assert task_run_ids(record) == ["run-x-t1-s01", "run-x-t1-s02"]
    failure = last_failure(record)
    assert (failure.kind, failure.code, failure.code_name, failure.stage) == ("transient", 1410, "KILLED_BY_SIGNAL", "runner")
    assert failure.summary() == "transient 1410 KILLED_BY_SIGNAL: driver killed"
    from_audit = {"carry": {"recovery": {"audit": [
        {"event": "failed", "details": {"classification": {"code": 2999, "fatal": True, "message": "m"}}}]}}}
    assert last_failure(from_audit).code_name == "FATAL"  # no name of its own: its range's
    assert last_failure({"carry": {"recovery": {"audit": []}}}) is None and task_run_ids(None) == []
