"""Replay of a quarantine table after a fix (spark/sdp/replay.py): exactly once, across interruptions.

One story on a private copy of examples/sdp, shared by the module's tests in order: a run quarantines three records;
the flow's parse is fixed; a replay killed after its plan, then one killed after staging, then one that finishes;
the run that reads it ends right after appending, the next resumes: the record the fix lets through is in the table
once, the two that still fail are back in the quarantine once each; replaying again takes nothing and the run after it adds nothing.
"""

from __future__ import annotations

import pytest

from sdp_project import project_copy, report, run_runner, table_rows
from spark_helpers import dlq_replay_cli

UNQUOTED = '{id:6,"customer":"fay","amount":4}'  # malformed for the JSON reader's defaults; the fix allows it
TRUNCATED = '{"id":5,"customer":"dee",'  # malformed whatever the fix
NO_ID = '{"customer":"eve","amount":3}'  # fails the quarantine rule id_present
NO_ID_KEPT = '{"customer":"eve","amount":3.0}'  # a parsed record is kept as the JSON of its columns
DATA = {
    "orders-1.json": '{"id":1,"customer":"ada","amount":10.5}\n{"id":2,"customer":"bob","amount":20}\n',
    "orders-2.json": f'{{"id":3,"customer":"ada","amount":7}}\n{UNQUOTED}\n{TRUNCATED}\n{NO_ID}\n',
}


class Killed(Exception):
    """A replay stopped at a crash point, as a kill would stop it."""


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    root = tmp_path_factory.mktemp("sdp-replay")
    project = project_copy(root, data=DATA)
    state_dir = root / "state"
    first = run_runner(project, state_dir, "r1")
    assert first.returncode == 0, (state_dir / "runs" / "r1" / "driver.log").read_text()[-3000:]
    return {"root": root, "project": project, "state": state_dir, "spec": project / "spark-pipeline.yml"}


def ids(root) -> list:
    return sorted(row["id"] for row in table_rows(root / "warehouse" / "orders"))


def quarantine(root) -> list[dict]:
    return table_rows(root / "warehouse" / "orders_quarantine")


def fix_the_parse(project) -> None:
    source = project / "transformations" / "orders.py"
    text = source.read_text()
    fixed = text.replace('.option("maxFilesPerTrigger", 1)', '.option("maxFilesPerTrigger", 1).option("allowUnquotedFieldNames", "true")')
    assert fixed != text
    source.write_text(fixed)


def test_1_the_run_quarantines_the_records_the_flow_cannot_take(story):
    assert ids(story["root"]) == [1, 2, 3]
    assert sorted(row["record"] for row in quarantine(story["root"])) == sorted([UNQUOTED, TRUNCATED, NO_ID_KEPT])


def test_2_a_replay_killed_after_its_plan_then_after_staging_is_finished_by_the_next_exactly_once(story, spark):
    from airflow_conduit.spark.sdp.replay import replay_quarantine

    fix_the_parse(story["project"])
    inbox = story["root"] / "warehouse" / "_conduit_replay" / "orders"

    def kill_at(point):
        def crash(reached):
            if reached == point:
                raise Killed(point)
        return crash

    with pytest.raises(Killed):
        replay_quarantine(spark, story["spec"], "orders", state_dir=story["state"], crash=kill_at("planned"))
    assert not list(inbox.iterdir())  # the plan is the mark; nothing staged yet
    with pytest.raises(Killed):
        replay_quarantine(spark, story["spec"], "orders", state_dir=story["state"], crash=kill_at("staged"))
    staged = inbox / "replay-000001.json"
    written_at = staged.stat().st_mtime_ns
    done = dlq_replay_cli(spark, story["spec"], story["state"], "--quarantine", "orders")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replay 1 of orders_quarantine (resumed): 3 record(s) staged"), done.stdout
    assert staged.stat().st_mtime_ns == written_at  # a staged file is never written again
    assert sorted(staged.read_text().splitlines()) == sorted([UNQUOTED, TRUNCATED, NO_ID_KEPT])
    assert [p.name for p in inbox.iterdir()] == ["replay-000001.json"]  # no hidden leftovers, no second file
    again = dlq_replay_cli(spark, story["spec"], story["state"], "--quarantine", "orders")
    assert again.returncode == 0 and again.stdout.startswith("nothing to replay from orders_quarantine; not taken: "
                                                             "already replayed: 3"), again.stdout


def test_3_a_run_that_ends_right_after_appending_them_then_the_next_write_each_replayed_record_once(story):
    """The run that reads the staged file ends (an injected transient failure, as a crash would) right after `orders`
    committed the replay's batch; the next run resumes from SDP's checkpoints: the fixed record once, in `orders`,
    and the two that still fail once each, back in the quarantine."""
    batches = [b for b in report(story["state"], "r1")["batches"] if b["batch_id"].startswith("orders#")]
    replay_batch = max(int(b["batch_id"].split("#")[1]) for b in batches) + 1
    ended = run_runner(story["project"], story["state"], "r2",
                       faults={"transient_after_batch": {"flow": "orders", "batch": replay_batch}})
    assert ended.returncode == 75, (story["state"] / "runs" / "r2" / "driver.log").read_text()[-3000:]
    assert ids(story["root"]) == [1, 2, 3, 6]  # committed before the run ended
    done = run_runner(story["project"], story["state"], "r2b")
    assert done.returncode == 0, (story["state"] / "runs" / "r2b" / "driver.log").read_text()[-3000:]
    assert ids(story["root"]) == [1, 2, 3, 6]
    back = [row for row in quarantine(story["root"]) if row["source_file"].endswith("/replay-000001.json")]
    assert sorted((row["record"], row["rule"]) for row in back) == sorted([(TRUNCATED, "malformed_record"),
                                                                            (NO_ID_KEPT, "id_present")])


def test_4_replaying_again_takes_nothing_and_the_run_after_adds_nothing(story, spark):
    again = dlq_replay_cli(spark, story["spec"], story["state"], "--quarantine", "orders", "--json")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == ("nothing to replay from orders_quarantine; not taken: already replayed: 3, "
                                            "project unchanged since a replay sent it back: 2")
    done = run_runner(story["project"], story["state"], "r3")
    assert done.returncode == 0, (story["state"] / "runs" / "r3" / "driver.log").read_text()[-3000:]
    assert ids(story["root"]) == [1, 2, 3, 6]
    assert len(quarantine(story["root"])) == 5


def test_a_bad_quarantine_argument_is_one_line(story, spark):
    for extra, says in ((["--quarantine", "customers"], "table customers of "),
                        (["--quarantine", "orders_quarantine"], "give the table quarantined_table declared"),
                        (["--quarantine", "orders", "--stage", "source"], "--stage: not an option of a quarantine replay")):
        done = dlq_replay_cli(spark, story["spec"], story["state"], *extra)
        assert done.returncode == 2 and done.stderr.startswith("FAILED: ") and says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
