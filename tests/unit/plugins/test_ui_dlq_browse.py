"""The DLQ browser's readers and paging, the replay history, and the Kafka lag arithmetic (no Airflow, no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_conduit.pipeline.replay_request import ReplayFilter
from airflow_conduit.plugins import dlq_browse, kafka_lag
from airflow_conduit.plugins.dlq_browse import ReplayHistory, page_of, record_view
from airflow_conduit.plugins.state_view import Redactor, RunView


def dlq_row(i: int, **extra) -> dict:
    return {"pipeline_id": "p", "run_id": "r-s01", "batch_id": i // 100, "source_id": "in", "source_file": "file:/in/a.jsonl",
            "source_split_start": 0, "source_position": i + 1, "stage": "source" if i % 2 else "processor",
            "component_id": "in" if i % 2 else "decode", "exception_class": "E1" if i % 3 else "E2",
            "exception_message": f"bad {i}", "time_of_error": f"2026-01-01T00:{i % 60:02d}:00.000000Z",
            "record": json.dumps({"id": i, "password": "pw-secret"}), **extra}


def write_file_dlq(folder: Path, rows: list[dict]) -> None:
    for row in rows:
        batch = folder / f"batch_id={row['batch_id']}"
        batch.mkdir(parents=True, exist_ok=True)
        with (batch / "part-00000.json").open("a") as out:
            out.write(json.dumps(row) + "\n")


def test_pages_stream_through_the_filter_and_keep_only_the_page(tmp_path):
    write_file_dlq(tmp_path, [dlq_row(i) for i in range(1000)])
    seen = []

    def view(row):
        seen.append(row)
        return {"position": row["source_position"]}

    page = page_of("file", dlq_browse.file_rows(tmp_path), ReplayFilter(), offset=100, limit=20, view=view)
    assert page.total == 1000 and page.scanned == 1000 and len(page.records) == 20
    assert len(seen) == 20  # only the page's records are turned into views
    assert page.facets["stage"] == {"processor": 500, "source": 500}
    newest_first = page_of("file", dlq_browse.file_rows(tmp_path), ReplayFilter(), 0, 1, view=lambda r: r)
    assert newest_first.records[0]["batch_id"] == 9  # the newest batch first
    only = ReplayFilter.from_mapping({"stages": "source", "exception_classes": "E2", "since": "2026-01-01T00:30:00Z"})
    filtered = page_of("file", dlq_browse.file_rows(tmp_path), only, 0, 1000, view=lambda r: r)
    expected = [i for i in range(1000) if i % 2 and not i % 3 and i % 60 >= 30]
    assert sorted(r["source_position"] - 1 for r in filtered.records) == expected and filtered.total == len(expected)
    capped = page_of("file", dlq_browse.file_rows(tmp_path), ReplayFilter(), 0, 5, view=lambda r: r, scan_limit=300)
    assert capped.truncated and capped.scanned == 300 and capped.total == 300


def test_a_record_shows_its_payload_context_position_and_replays(tmp_path):
    from airflow_conduit.spark.replay import identity

    row = dlq_row(7)
    bad_utf8 = dlq_row(8, exception_class="airflow_conduit.spark.InvalidUtf8Error", record="/w==")
    back = dlq_row(9, batch_id=-1, replay_count=1)
    plan = {"replay": 1, "status": "done", "started_at": "2026-01-02T00:00:00Z", "taken": [identity(row)],
            "result": {"written": {"lake": 0}, "still_failing": 1}}
    (tmp_path / "replays" / "1").mkdir(parents=True)
    (tmp_path / "replays" / "1" / "plan.json").write_text(json.dumps(plan))
    history = ReplayHistory(tmp_path)
    view = record_view(dlq_browse.normal(row), Redactor(), history)
    assert view["encoding"] == "text" and json.loads(view["raw"]) == {"id": 7, "password": "***"}
    assert view["context"]["stage"] == "source" and view["context"]["exception_class"] == "E1"
    assert view["position"]["source_position"] == 8 and view["batch_id"] == 0 and view["run_id"] == "r-s01"
    assert [(r["replay"], r["role"], r["status"]) for r in view["replays"]] == [(1, "taken", "done")]
    assert record_view(bad_utf8, Redactor(), history)["encoding"] == "base64"
    assert record_view(back, Redactor(), history)["replays"][0]["replay"] == 1
    assert history.summary()[0]["records"] == 1


def test_parquet_and_csv_file_dlqs_are_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "pq" / "batch_id=0").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([dlq_row(i) for i in range(5)]), tmp_path / "pq" / "batch_id=0" / "part-0.parquet")
    assert len(list(dlq_browse.file_rows(tmp_path / "pq"))) == 5
    (tmp_path / "csv" / "batch_id=3").mkdir(parents=True)
    (tmp_path / "csv" / "batch_id=3" / "part-0.csv").write_text("batch_id,stage,source_position\n3,source,12\n")
    [row] = [dlq_browse.normal(r) for r in dlq_browse.file_rows(tmp_path / "csv")]
    assert row["batch_id"] == 3 and row["source_position"] == 12


def test_a_delta_dlq_is_read_from_its_log_and_files(tmp_path):
    """The live files: the last checkpoint's adds, then the JSON commits (adds and removes) after it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "dlq"
    log = table / "_delta_log"
    log.mkdir(parents=True)
    for name, rows in (("a.parquet", [dlq_row(0)]), ("b.parquet", [dlq_row(1), dlq_row(2)]), ("c.parquet", [dlq_row(3)])):
        pq.write_table(pa.Table.from_pylist(rows), table / name)
    add = lambda p: {"add": {"path": p, "size": 1, "modificationTime": 0, "dataChange": True}}  # noqa: E731
    pq.write_table(pa.Table.from_pylist([add("a.parquet"), {"add": None}]), log / f"{10:020d}.checkpoint.parquet")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 10, "size": 1}))
    (log / f"{3:020d}.json").write_text(json.dumps(add("old.parquet")) + "\n")  # before the checkpoint: not read
    (log / f"{11:020d}.json").write_text(json.dumps(add("b.parquet")) + "\n" + json.dumps(add("c.parquet")) + "\n")
    (log / f"{12:020d}.json").write_text(json.dumps({"remove": {"path": "c.parquet"}}) + "\n")
    assert [p.name for p in dlq_browse.delta_files(table)] == ["b.parquet", "a.parquet"]
    assert sorted(r["source_position"] for r in dlq_browse.delta_rows(table)) == [1, 2, 3]


def test_kafka_client_config_reveals_secrets_for_the_client_only():
    config = dlq_browse.kafka_client_config(
        {"connection": "k", "topic": "dlq"},
        {"k": {"conn_type": "kafka", "host": "broker", "port": 9093, "login": "alice", "password": "pw\"x",
               "extra": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"}}})
    assert config == {"bootstrap.servers": "broker:9093", "security.protocol": "sasl_plaintext",
                      "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": 'pw"x'}


def write_checkpoint(state: Path, batches: dict[int, dict], committed: list[int]) -> None:
    cp = state / "checkpoints" / "pipeline"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir(parents=True)
    for n, offsets in batches.items():
        (cp / "offsets" / str(n)).write_text("v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps(offsets) + "\n")
    for n in committed:
        (cp / "commits" / str(n)).write_text("v1\n{}\n")


def test_lag_between_runs_is_the_broker_end_minus_the_last_committed_batch(tmp_path):
    write_checkpoint(tmp_path, {0: {"t": {"0": 5, "1": 2}}, 1: {"t": {"0": 9, "1": 2}}}, committed=[0])
    assert kafka_lag.committed_offsets(tmp_path) == {"t": {0: 5, 1: 2}}  # batch 1 planned, not committed
    rows = kafka_lag.between_runs_lag(tmp_path, {"t": {0: (0, 12), 1: (0, 2), 2: (3, 7)}})
    assert [(r["partition"], r["lag"]) for r in rows] == [(0, 7), (1, 0), (2, 4)]  # partition 2 never read: all kept
    assert kafka_lag.committed_offsets(tmp_path / "none") == {}


def test_lag_while_running_comes_from_the_last_progress_event(tmp_path):
    folder = tmp_path / "runs" / "r-s01"
    folder.mkdir(parents=True)
    source = lambda end, latest: {"description": "KafkaV2[Subscribe[t]]", "end_offset": {"t": {"0": end}},  # noqa: E731
                                  "latest_offset": {"t": {"0": latest}}}
    progress = [{"batch_id": 0, "processed_rows_per_second": 10.0, "sources": [source(4, 10)]},
                {"batch_id": 1, "processed_rows_per_second": 20.0, "sources": [source(10, 10)]}]
    (folder / "progress.json").write_text(json.dumps({"progress": progress}))
    run = RunView("r-s01", folder, None)
    assert kafka_lag.running_lag(run) == [{"topic": "t", "partition": 0, "end_offset": 10, "committed_offset": 10, "lag": 0}]
    assert [(p["lag"], p["rows_per_second"]) for p in kafka_lag.history([run])] == [(6, 10.0), (0, 20.0)]


def test_progress_entries_keep_what_the_lag_needs():
    from airflow_conduit.spark.progress import progress_entry

    entry = progress_entry({"batchId": 3, "timestamp": "2026-01-01T00:00:00.000Z", "numInputRows": 7,
                            "processedRowsPerSecond": 3.5, "sources": [{
                                "description": "KafkaV2", "endOffset": {"t": {"0": 7}}, "latestOffset": {"t": {"0": 9}},
                                "metrics": {"avgOffsetsBehindLatest": "2.0", "maxOffsetsBehindLatest": "2"}}]})
    assert entry["batch_id"] == 3 and entry["processed_rows_per_second"] == 3.5
    assert entry["sources"][0]["max_offsets_behind_latest"] == 2.0 and entry["sources"][0]["latest_offset"] == {"t": {"0": 9}}


@pytest.mark.parametrize("url", ["jdbc:mysql://h/db", "postgresql://h/db"])
def test_a_jdbc_dlq_off_postgresql_is_named_unreadable(url):
    with pytest.raises(dlq_browse.DlqUnavailable, match="PostgreSQL only"):
        dlq_browse.jdbc_target({"url": url, "table": "dlq"})
