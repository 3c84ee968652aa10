"""DLQ replay on real local Spark: after a schema fix, dead-lettered records reach the lake exactly once.

The crash is the runner's in-process stand-in for a killed driver (``SimulatedCrash`` at a commit point, as in
the exactly-once tests): the replay is interrupted after the DLQ committed its batch and before the lake's write (done by the
batch's one pass) was committed.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from airflow_conduit.spark import faults as faults_mod
from airflow_conduit.spark.replay import ReplayFilter, replay
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, dlq_replay_cli, file_dest, file_source, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark

STRICT = "id BIGINT NOT NULL, name STRING, code INT"
FIXED = "id BIGINT NOT NULL, name STRING, code STRING"  # the fix: codes are not all numbers


def _line(i: int, code: str | int = 7) -> str:
    return json.dumps({"id": i, "name": f"n{i}", "code": code})


def _spec(tmp_path, schema):
    return pipeline("replay", [file_source(tmp_path / "in", schema=schema)], [file_dest(tmp_path / "lake", did="lake")],
                    dlq=dlq_file(tmp_path / "dlq", size=0))


def _crash():
    raise faults_mod.SimulatedCrash("replay killed")


def test_replay_after_a_schema_fix_moves_records_to_the_lake_exactly_once(spark, tmp_path):
    state = tmp_path / "state"
    write_lines(tmp_path / "in", "a.json", [_line(1), _line(2, "A2"), _line(3, "B3"), "{broken", _line(5)])
    code, report = execute(spark, _spec(tmp_path, STRICT), state_dir=state, run_id="r1")
    assert code == 0 and report.totals["dlq"] == 3
    lake_ids = lambda: sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake"))  # noqa: E731
    assert lake_ids() == [1, 5]
    fixed = _spec(tmp_path, FIXED)

    # dry run: what would pass and what would still fail, by error; nothing written, nothing marked
    dry = replay(spark, fixed, state_dir=state, dry_run=True)
    assert (dry.selected, dry.passed, dry.still_failing) == (3, 2, 1)
    [(error, n)] = dry.errors.items()
    assert n == 1 and error.startswith("in: ") and "JSON" in error
    assert lake_ids() == [1, 5] and len(read_json_rows(spark, tmp_path / "dlq")) == 3
    assert not (state / "replays" / "1").exists()

    # killed after the DLQ committed the replay's batch, before the lake did; the next replay resumes it
    with pytest.raises(faults_mod.SimulatedCrash):
        replay(spark, fixed, state_dir=state,
               faults={"crash_after_destination": {"destination": "dead-letter-queue", "batch": 1}}, crash=_crash)
    assert not (state / "replays" / "1" / "commits" / "lake" / "-1").exists()  # the lake's write not committed
    resumed = replay(spark, fixed, state_dir=state, filters=ReplayFilter(stages=("processor",)))
    assert resumed.resumed and resumed.batch_id == -1
    assert lake_ids() == [1, 2, 3, 5]  # each record once
    dlq = read_json_rows(spark, tmp_path / "dlq")
    [back] = [r for r in dlq if r["batch_id"] == -1]
    assert len(dlq) == 4  # the DLQ row of the replay written once, not once per attempt
    assert (back["record"], back["source_position"], back["replay_count"]) == ("{broken", 4, 1)

    # a second replay never takes the replayed records again, nor the one that went back to the DLQ under this
    # same spec (it would fail the same way); forced, it takes that one
    second = replay(spark, fixed, state_dir=state)
    assert (second.replay, second.selected) == (None, 0)
    assert second.skipped == {"already replayed": 3, "spec unchanged since it failed": 1}
    second = replay(spark, fixed, state_dir=state, force=True)
    assert (second.selected, second.passed, second.still_failing) == (1, 0, 1)
    assert second.skipped == {"already replayed": 3}
    assert lake_ids() == [1, 2, 3, 5]
    assert not (tmp_path / "lake" / "batch_id=-2").exists()  # every record still failing: nothing written to the lake
    again = [r for r in read_json_rows(spark, tmp_path / "dlq") if r["batch_id"] == -2]
    assert [r["replay_count"] for r in again] == [2]

    # filters: only what matches is taken (nothing here: every record was replayed)
    nothing = replay(spark, dataclasses.replace(fixed), state_dir=state, filters=ReplayFilter(components=("nope",)))
    assert nothing.replay is None and nothing.selected == 0


def _cli(spec, state, *extra):
    """The command in a process of its own when a fault kills it (SIGKILL), else in this process on the shared
    session (spark_helpers.dlq_replay_cli: the same command, no JVM start of its own)."""
    import subprocess
    import sys

    if "--faults" not in extra:
        return dlq_replay_cli(_session(), spec, state, *extra)
    return subprocess.run(
        [sys.executable, "-m", "airflow_conduit.cli.main", "dlq", "replay", str(spec), "--state-dir", str(state), *extra],
        capture_output=True, text=True, timeout=900,
    )


def _session():
    """The shared session (tests/spark/conftest.py's ``spark``, which every test here holds)."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


def _dlq_of_two_records_and_the_fixed_spec(tmp_path):
    """A file DLQ holding two records (one the fixed spec lets pass, one still broken) and the fixed spec's file."""
    dlq = tmp_path / "dlq" / "batch_id=0"
    dlq.mkdir(parents=True)
    base = {"pipeline_id": "replay", "run_id": "r1", "batch_id": 0, "source_id": "in", "source_file": "file:/data/a.json",
            "source_split_start": 0, "stage": "source", "component_id": "in", "component_type": "file", "attempt": 1,
            "time_of_error": "2026-01-01T00:00:00.000000Z"}
    rows = [
        {**base, "source_position": 2, "exception_class": "airflow_conduit.spark.WrongTypeError",
         "exception_message": "record has field(s) of the wrong type: code", "record": _line(2, "A2")},
        {**base, "source_position": 4, "exception_class": "airflow_conduit.spark.MalformedRecordError",
         "exception_message": "not JSON", "record": "{broken"},
    ]
    (dlq / "part-00000.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(f"""version: "1"
pipeline:
  id: replay
  sources:
    - {{id: in, plugin: file, settings: {{path: {tmp_path / 'in'}, format: json, schema: "{FIXED}"}}}}
  destinations:
    - {{id: lake, plugin: file, settings: {{path: {tmp_path / 'lake'}}}}}
  dead-letter-queue: {{plugin: file, settings: {{path: {tmp_path / 'dlq'}}}, window-size: 0}}
""")
    return spec


def test_cli_dry_run_then_a_replay_killed_with_sigkill_and_resumed_writes_each_record_once(spark, tmp_path):
    spec = _dlq_of_two_records_and_the_fixed_spec(tmp_path)
    state = tmp_path / "state"
    assert _cli(spec, state, "--dry-run").returncode == 2  # not the state dir of a pipeline that ran
    state.mkdir()

    out = _cli(spec, state, "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "DRY RUN: 2 record(s) would be replayed: 1 would pass, 0 filtered, 1 would still fail" in lines[0], out.stdout
    assert lines[1:] == ["  would still fail: 1  in: malformed JSON record: not a JSON object"], out.stdout
    assert not (tmp_path / "lake").exists() and not (state / "replays" / "1").exists()

    # SIGKILL right after the DLQ committed the replay's batch (the lake's write not committed yet)
    crash = json.dumps({"crash_after_destination": {"destination": "dead-letter-queue", "batch": 1}})
    out = _cli(spec, state, "--faults", crash)
    assert out.returncode in (-9, 137), (out.returncode, out.stderr[-3000:])
    assert not (state / "replays" / "1" / "commits" / "lake" / "-1").exists()

    out = _cli(spec, state)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("replay 1 (batch -1, resumed): 2 record(s): written[lake=1]"), out.stdout
    assert [r["id"] for r in read_json_rows(spark, tmp_path / "lake")] == [2]
    back = [r for r in read_json_rows(spark, tmp_path / "dlq") if r["batch_id"] == -1]
    assert [(r["record"], r["replay_count"]) for r in back] == [("{broken", 1)]


def test_a_replay_whose_spark_jvm_is_killed_fails_with_exit_1_and_one_named_line_then_resumes(spark, tmp_path):
    """The documented exit code of a failed replay (1), never a traceback nor "internal error"; the next replay
    resumes the killed one."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    spec = _dlq_of_two_records_and_the_fixed_spec(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    cli = subprocess.Popen(
        [sys.executable, "-m", "airflow_conduit.cli.main", "dlq", "replay", str(spec), "--state-dir", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not (state / "replays" / "1" / "plan.json").exists():  # chosen and marked: the replay runs its batch
            assert cli.poll() is None, cli.communicate()
            assert time.monotonic() < deadline, "the replay never chose its records"
            time.sleep(0.02)
        [jvm] = [p for p in psutil.Process(cli.pid).children(recursive=True) if p.name().startswith("java")]
        jvm.send_signal(signal.SIGKILL)
        out, err = cli.communicate(timeout=600)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 1, (cli.returncode, out, err)
    assert "Traceback" not in out + err and "internal error" not in err, err
    [line] = err.strip().splitlines()
    assert line.startswith("FAILED: replay of pipeline replay: ") and "run the replay again to resume it" in line, line
    assert "the driver's JVM (spark-submit) was killed by signal 9 (SIGKILL)" in line and "(error 1410, transient)" in line

    done = _cli(spec, state)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("replay 1 (batch -1, resumed): 2 record(s)"), done.stdout
    assert [r["id"] for r in read_json_rows(spark, tmp_path / "lake")] == [2]


def test_a_record_missing_a_required_field_keeps_its_fields_in_the_dlq_and_replays_once_the_field_is_optional(spark, tmp_path):
    state = tmp_path / "state"
    missing = json.dumps({"id": 2, "name": "n2"})
    write_lines(tmp_path / "in", "a.json", [_line(1), missing])
    code, _ = execute(spark, _spec(tmp_path, "id BIGINT NOT NULL, name STRING, code INT NOT NULL"), state_dir=state,
                      run_id="r1")
    assert code == 0
    [dead] = read_json_rows(spark, tmp_path / "dlq")
    assert dead["exception_class"] == "airflow_conduit.spark.MissingFieldError"
    assert json.loads(dead["record"]) == {"id": 2, "name": "n2"}  # its fields as read (no text kept for a parsed line)

    done = replay(spark, _spec(tmp_path, "id BIGINT NOT NULL, name STRING, code INT"), state_dir=state)
    assert (done.selected, done.passed) == (1, 1)
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake")) == [1, 2]


def test_replay_after_a_rule_fix_counts_every_rule_in_the_dry_run_and_the_replay(spark, tmp_path):
    from spark_helpers import proc

    state = tmp_path / "state"
    amounts = {1: 5.0, 2: -1.0, 3: 2.0, 4: -10.0}
    write_lines(tmp_path / "in", "a.json", [json.dumps({"id": i, "name": f"n{i}", "amount": a}) for i, a in amounts.items()])

    def spec(rules):
        return pipeline("rules", [file_source(tmp_path / "in")], [file_dest(tmp_path / "lake", did="lake")],
                        processors=[proc("quality", "expect", rules=rules)], dlq=dlq_file(tmp_path / "dlq", size=0))

    strict = [{"name": "positive", "condition": "amount > 0", "action": "drop"}]
    code, report = execute(spark, spec(strict), state_dir=state, run_id="r1")
    assert code == 0 and report.totals["dlq"] == 2
    fixed = spec([{"name": "positive", "condition": "amount >= -5", "action": "drop"},  # the fix: small refunds are fine
                  {"name": "not-negative", "condition": "amount >= 0", "action": "warn"}])

    dry = replay(spark, fixed, state_dir=state, dry_run=True, filters=ReplayFilter(rules=("positive",)))
    assert (dry.selected, dry.passed, dry.still_failing) == (2, 1, 1)
    assert dry.expectations == {"quality": {"positive": {"action": "drop", "passed": 1, "failed": 1},
                                            "not-negative": {"action": "warn", "passed": 0, "failed": 2}}}
    done = replay(spark, fixed, state_dir=state, filters=ReplayFilter(rules=("positive",)))
    assert done.expectations == dry.expectations and done.batch["expectations"] == dry.expectations
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake")) == [1, 2, 3]

def test_a_record_over_the_size_limit_is_replayed_once_the_limit_is_raised_and_a_non_utf8_line_is_left(spark, tmp_path):
    state = tmp_path / "state"
    big = json.dumps({"id": 2, "name": "x" * 300, "code": 7})
    folder = tmp_path / "in"
    path = write_lines(folder, "a.json", [])
    mtime = path.stat().st_mtime
    path.write_bytes(b"\n".join([_line(1).encode(), big.encode(), b'{"id": 3, "name": "caf\xe9", "code": 7}']) + b"\n")
    os.utime(path, (mtime, mtime))

    def spec(limit: int):
        source = file_source(folder, schema=STRICT, **{"max-string-length": limit})
        return pipeline("replay", [source], [file_dest(tmp_path / "lake", did="lake")], dlq=dlq_file(tmp_path / "dlq", size=0))

    code, report = execute(spark, spec(100), state_dir=state, run_id="r1")
    assert code == 0 and report.totals["dlq"] == 2
    classes = sorted(r["exception_class"].rsplit(".", 1)[1] for r in read_json_rows(spark, tmp_path / "dlq"))
    assert classes == ["InvalidUtf8Error", "RecordTooLargeError"]

    done = replay(spark, spec(1000), state_dir=state)
    assert (done.selected, done.passed, done.still_failing) == (1, 1, 0)
    assert done.skipped == {"a line that is not UTF-8 (its payload is its bytes, base64-encoded)": 1}
    lake = {r["id"]: r for r in read_json_rows(spark, tmp_path / "lake")}
    assert sorted(lake) == [1, 2] and lake[2]["name"] == "x" * 300


def _yaml_spec(path, tmp_path, schema):
    path.write_text(f"""version: "1"
pipeline:
  id: settle
  sources:
    - {{id: in, plugin: file, settings: {{path: {tmp_path / 'in'}, format: json, schema: "{schema}"}}}}
  destinations:
    - {{id: lake, plugin: file, settings: {{path: {tmp_path / 'lake'}}}}}
  dead-letter-queue: {{plugin: file, settings: {{path: {tmp_path / 'dlq'}}}, window-size: 0}}
""")
    return path


def test_a_replay_that_cannot_change_an_outcome_writes_nothing_and_one_after_a_fix_moves_the_fixed_records_once(spark, tmp_path):
    """The replay rule: a record is taken again only once the spec that decides its fate changed since it failed.

    Unchanged spec: nothing is written (no DLQ copies, no destination batch folder, no replay folder) and the CLI
    says why, its dry run shows the same. After a real fix (a schema change), the fixed records reach the lake
    exactly once across a SIGKILL of the replay, and a further replay with the fixed spec writes nothing again.
    """
    from airflow_conduit.pipeline import load_pipeline

    state = tmp_path / "state"
    write_lines(tmp_path / "in", "a.json", [_line(1), _line(2, "A2"), _line(3, "B3"), "{broken", _line(5)])
    strict = _yaml_spec(tmp_path / "strict.yaml", tmp_path, STRICT)
    fixed = _yaml_spec(tmp_path / "fixed.yaml", tmp_path, FIXED)
    code, report = execute(spark, load_pipeline(strict), state_dir=state, run_id="r1")  # as `run` loads it
    assert code == 0 and report.totals["dlq"] == 3
    lake_ids = lambda: sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake"))  # noqa: E731
    dlq_rows = lambda: read_json_rows(spark, tmp_path / "dlq")  # noqa: E731

    dry = replay(spark, load_pipeline(strict), state_dir=state, dry_run=True)
    assert dry.selected == 0 and dry.skipped == {"spec unchanged since it failed": 3}
    out = _cli(strict, state)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("nothing to replay; not taken: spec unchanged since it failed: 3"), out.stdout
    assert len(dlq_rows()) == 3 and lake_ids() == [1, 5]
    assert not (tmp_path / "lake" / "batch_id=-1").exists() and not (tmp_path / "dlq" / "batch_id=-1").exists()
    assert not (state / "replays").exists()

    # the fix, replayed and killed (SIGKILL) after the DLQ committed the replay's batch, before the lake did
    crash = json.dumps({"crash_after_destination": {"destination": "dead-letter-queue", "batch": 1}})
    out = _cli(fixed, state, "--faults", crash)
    assert out.returncode in (-9, 137), (out.returncode, out.stderr[-3000:])
    out = _cli(fixed, state)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("replay 1 (batch -1, resumed): 3 record(s): written[lake=2]"), out.stdout
    assert "COLUMN_ALREADY_EXISTS" not in out.stdout + out.stderr  # the DLQ's batch_id is read from its rows only
    assert lake_ids() == [1, 2, 3, 5]  # each fixed record once
    assert [(r["record"], r["replay_count"]) for r in dlq_rows() if r["batch_id"] == -1] == [("{broken", 1)]

    # settled: the fixed spec cannot change the last record's outcome
    out = _cli(fixed, state)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith(
        "nothing to replay; not taken: already replayed: 3, spec unchanged since it failed: 1"), out.stdout
    assert len(dlq_rows()) == 4 and lake_ids() == [1, 2, 3, 5]
    assert not (tmp_path / "lake" / "batch_id=-2").exists() and not (tmp_path / "dlq" / "batch_id=-2").exists()


def test_csv_records_keep_their_line_and_are_replayed_as_csv_lines_after_a_fix(spark, tmp_path):
    """A CSV source's DLQ records hold their lines (CRLF kept), the one a rule dropped as well as the one the
    parser refused; a replay parses them as the source does (separator, schema)."""
    from spark_helpers import proc

    state = tmp_path / "state"
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_bytes(b"id;name;code\r\n1;n1;7\r\n2;n2;-3\r\n3;n3;x\r\n")

    def spec(condition, schema):
        source = file_source(folder, fmt="csv", schema=schema, separator=";")
        return pipeline("csv-replay", [source], [file_dest(tmp_path / "lake", did="lake")],
                        processors=[proc("quality", "expect", rules=[{"name": "ok", "condition": condition, "action": "drop"}])],
                        dlq=dlq_file(tmp_path / "dlq", size=0))

    code, report = execute(spark, spec("code > 0", STRICT), state_dir=state, run_id="r1")
    assert code == 0 and report.totals["dlq"] == 2
    dead = {r["source_position"]: r["record"] for r in read_json_rows(spark, tmp_path / "dlq")}
    assert dead == {3: "2;n2;-3\r", 4: "3;n3;x\r"}  # line numbers count the header; the lines as they are
    done = replay(spark, spec("code <> '0'", FIXED), state_dir=state)  # the fix: any code but 0; codes are text
    assert (done.selected, done.passed, done.still_failing) == (2, 2, 0)
    lake = {r["id"]: r for r in read_json_rows(spark, tmp_path / "lake")}
    assert sorted(lake) == [1, 2, 3] and (lake[2]["code"], lake[3]["code"], lake[3]["name"]) == ("-3", "x", "n3")


def test_a_replay_killed_before_the_lakes_commit_marker_is_resumed_writing_each_record_once(spark, tmp_path):
    """``crash_before_commit`` names the replay as ``crash_after_destination`` does ("batch": 1 is replay 1): it fires
    after the lake wrote the replay's batch and before its marker; the resumed replay rewrites it, once."""
    state = tmp_path / "state"
    write_lines(tmp_path / "in", "a.json", [_line(1), _line(2, "A2"), _line(3, "B3"), _line(4)])
    code, report = execute(spark, _spec(tmp_path, STRICT), state_dir=state, run_id="r1")
    assert code == 0 and report.totals["dlq"] == 2
    fixed = _spec(tmp_path, FIXED)

    with pytest.raises(faults_mod.SimulatedCrash):
        replay(spark, fixed, state_dir=state, faults={"crash_before_commit": {"destination": "lake", "batch": 1}}, crash=_crash)
    assert (tmp_path / "lake" / "batch_id=-1").exists()  # written, not committed
    assert not (state / "replays" / "1" / "commits" / "lake" / "-1").exists()

    resumed = replay(spark, fixed, state_dir=state)
    assert resumed.resumed and resumed.written == {"lake": 2}
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "lake")) == [1, 2, 3, 4]
