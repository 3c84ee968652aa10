"""DLQ replay from a JDBC dead letter queue (real PostgreSQL) to a file lake: exactly once, then nothing.

The pipeline's DLQ is a PostgreSQL table; after the schema fix the replay reads it, and is interrupted
(the runner's in-process stand-in for a killed driver) after the DLQ committed the replay's batch and
before the lake did; the next replay resumes it. Every dead-lettered record reaches the lake once; the
DLQ table keeps its rows (the replay's plan marks them); a second replay takes and writes nothing.
"""

from __future__ import annotations

import json

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec
from airflow_conduit.spark import faults as faults_mod
from airflow_conduit.spark.replay import replay
from airflow_conduit.spark.runner import execute
from spark_helpers import file_dest, file_source, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark

STRICT = "id BIGINT NOT NULL, name STRING, code INT"
FIXED = "id BIGINT NOT NULL, name STRING, code STRING"


def _spec(tmp_path, postgres, schema):
    dlq = {"url": postgres["url"], "table": "replay_dlq", "user": "postgres", "password": "not-needed-trust"}
    return pipeline("replay-jdbc", [file_source(tmp_path / "in", schema=schema)], [file_dest(tmp_path / "lake", did="lake")],
                    dlq=DeadLetterQueueSpec(plugin="jdbc", settings=dlq, window_size=0))


def _crash():
    raise faults_mod.SimulatedCrash("replay killed")


def test_jdbc_dlq_records_move_to_the_lake_exactly_once_and_a_second_replay_writes_nothing(spark, tmp_path, postgres, pg_query):
    state = tmp_path / "state"
    lines = [json.dumps({"id": i, "name": f"n{i}", "code": (7 if i % 2 else f"X{i}")}) for i in range(1, 9)]
    write_lines(tmp_path / "in", "a.json", lines)
    code, report = execute(spark, _spec(tmp_path, postgres, STRICT), state_dir=state, run_id="r1")
    assert code == 0 and report.totals["dlq"] == 4
    lake = lambda: sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake"))  # noqa: E731
    assert lake() == [1, 3, 5, 7]
    assert pg_query("SELECT count(*) FROM replay_dlq") == [(4,)]
    fixed = _spec(tmp_path, postgres, FIXED)

    with pytest.raises(faults_mod.SimulatedCrash):
        replay(spark, fixed, state_dir=state, crash=_crash,
               faults={"crash_after_destination": {"destination": "dead-letter-queue", "batch": 1}})
    assert not (state / "replays" / "1" / "commits" / "lake" / "-1").exists()  # killed before the lake committed
    resumed = replay(spark, fixed, state_dir=state)
    assert resumed.resumed and (resumed.selected, resumed.passed, resumed.still_failing) == (4, 4, 0)
    assert lake() == list(range(1, 9))  # each dead-lettered record once
    assert (state / "replays" / "1" / "commits" / "lake" / "-1").exists()
    assert pg_query("SELECT count(*) FROM replay_dlq") == [(4,)]  # nothing went back to the DLQ

    second = replay(spark, fixed, state_dir=state)
    assert second.replay is None and second.selected == 0 and second.skipped == {"already replayed": 4}
    assert lake() == list(range(1, 9)) and pg_query("SELECT count(*) FROM replay_dlq") == [(4,)]
