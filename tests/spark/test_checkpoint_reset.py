"""A deleted checkpoint loses no record: Spark numbers the new checkpoint's batches from 0 again.

The runner numbers batches on across checkpoints (``spark/batch_numbers.py``), so the new checkpoint's
batches are neither taken for the old one's (commit markers, the DLQ nack window) nor written over them
(a file destination's ``batch_id=<n>`` folder, a JDBC destination's rows of batch ``n``).
"""

from __future__ import annotations

import json
import shutil

import pytest

import postgres_server
from airflow_conduit.pipeline.model import DestinationSpec
from airflow_conduit.spark.faults import SimulatedCrash
from airflow_conduit.spark.runner import QUERY_NAME, execute
from airflow_conduit.spark.window import WindowStore
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark

WINDOW = 16  # the window of the last 16 records tolerates them all being nacked: the run never stops on it


def _file(folder, n: int) -> tuple[list[int], tuple[str, int]]:
    """File ``part-<n>.json``: good, malformed, good, good; returns its good ids and its bad line."""
    ids = [n * 10 + k for k in range(3)]
    write_lines(folder, f"part-{n}.json", [good(ids[0]), '{"id": oops', good(ids[1]), good(ids[2])])
    return ids, (f"part-{n}.json", 2)


def _crash():
    raise SimulatedCrash("killed")


def test_a_deleted_checkpoint_writes_every_new_record_and_keeps_every_old_one(spark, tmp_path, request):
    jdbc = pg_query = None
    if postgres_server.installed():  # the JDBC destination too (its rows of batch n are replaced by batch n)
        postgres, pg_query = request.getfixturevalue("postgres"), request.getfixturevalue("pg_query")
        pg_query("DROP TABLE IF EXISTS reset_orders")
        jdbc = {"url": postgres["url"], "table": "reset_orders", "user": "postgres"}
    src, archive, state = tmp_path / "in", tmp_path / "archive", tmp_path / "state"
    destinations = [file_dest(tmp_path / "out")]
    if jdbc:
        destinations.append(DestinationSpec(id="db", plugin="jdbc", settings=jdbc))
    spec = pipeline("reset", [file_source(src, **{"max-files-per-trigger": 1})], destinations,
                    dlq=dlq_file(tmp_path / "dlq", size=WINDOW, threshold=WINDOW))
    good_ids, bad = [], []
    for n in (0, 1):
        ids, line = _file(src, n)
        good_ids, bad = good_ids + ids, bad + [line]
    code, report = execute(spark, spec, state_dir=state, run_id="r1")
    assert code == 0, report.error
    assert [b["batch_id"] for b in report.batches] == [0, 1]

    # the files read are archived, the checkpoint is deleted (to start over, or because it was corrupt),
    # new files arrive: the new checkpoint reads them as its batches 0 and 1
    archive.mkdir()
    for path in list(src.iterdir()):
        shutil.move(str(path), archive / path.name)
    shutil.rmtree(state / "checkpoints" / QUERY_NAME)
    for n in (2, 3):
        ids, line = _file(src, n)
        good_ids, bad = good_ids + ids, bad + [line]
    code, report = execute(spark, spec, state_dir=state, run_id="r2")
    assert code == 0, report.error
    assert [b["batch_id"] for b in report.batches] == [2, 3]  # numbered on after the old checkpoint's batches
    assert not any(b.get("already_committed") for b in report.batches)
    assert report.totals["written"]["out"] == 6 and report.totals["dlq"] == 2

    # every record of both runs once: none skipped as "already committed", none written over
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == sorted(good_ids)
    if jdbc:
        assert sorted(r[0] for r in pg_query("SELECT id FROM reset_orders")) == sorted(good_ids)
    dlq = read_json_rows(spark, tmp_path / "dlq")
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq) == sorted(bad)
    # the nack window went on over the new checkpoint's records: the last 16 outcomes are the 4 files'
    window = WindowStore(state).before(10**9, WINDOW, WINDOW)
    assert window.to_dict()["outcomes"] == "0100" * 4


def test_a_state_dir_of_the_unscoped_layout_keeps_its_markers_for_the_same_checkpoint(spark, tmp_path):
    src, state = tmp_path / "in", tmp_path / "state"
    for n in (0, 1):
        _file(src, n)
    spec = pipeline("legacy", [file_source(src, **{"max-files-per-trigger": 1})],
                    [file_dest(tmp_path / "a", did="a"), file_dest(tmp_path / "b", did="b")],
                    dlq=dlq_file(tmp_path / "dlq", size=WINDOW, threshold=WINDOW))
    faults = {"crash_after_destination": {"destination": "a", "batch": 1}}
    with pytest.raises(SimulatedCrash):
        execute(spark, spec, state_dir=state, run_id="r1", faults=faults, crash=_crash)
    # a state dir written before batches were numbered across checkpoints: markers and nothing else
    for kept in state.glob("batch-numbers*"):
        kept.unlink()
    code, report = execute(spark, spec, state_dir=state, run_id="r2")
    assert code == 0, report.error
    assert [b["batch_id"] for b in report.batches] == [1]  # the same checkpoint: its batch 1 again
    assert set(report.batches[0]["already_committed"]) == {"a", "dead-letter-queue"}  # old markers recognised
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "b")) == [0, 1, 2, 10, 11, 12]
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "a")) == [0, 1, 2, 10, 11, 12]
    assert json.loads((state / "commits" / "b" / "1").read_text())["run_id"] == "r2"
