"""Batch numbers across checkpoints (spark/batch_numbers.py): pure Python, no Spark."""

from __future__ import annotations

import json

from airflow_conduit.spark.batch_numbers import BatchNumbers, checkpoint_query_id


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


def test_the_first_checkpoint_numbers_as_spark_and_a_rerun_gets_the_same_number(tmp_path):
    numbers = BatchNumbers(tmp_path)
    assert [numbers.number("q1", b) for b in (0, 1, 2)] == [0, 1, 2]
    # a new run (new object) re-running the uncommitted batch 2 of the same checkpoint
    assert BatchNumbers(tmp_path).number("q1", 2) == 2
    assert json.loads((tmp_path / "batch-numbers.json").read_text()) == {"query_id": "q1", "base": 0, "last": 2}


def test_a_new_checkpoint_numbers_on_after_every_number_used_even_one_that_died_before_its_marker(tmp_path):
    numbers = BatchNumbers(tmp_path)
    for b in (0, 1, 2):
        numbers.number("q1", b)
    _touch(tmp_path / "commits" / "out" / "1")  # batch 2 started, died before any marker
    assert BatchNumbers(tmp_path).number("q2", 0) == 3
    assert BatchNumbers(tmp_path).number("q2", 1) == 4
    assert BatchNumbers(tmp_path).number("q3", 0) == 5


def test_a_state_dir_of_the_layout_before_numbers(tmp_path):
    for path in ("commits/out/7", "commits/dead-letter-queue/8", "dlq-window/8.json", "commits/out/.7.x.tmp"):
        _touch(tmp_path / path)
    # its checkpoint is still there: the markers are that checkpoint's, numbers stay Spark's ids
    same = tmp_path / "same"
    for path in ("commits/out/7", "dlq-window/8.json"):
        _touch(same / path)
    BatchNumbers(same).adopt("q1")
    assert BatchNumbers(same).number("q1", 8) == 8
    # its checkpoint was deleted before this run: the new one numbers after the markers
    BatchNumbers(tmp_path).adopt(None)
    assert BatchNumbers(tmp_path).number("q2", 0) == 9


def test_the_query_id_is_read_from_the_checkpoint_metadata(tmp_path):
    assert checkpoint_query_id(tmp_path) is None
    (tmp_path / "metadata").write_text('{"id":"5f1c"}\n')
    assert checkpoint_query_id(tmp_path) == "5f1c"
    (tmp_path / "metadata").write_text("")
    assert checkpoint_query_id(tmp_path) is None


def test_the_old_checkpoints_markers_go_by_the_usual_retention(tmp_path):
    from airflow_conduit.spark.commits import KEEP_BATCHES, CommitLog

    commits = CommitLog(tmp_path)
    for query, batches in (("q1", 150), ("q2", KEEP_BATCHES + 5)):
        numbers = BatchNumbers(tmp_path)
        for b in range(batches):
            commits.mark("out", numbers.number(query, b), rows=1, run_id="r")
    kept = sorted(int(p.name) for p in (tmp_path / "commits" / "out").iterdir())
    assert kept == list(range(150 + 5, 150 + KEEP_BATCHES + 5))  # only the new checkpoint's last 100
