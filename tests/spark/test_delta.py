"""Destination and DLQ `delta`: real Delta tables on local disk, written by the runner on real local Spark.

Exactly once is checked on the table's content read back and on its transaction log (DESCRIBE HISTORY,
the txn versions recorded for each app id). Crashes are the runner's in-process stand-in for a killed
driver (``SimulatedCrash`` at a commit point), and, in one test, real SIGKILLs of a child driver
(``--faults crash_after_destination``) restarted on the same state directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_conduit.pipeline.model import DeadLetterQueueSpec, DestinationSpec
from airflow_conduit.recovery import codes
from airflow_conduit.spark.faults import SimulatedCrash
from airflow_conduit.spark.packaging import entrypoint_path
from airflow_conduit.spark.replay import replay
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_replay_cli, file_source, good, pipeline, write_lines

pytestmark = pytest.mark.spark


def _crash():
    raise SimulatedCrash("killed")


def _run(spark, spec, state, run_id, crash_at=None):
    faults = {"crash_after_destination": {"destination": crash_at[0], "batch": crash_at[1]}} if crash_at else None
    return execute(spark, spec, state_dir=state, run_id=run_id, faults=faults, crash=_crash)


def delta_dest(path: Path, did: str = "lake", **settings) -> DestinationSpec:
    return DestinationSpec(id=did, plugin="delta", settings={"path": str(path), "mode": "append", **settings})


def delta_dlq(path: Path) -> DeadLetterQueueSpec:
    return DeadLetterQueueSpec(plugin="delta", settings={"path": str(path), "mode": "append"}, window_size=0)


def rows(spark, path: Path) -> list[dict]:
    return [r.asDict(recursive=True) for r in spark.read.format("delta").load(str(path)).collect()]


def history(spark, path: Path) -> list[str]:
    """The table's operations, oldest first."""
    found = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation").collect()
    return [r["operation"] for r in sorted(found, key=lambda r: r["version"])]


def txn_versions(spark, path: Path) -> dict[str, int]:
    """App id -> the last txn version the table's log records for it."""
    jvm = spark.sparkContext._jvm
    empty = jvm.scala.Option.empty()
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path)).update(False, empty, empty)
    txns = snapshot.setTransactions()
    return {txns.apply(i).appId(): int(txns.apply(i).version()) for i in range(txns.size())}


def _input(folder: Path, files: int = 4) -> tuple[list[int], list[tuple[str, int]]]:
    """files x (3 good + 1 malformed + 1 wrong type); returns (good ids, bad (file, line))."""
    good_ids, bad = [], []
    for f in range(files):
        ids = [f * 10 + k for k in range(3)]
        good_ids += ids
        write_lines(folder, f"part-{f}.json", [good(ids[0]), '{"id": oops', good(ids[1]), '{"id": "x"}', good(ids[2])])
        bad += [(f"part-{f}.json", 2), (f"part-{f}.json", 4)]
    return sorted(good_ids), sorted(bad)


def _bad_in(dlq_rows: list[dict]) -> list[tuple[str, int]]:
    return sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq_rows)


# -- append, exactly once -----------------------------------------------------------------------------------


def test_append_is_exactly_once_across_crashes_before_and_after_each_commit(spark, tmp_path):
    good_ids, bad = _input(tmp_path / "in")
    spec = pipeline("dl", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})],
                    [delta_dest(tmp_path / "lake")], dlq=delta_dlq(tmp_path / "dlq"))
    state = tmp_path / "state"
    # r1 dies right after the DLQ committed batch 0 (the lake not yet); r2 right after the lake committed
    # batch 1 (before Spark's checkpoint did); r3 right after the lake committed batch 2
    for run_id, point in [("r1", ("dead-letter-queue", 0)), ("r2", ("lake", 1)), ("r3", ("lake", 2))]:
        with pytest.raises(SimulatedCrash):
            _run(spark, spec, state, run_id, crash_at=point)
    code, report = _run(spark, spec, state, "r4")
    assert code == 0, report.error

    assert sorted(r["id"] for r in rows(spark, tmp_path / "lake")) == good_ids  # none missing, none twice
    assert _bad_in(rows(spark, tmp_path / "dlq")) == bad
    # one Delta commit per batch in each table, whatever the crashes: the re-runs found the batch in the log.
    # The lake is created by batch 0's commit: r1 died before it (no table then), and r2 created it with batch 0
    assert history(spark, tmp_path / "lake") == ["WRITE"] * 4
    assert history(spark, tmp_path / "dlq") == ["WRITE"] * 4
    (lake_app,) = txn_versions(spark, tmp_path / "lake")
    assert txn_versions(spark, tmp_path / "lake")[lake_app] == 3 and lake_app.endswith("/lake")
    assert not (state / "commits" / "lake").exists()  # the table's log is the marker
    r2 = json.loads((state / "runs" / "r2" / "report.json").read_text())
    assert "dead-letter-queue" in r2["batches"][0]["already_committed"]  # batch 0's DLQ was not written again
    r4 = json.loads((state / "runs" / "r4" / "report.json").read_text())
    assert r4["batches"][0]["batch_id"] == 2 and "lake" in r4["batches"][0]["already_committed"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    return env


def _spec_file(folder: Path, destination: str) -> Path:
    text = f"""\
version: "1"
pipeline:
  id: killed
  sources:
    - id: in
      plugin: file
      settings: {{path: in, schema: "id BIGINT NOT NULL, name STRING, amount DOUBLE", max-files-per-trigger: 1}}
  destinations:
    - id: lake
      plugin: delta
      settings: {destination}
  dead-letter-queue:
    plugin: delta
    settings: {{path: dlq}}
    window-size: 0
"""
    path = folder / "pipeline.yaml"
    path.write_text(text)
    return path


def _driver(spec: Path, state: Path, run_id: str, faults: dict | None = None) -> subprocess.CompletedProcess:
    """The job's entry point as a child driver process (its own local Spark), as spark-submit runs it."""
    args = [sys.executable, entrypoint_path(), "--spec", str(spec), "--run-id", run_id, "--state-dir", str(state)]
    if faults:
        args += ["--faults", json.dumps(faults)]
    return subprocess.run(args, cwd=spec.parent, env=_env(), capture_output=True, text=True, timeout=900)


def test_append_is_exactly_once_across_real_sigkills_of_the_driver(spark, tmp_path):
    good_ids, bad = _input(tmp_path / "in", files=3)
    spec = _spec_file(tmp_path, "{path: lake}")
    state = tmp_path / "state"
    for run_id, point in [("k1", ("dead-letter-queue", 0)), ("k2", ("lake", 1))]:
        killed = _driver(spec, state, run_id, {"crash_after_destination": {"destination": point[0], "batch": point[1]}})
        assert killed.returncode in (-9, 137), killed.stderr[-3000:]
    done = _driver(spec, state, "k3")
    assert done.returncode == 0, done.stderr[-3000:]

    assert sorted(r["id"] for r in rows(spark, tmp_path / "lake")) == good_ids
    assert _bad_in(rows(spark, tmp_path / "dlq")) == bad
    assert history(spark, tmp_path / "lake") == ["WRITE"] * 3  # created by batch 0's commit
    assert history(spark, tmp_path / "dlq") == ["WRITE"] * 3  # a Delta DLQ is created by its first write


# -- merge ------------------------------------------------------------------------------------------------------


def test_merge_upserts_exactly_once_across_a_crash_and_the_last_record_of_a_key_wins(spark, tmp_path):
    inp = tmp_path / "in"
    upd = lambda i, name, amount: json.dumps({"id": i, "name": name, "amount": amount})  # noqa: E731
    write_lines(inp, "b0.json", [upd(1, "a", 1.0), upd(2, "b", 2.0), upd(3, "c", 3.0)])
    write_lines(inp, "b1.json", [upd(2, "b1", 20.0), upd(4, "d", 4.0), upd(2, "b2", 21.0)])  # key 2 twice: the later wins
    write_lines(inp, "b2.json", [upd(1, "a2", 10.0), '{"id": null, "name": "nokey"}', upd(5, "e", 5.0)])
    spec = pipeline("mg", [file_source(inp, schema="id BIGINT, name STRING, amount DOUBLE", **{"max-files-per-trigger": 1})],
                    [delta_dest(tmp_path / "lake", mode="merge", key=["id"])], dlq=delta_dlq(tmp_path / "dlq"))
    state = tmp_path / "state"
    with pytest.raises(SimulatedCrash):
        _run(spark, spec, state, "r1", crash_at=("lake", 1))
    code, report = _run(spark, spec, state, "r2")
    assert code == 0, report.error

    table = {r["id"]: (r["name"], r["amount"]) for r in rows(spark, tmp_path / "lake")}
    assert table == {1: ("a2", 10.0), 2: ("b2", 21.0), 3: ("c", 3.0), 4: ("d", 4.0), 5: ("e", 5.0)}
    # batch 0 created the table (a write), batches 1 and 2 one MERGE each: batch 1 was not merged again
    assert history(spark, tmp_path / "lake") == ["WRITE", "MERGE", "MERGE"]
    (dead,) = rows(spark, tmp_path / "dlq")
    assert dead["stage"] == "destination" and dead["component_id"] == "lake"
    assert "merge key id is null" in dead["exception_message"] and '"nokey"' in dead["record"]


# -- a deleted checkpoint ---------------------------------------------------------------------------------------


def test_a_deleted_checkpoint_does_not_make_its_new_batches_be_skipped(spark, tmp_path):
    inp = tmp_path / "in"
    write_lines(inp, "a.json", [good(1), good(2)])
    spec = pipeline("ck", [file_source(inp)], [delta_dest(tmp_path / "lake")], dlq=delta_dlq(tmp_path / "dlq"))
    state = tmp_path / "state"
    assert _run(spark, spec, state, "r1")[0] == 0
    shutil.rmtree(state / "checkpoints")  # batch ids start again at 0
    inp.joinpath("a.json").unlink()
    write_lines(inp, "b.json", [good(3), good(4)])
    code, report = _run(spark, spec, state, "r2")
    assert code == 0, report.error
    # Spark's batch 0 of the new checkpoint is numbered on (batch 1), under the new checkpoint's identity
    assert report.batches[0]["batch_id"] == 1 and report.batches[0]["written"] == {"lake": 2}

    assert sorted(r["id"] for r in rows(spark, tmp_path / "lake")) == [1, 2, 3, 4]
    apps = txn_versions(spark, tmp_path / "lake")
    assert len(apps) == 2 and sorted(apps.values()) == [0, 1]


# -- the DLQ as a Delta table, replay from and into Delta --------------------------------------------------------


def test_replay_from_a_delta_dlq_into_a_delta_table_is_exactly_once_across_a_crash(spark, tmp_path):
    inp = tmp_path / "in"
    write_lines(inp, "a.json", [good(1), json.dumps({"id": 2, "name": "n2", "amount": "2.5 EUR"}), good(3),
                                json.dumps({"id": 4, "name": "n4", "amount": "oops"})])
    strict = pipeline("rp", [file_source(inp)], [delta_dest(tmp_path / "lake")], dlq=delta_dlq(tmp_path / "dlq"))
    state = tmp_path / "state"
    assert _run(spark, strict, state, "r1")[0] == 0
    assert sorted(r["id"] for r in rows(spark, tmp_path / "lake")) == [1, 3]
    assert len(rows(spark, tmp_path / "dlq")) == 2
    # the fix: amount read as a string, the lake takes what converts; "oops" still fails... at the lake
    fixed_source = file_source(inp, schema="id BIGINT NOT NULL, name STRING, amount STRING",
                               processors=[_proc("strip-eur", "field.set", field="amount", value="replace(amount, ' EUR', '')")])
    fixed = dataclasses.replace(strict, sources=(fixed_source,))
    with pytest.raises(SimulatedCrash):
        replay(spark, fixed, state_dir=state, faults={"crash_after_destination": {"destination": "lake", "batch": 1}}, crash=_crash)
    resumed = replay(spark, fixed, state_dir=state)
    assert resumed.resumed and resumed.written == {"lake": 0}  # the lake's commit was in before the crash

    lake = sorted((r["id"], r["amount"]) for r in rows(spark, tmp_path / "lake"))
    assert lake == [(1, 1.5), (2, 2.5), (3, 4.5)]  # record 2 once, though the replay was cut after its commit
    dlq = rows(spark, tmp_path / "dlq")
    again = [r for r in dlq if r.get("replay_count") == 1]
    assert len(dlq) == 3 and len(again) == 1  # the DLQ took replay_count as a new column
    assert again[0]["stage"] == "destination" and "amount does not convert to column amount double" in again[0]["exception_message"]
    assert history(spark, tmp_path / "lake").count("WRITE") == 2  # the pipeline's batch and the replay's, once each


def _proc(pid, plugin, **settings):
    from spark_helpers import proc

    return proc(pid, plugin, **settings)


# -- schema ---------------------------------------------------------------------------------------------------


def _table(spark, path: Path, ddl: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{path}` ({ddl}) USING delta")


def test_records_that_do_not_fit_the_table_go_to_the_dlq_with_what_is_wrong(spark, tmp_path):
    _table(spark, tmp_path / "lake", "id BIGINT NOT NULL, name STRING NOT NULL, amount DOUBLE")
    inp = tmp_path / "in"
    write_lines(inp, "a.json", [
        json.dumps({"id": 1, "name": "ok", "amount": "1.5"}),
        json.dumps({"id": 2, "amount": "2"}),  # NOT NULL column name missing
        json.dumps({"id": 3, "name": "c", "amount": "lots"}),  # does not convert to DOUBLE
        json.dumps({"id": 4, "name": "d", "amount": "4", "note": "hello"}),  # a field the table lacks
        json.dumps({"id": 5, "name": "e", "note": None}),  # the extra field is null: nothing would be lost
    ])
    spec = pipeline("sc", [file_source(inp, schema="id BIGINT NOT NULL, name STRING, amount STRING, note STRING")],
                    [delta_dest(tmp_path / "lake")], dlq=delta_dlq(tmp_path / "dlq"))
    code, report = _run(spark, spec, tmp_path / "state", "r1")
    assert code == 0, report.error
    assert sorted((r["id"], r["name"], r["amount"]) for r in rows(spark, tmp_path / "lake")) == [(1, "ok", 1.5), (5, "e", None)]
    assert [f.name for f in spark.read.format("delta").load(str(tmp_path / "lake")).schema] == ["id", "name", "amount"]
    dead = {json.loads(r["record"])["id"]: r for r in rows(spark, tmp_path / "dlq")}
    assert set(dead) == {2, 3, 4}
    assert all(r["stage"] == "destination" and r["component_type"] == "delta" for r in dead.values())
    assert all(r["exception_class"] == "airflow_conduit.spark.SchemaMismatchError" for r in dead.values())
    assert "NOT NULL column name is null" in dead[2]["exception_message"]
    assert "field amount does not convert to column amount double" in dead[3]["exception_message"]
    assert "field note is not a column of the table" in dead[4]["exception_message"]
    assert report.totals["dlq"] == 3 and report.totals["written"] == {"lake": 2}


def test_merge_schema_adds_a_new_field_as_a_column(spark, tmp_path):
    _table(spark, tmp_path / "lake", "id BIGINT, name STRING")
    inp = tmp_path / "in"
    write_lines(inp, "a.json", [json.dumps({"id": 1, "name": "a", "note": "new"})])
    spec = pipeline("ms", [file_source(inp, schema="id BIGINT, name STRING, note STRING")],
                    [delta_dest(tmp_path / "lake", **{"merge-schema": True})], dlq=delta_dlq(tmp_path / "dlq"))
    assert _run(spark, spec, tmp_path / "state", "r1")[0] == 0
    assert rows(spark, tmp_path / "lake") == [{"id": 1, "name": "a", "note": "new"}]


def test_a_table_whose_schema_no_longer_fits_the_records_is_a_named_fatal_error(spark, tmp_path):
    _table(spark, tmp_path / "lake", "id BIGINT, name ARRAY<STRING>")  # changed incompatibly: name was a string
    inp = tmp_path / "in"
    write_lines(inp, "a.json", [good(1)])
    spec = pipeline("inc", [file_source(inp)], [delta_dest(tmp_path / "lake")], dlq=delta_dlq(tmp_path / "dlq"))
    code, report = _run(spark, spec, tmp_path / "state", "r1")
    assert code == codes.EXIT_FATAL
    error = report.error
    assert error["code"] == codes.ANALYSIS and error["component_id"] == "lake" and error["stage"] == "destination"
    assert "field name (string) cannot be converted to column name (array<string>)" in error["message"]
    assert rows(spark, tmp_path / "lake") == []


# -- bad input ----------------------------------------------------------------------------------------------------


def test_a_path_that_is_not_a_delta_table_is_refused_before_the_query_starts(spark, tmp_path):
    spark.range(3).write.parquet(str(tmp_path / "parquet"))
    write_lines(tmp_path / "in", "a.json", [good(1)])
    spec = pipeline("nd", [file_source(tmp_path / "in")], [delta_dest(tmp_path / "parquet")], source_file="/specs/nd.yaml")
    code, report = _run(spark, spec, tmp_path / "state", "r1")
    assert code == codes.EXIT_INVALID_SPEC
    error = report.error
    assert error["code"] == codes.INVALID_SPEC and error["component_id"] == "lake"
    assert "is not a Delta table" in error["message"] and "pipeline.destinations[0].settings.path in /specs/nd.yaml" in error["message"]
    assert "Traceback" not in error["message"]
    assert not (tmp_path / "parquet" / "_delta_log").exists()


def test_a_table_name_that_does_not_exist_is_a_named_error(spark, tmp_path):
    write_lines(tmp_path / "in", "a.json", [good(1)])
    spec = pipeline("nt", [file_source(tmp_path / "in")],
                    [DestinationSpec(id="lake", plugin="delta", settings={"table": "no_such_table", "mode": "append"})],
                    source_file="/specs/nt.yaml")
    code, report = _run(spark, spec, tmp_path / "state", "r1")
    assert code == codes.EXIT_INVALID_SPEC
    assert "table 'no_such_table' (pipeline.destinations[0].settings.table in /specs/nt.yaml) does not exist" in report.error["message"]


def test_a_catalog_table_is_written_by_name(spark, tmp_path):
    spark.sql(f"CREATE TABLE conduit_named (id BIGINT, name STRING, amount DOUBLE) USING delta LOCATION '{tmp_path / 'named'}'")
    try:
        write_lines(tmp_path / "in", "a.json", [good(1), good(2)])
        spec = pipeline("nm", [file_source(tmp_path / "in")],
                        [DestinationSpec(id="lake", plugin="delta", settings={"table": "conduit_named", "mode": "append"})])
        assert _run(spark, spec, tmp_path / "state", "r1")[0] == 0
        assert sorted(r["id"] for r in spark.table("conduit_named").collect()) == [1, 2]
    finally:
        spark.sql("DROP TABLE IF EXISTS conduit_named")


def test_a_merge_key_the_records_do_not_have_is_a_named_fatal_error(spark, tmp_path):
    write_lines(tmp_path / "in", "a.json", [good(1)])
    spec = pipeline("mk", [file_source(tmp_path / "in")], [delta_dest(tmp_path / "lake", mode="merge", key=["order_id"])],
                    source_file="/specs/mk.yaml")
    code, report = _run(spark, spec, tmp_path / "state", "r1")
    assert code == codes.EXIT_INVALID_SPEC
    message = report.error["message"]
    assert "merge key 'order_id' (pipeline.destinations[0].settings.key in /specs/mk.yaml) is not a field" in message
    assert "fields: id, name, amount" in message
    assert not (tmp_path / "lake").exists()


def test_cli_replay_from_a_delta_dlq_into_delta_killed_with_sigkill_after_the_lake_commit_writes_once(spark, tmp_path):
    inp = tmp_path / "in"
    write_lines(inp, "a.json", [good(1), json.dumps({"id": 2, "name": "n2", "amount": "2.5 EUR"})])
    strict = pipeline("rpk", [file_source(inp)], [delta_dest(tmp_path / "lake")], dlq=delta_dlq(tmp_path / "dlq"))
    state = tmp_path / "state"
    assert _run(spark, strict, state, "r1")[0] == 0
    spec = tmp_path / "fixed.yaml"
    spec.write_text(f"""version: "1"
pipeline:
  id: rpk
  sources:
    - id: in
      plugin: file
      settings: {{path: {inp}, schema: "id BIGINT NOT NULL, name STRING, amount STRING"}}
      processors:
        - {{id: strip-eur, plugin: field.set, settings: {{field: amount, value: "replace(amount, ' EUR', '')"}}}}
  destinations:
    - {{id: lake, plugin: delta, settings: {{path: {tmp_path / 'lake'}}}}}
  dead-letter-queue: {{plugin: delta, settings: {{path: {tmp_path / 'dlq'}}}, window-size: 0}}
""")

    def cli(*extra):
        if not extra:  # the resume: in this process, on the shared session (spark_helpers.dlq_replay_cli)
            return dlq_replay_cli(spark, spec, state)
        args = [sys.executable, "-m", "airflow_conduit.cli.main", "dlq", "replay", str(spec), "--state-dir", str(state), *extra]
        return subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=900)

    crash = json.dumps({"crash_after_destination": {"destination": "lake", "batch": 1}})
    killed = cli("--faults", crash)
    assert killed.returncode in (-9, 137), (killed.returncode, killed.stderr[-3000:])
    assert sorted(r["id"] for r in rows(spark, tmp_path / "lake")) == [1, 2]  # the lake's commit was in when it died
    out = cli()
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("replay 1 (batch -1, resumed): 1 record(s): written[lake=0]"), out.stdout
    assert sorted((r["id"], r["amount"]) for r in rows(spark, tmp_path / "lake")) == [(1, 1.5), (2, 2.5)]
    assert history(spark, tmp_path / "lake") == ["WRITE", "WRITE"]  # created by batch 0's commit


def _jobs_started(spark) -> int:
    value = spark.sparkContext._jsc.sc().dagScheduler().nextJobId()
    return int(value if isinstance(value, int) else value.get())


def test_the_last_committed_batch_is_read_from_the_log_checksum_without_a_spark_job_and_once_per_run(spark, tmp_path):
    from airflow_conduit.spark.delta_sink import DeltaDestination

    def destination() -> DeltaDestination:
        dest = DeltaDestination(spark, "lake", "delta", {"path": str(tmp_path / "lake"), "mode": "append"})
        dest.bind(lambda: "ck/query-1", spec_file=None, setting_path="pipeline.destinations[0]")
        return dest

    writer = destination()
    assert writer.committed(0) is False  # no table yet
    frame = spark.createDataFrame([(1, "a")], "id BIGINT, name STRING")
    for batch in range(3):
        writer.write(frame, batch)
    assert writer.committed(2) and not writer.committed(3)  # what it wrote, without reading the log again
    other = DeltaDestination(spark, "lake", "delta", {"path": str(tmp_path / "lake"), "mode": "append"})
    other.bind(lambda: "ck/query-2", spec_file=None, setting_path="pipeline.destinations[0]")
    other.write(frame, 7)  # another checkpoint's app id: not this one's batches

    fresh = destination()  # a new run: it asks the table
    started = _jobs_started(spark)
    assert fresh.last_version() == 2
    assert _jobs_started(spark) == started  # read from the checksum file, not by rebuilding the table's state
    assert fresh.committed(2) and not fresh.committed(3)
    assert txn_versions(spark, tmp_path / "lake") == {"airflow-conduit/ck/query-1/lake": 2, "airflow-conduit/ck/query-2/lake": 7}
    assert len(rows(spark, tmp_path / "lake")) == 4
