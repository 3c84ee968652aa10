"""Exactly once per destination (and the DLQ) across crashes: Spark re-runs the uncommitted batch.

The crash here is in-process (SimulatedCrash raised where --faults crash_after_destination would
os._exit the driver): the streaming query dies mid-batch, then a new run on the same state dir
re-runs that batch with the same id and input. test_entrypoint.py does the same with real
killed spark-submit drivers.
"""

from __future__ import annotations

import json

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec
from airflow_conduit.spark.faults import SimulatedCrash
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark


def _crash():
    raise SimulatedCrash("killed")


def _input(folder, files=4):
    """files x (3 good + 1 malformed + 1 wrong type); returns (good ids, bad positions by file)."""
    good_ids, bad = [], []
    for f in range(files):
        ids = [f * 10 + k for k in range(3)]
        good_ids += ids
        write_lines(folder, f"part-{f}.json", [good(ids[0]), '{"id": oops', good(ids[1]), '{"id": "x"}', good(ids[2])])
        bad += [(f"part-{f}.json", 2), (f"part-{f}.json", 4)]
    return sorted(good_ids), sorted(bad)


def _run(spark, spec, state, run_id, crash_at=None):
    faults = {"crash_after_destination": {"destination": crash_at[0], "batch": crash_at[1]}} if crash_at else None
    return execute(spark, spec, state_dir=state, run_id=run_id, faults=faults, crash=_crash)


def test_three_crashes_at_different_points_lose_nothing_and_write_nothing_twice(spark, tmp_path):
    good_ids, bad = _input(tmp_path / "in")
    spec = pipeline(
        "eo",
        [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})],
        [file_dest(tmp_path / "a"), file_dest(tmp_path / "b", did="b", fmt="parquet")],
        dlq=dlq_file(tmp_path / "dlq"),
    )
    spec = type(spec)(**{**spec.__dict__, "destinations": (file_dest(tmp_path / "a", did="a"), spec.destinations[1])})
    state = tmp_path / "state"
    for run_id, point in [("r1", ("dead-letter-queue", 0)), ("r2", ("a", 1)), ("r3", ("b", 2))]:
        with pytest.raises(SimulatedCrash):
            _run(spark, spec, state, run_id, crash_at=point)
    # a crash between a write and its commit marker: the re-run must replace, not append
    (state / "commits" / "a" / "3").unlink(missing_ok=True)
    code, report = _run(spark, spec, state, "r4")
    assert code == 0, report.error

    a = read_json_rows(spark, tmp_path / "a")
    b = [r.asDict() for r in spark.read.parquet(str(tmp_path / "b")).collect()]
    dlq = read_json_rows(spark, tmp_path / "dlq")
    assert sorted(r["id"] for r in a) == good_ids  # none missing, none twice
    assert sorted(r["id"] for r in b) == good_ids
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq) == bad
    # every batch committed once per destination; the re-runs skipped what was committed before the crash
    assert sorted(int(p.name) for p in (state / "commits" / "b").iterdir()) == [0, 1, 2, 3]
    runs = {}
    for run_dir in (state / "runs").iterdir():
        runs[run_dir.name] = json.loads((run_dir / "report.json").read_text())
    assert runs["r4"]["status"] == "succeeded"
    replayed = runs["r2"]["batches"][0]
    assert replayed["batch_id"] == 0 and "dead-letter-queue" in replayed["already_committed"]
    markers = [json.loads(p.read_text()) for p in (state / "commits" / "b").iterdir()]
    assert sum(m["rows"] for m in markers) == len(good_ids)
    # r1 died after the DLQ of batch 0; r2 after a of batch 1; r3 right after b of batch 2
    assert {m["batch_id"]: m["run_id"] for m in markers} == {0: "r2", 1: "r3", 2: "r3", 3: "r4"}


def test_jdbc_destination_and_jdbc_dlq_stay_exactly_once_across_crashes(spark, tmp_path, postgres, pg_query):
    good_ids, bad = _input(tmp_path / "in", files=3)
    pg_query("DROP TABLE IF EXISTS orders; DROP TABLE IF EXISTS orders_dlq")
    jdbc = {"url": postgres["url"], "table": "orders", "user": "postgres", "password": "not-needed-trust"}
    spec = pipeline(
        "eo-jdbc",
        [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})],
        [DestinationSpec(id="db", plugin="jdbc", settings=jdbc), file_dest(tmp_path / "files", did="files")],
        dlq=DeadLetterQueueSpec(plugin="jdbc", settings={**jdbc, "table": "orders_dlq"}, window_size=0),
    )
    state = tmp_path / "state"
    with pytest.raises(SimulatedCrash):
        _run(spark, spec, state, "r1", crash_at=("db", 0))  # db wrote batch 0, files did not
    assert pg_query("SELECT count(*) FROM orders") == [(3,)]
    (state / "commits" / "db" / "0").unlink()  # as if the driver died between the DB commit and the marker
    with pytest.raises(SimulatedCrash):
        _run(spark, spec, state, "r2", crash_at=("db", 1))
    code, report = _run(spark, spec, state, "r3")
    assert code == 0, report.error

    rows = pg_query("SELECT id, name, _conduit_batch_id FROM orders ORDER BY id")
    assert [r[0] for r in rows] == good_ids
    assert {r[2] for r in rows} == {0, 1, 2}
    dlq_rows = pg_query("SELECT source_file, source_position, stage, exception_class FROM orders_dlq")
    assert sorted((f.rsplit("/", 1)[1], p) for f, p, _, _ in dlq_rows) == bad
    assert {r[2] for r in dlq_rows} == {"source"}
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "files")) == good_ids
    assert not pg_query("SELECT tablename FROM pg_tables WHERE tablename LIKE '%%__conduit_b%%'")  # staging dropped


def test_jdbc_upsert_on_key_and_a_refused_connection_is_transient(spark, tmp_path, postgres, pg_query):
    pg_query("DROP TABLE IF EXISTS customers; "
             "CREATE TABLE customers (id BIGINT PRIMARY KEY, name TEXT, amount DOUBLE PRECISION, _conduit_batch_id BIGINT)")
    write_lines(tmp_path / "in", "0.json", [good(1), good(2)])
    write_lines(tmp_path / "in", "1.json", [json.dumps({"id": 2, "name": "renamed", "amount": 9.0}), good(3)])
    jdbc = {"url": postgres["url"], "table": "customers", "user": "postgres", "key": ["id"]}
    spec = pipeline("upsert", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})],
                    [DestinationSpec(id="db", plugin="jdbc", settings=jdbc)], dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert pg_query("SELECT id, name FROM customers ORDER BY id") == [(1, "n1"), (2, "renamed"), (3, "n3")]

    refused = {**jdbc, "url": f"jdbc:postgresql://127.0.0.1:{_closed_port()}/postgres"}
    spec = pipeline("refused", [file_source(tmp_path / "in")], [DestinationSpec(id="db", plugin="jdbc", settings=refused)],
                    dlq=dlq_file(tmp_path / "dlq2"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state2", run_id="r1")
    assert code == 75 and report.error["fatal"] is False
    assert report.error["code"] == 1100 and report.error["stage"] == "destination" and report.error["component_id"] == "db"


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
