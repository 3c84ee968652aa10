"""The one-pass batch: read-order numbers for the nack window, the DLQ beyond what one pass gathers,
record positions without reading files whole, and state that does not grow with the number of batches."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from airflow_conduit.spark import batch_pass, commits
from airflow_conduit.spark import columns as C
from airflow_conduit.spark.fates import FILTERED_ALL, NACKED, written
from airflow_conduit.spark.runner import PipelineRunner, execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, read_json_rows, write_lines

pytestmark = pytest.mark.spark


def _files_of_different_sizes(folder):
    """Three files (different sizes, so Spark reads them in an order of its own), bad lines spread out."""
    write_lines(folder, "a.json", [good(1), "{bad", good(2)])
    write_lines(folder, "b.json", [good(10 + i) if i % 4 else "{bad" for i in range(1, 13)])
    write_lines(folder, "c.json", ["{bad", good(30), good(31), good(32), good(33), "{bad"])


def test_window_indices_are_the_read_order_without_a_sort(spark, tmp_path, monkeypatch):
    """What the pass computes from its observation equals a global sort of the batch by read order."""
    _files_of_different_sizes(tmp_path / "in")
    spec = pipeline("order", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq", size=1000, threshold=1000))
    seen = {}
    original = batch_pass.BatchPass._nacked_indices

    def spy(self, metrics, nacked):
        indices = original(self, metrics, nacked)
        ordered = self.status.select(C.SEQ, NACKED).withColumn("i", F.row_number().over(Window.orderBy(C.SEQ)) - 1)
        seen["expected"] = sorted(r["i"] for r in ordered.where(F.col(NACKED)).collect())
        seen["got"] = indices
        return indices

    monkeypatch.setattr(batch_pass.BatchPass, "_nacked_indices", spy)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert len(seen["got"]) == report.totals["dlq"] == 6
    assert seen["got"] == seen["expected"]


def test_more_nacked_records_than_one_pass_gathers_all_reach_the_dlq_once(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(batch_pass, "DLQ_COLLECT_LIMIT", 2)
    _files_of_different_sizes(tmp_path / "in")
    spec = pipeline("many-bad", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq", size=1000, threshold=1000))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    dlq = read_json_rows(spark, tmp_path / "dlq")
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq) == [
        ("a.json", 2), ("b.json", 4), ("b.json", 8), ("b.json", 12), ("c.json", 1), ("c.json", 6)]
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2, *[10 + i for i in range(1, 13) if i % 4], 30, 31, 32, 33]


def test_a_batch_of_many_files_runs_in_one_task_per_core_and_keeps_record_numbers_per_file(spark, tmp_path):
    """Five files, one partition each, go through the pass in at most defaultParallelism tasks (one lake file
    each); a bad record's number is still its record number in its own file."""
    for f in range(5):
        write_lines(tmp_path / "in", f"{f}.json", [good(10 * f + i) if i != f + 1 else "{bad" for i in range(1, 8)])
    spec = pipeline("packed", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert len(report.batches) == 1
    lake_files = [p for p in (tmp_path / "out" / "batch_id=0").iterdir() if p.name.startswith("part-")]
    assert 1 <= len(lake_files) <= spark.sparkContext.defaultParallelism < 5
    dlq = read_json_rows(spark, tmp_path / "dlq")
    assert sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"]) for r in dlq) == [
        (f"{f}.json", f + 1) for f in range(5)]
    assert len(read_json_rows(spark, tmp_path / "out")) == 5 * 6


def _nodes(plan):
    """The nodes of a JVM physical plan, depth first."""
    yield plan
    children = plan.children()
    for i in range(children.size()):
        yield from _nodes(children.apply(i))


def _output_names(node) -> set[str]:
    output = node.output()
    return {output.apply(i).name() for i in range(output.size())}


def test_only_the_dlq_entry_and_the_flags_cross_into_one_task_per_core(spark, tmp_path, monkeypatch):
    """``Coalesce`` is not code-generated: every column crossing it is written out for every record. The
    wide columns a DLQ record is built from (error struct, rejected text, source) are folded into the DLQ
    entry below it, so what crosses is the destination's fields, the fate flags, the sequence number
    (nack window), the observation's inputs and the entry, NULL for every good record. The entry holds only
    what varies per record: the batch's own DLQ columns are added after the pass, on the DLQ's rows."""
    from airflow_conduit.spark import destinations

    write_lines(tmp_path / "in", "a.json", [good(1), "{bad", good(2)])
    dlq = dlq_file(tmp_path / "dlq", size=100, threshold=50)  # a nack window: its inputs are observed too
    spec = pipeline("narrow", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq)
    crossing: list[set[str]] = []
    entry_fields: list[list[str]] = []
    observed: list[list[str]] = []
    write = destinations.FileDestination.write

    def spy(self, df, batch_id):
        if self.id != "dead-letter-queue":
            plan = df._jdf.queryExecution().executedPlan()
            for metrics in (n for n in _nodes(plan) if n.nodeName() == "CollectMetrics"):
                expressions = metrics.metricExpressions()
                observed.append(sorted(expressions.apply(i).name() for i in range(expressions.size())))
            for coalesce in (n for n in _nodes(plan) if n.nodeName() == "Coalesce"):
                crossing.append(_output_names(coalesce.children().apply(0)))
                output = coalesce.output()
                attributes = [output.apply(i) for i in range(output.size())]
                entry_fields.extend(list(a.dataType().fieldNames()) for a in attributes if a.name() == batch_pass.DLQ_ENTRY)
        return write(self, df, batch_id)

    monkeypatch.setattr(destinations.FileDestination, "write", spy)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert report.totals["dlq"] == 1 and len(crossing) == 1
    internal = {name for name in crossing[0] if name.startswith(C.PREFIX)}
    # exactly: the entry, the flags, the window's two inputs; nothing per record for a pending reason (read from the entry)
    assert internal == {batch_pass.DLQ_ENTRY, NACKED, FILTERED_ALL, written(0), batch_pass.NACKED_SEQ, batch_pass.READ_PARTITION}
    # one destination: its written count is read - nacked - filtered (every record one fate), not an aggregate
    assert observed == [sorted(["read", "nacked", "filtered", "dlq", "partitions"])]
    assert report.totals["written"] == {"out": 2} and report.totals["read"] == 3
    assert len(entry_fields) == 1 and entry_fields[0][0] == "seq"
    assert not {"pipeline_id", "run_id", "batch_id", "time_of_error", "configs"} & set(entry_fields[0])
    assert {"source_id", "source_file", "source_position", "exception_class", "exception_message"} <= set(entry_fields[0])


def test_positions_are_line_numbers_in_the_file_counting_blank_lines_and_the_csv_header(spark, tmp_path):
    folder = tmp_path / "json"
    folder.mkdir()
    (folder / "gaps.json").write_text(good(1) + "\n\n" + "{bad\n" + "   \n" + good(2) + "\n" + "[1, 2]\n")
    write_lines(tmp_path / "csv", "a.csv", ["id,name,amount", "1,a,1.0", "2,b,oops", "3,c,3.0", "x,d,4.0"])
    spec = pipeline(
        "positions",
        [file_source(folder, sid="json"), file_source(tmp_path / "csv", sid="csv", fmt="csv")],
        [file_dest(tmp_path / "out")],
        dlq=dlq_file(tmp_path / "dlq"),
    )
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    got = sorted((r["source_id"], r["source_position"], r["source_split_start"], r["record"]) for r in read_json_rows(spark, tmp_path / "dlq"))
    # blank lines are not records, yet they are lines: "{bad" is the 2nd record of gaps.json on line 3, "[1, 2]"
    # the 4th on line 6 (tests/spark/test_dlq_source_lines.py checks CRLF, headers and bytes against sed)
    assert got == [("csv", 3, 0, "2,b,oops"), ("csv", 5, 0, "x,d,4.0"), ("json", 3, 0, "{bad"), ("json", 6, 0, "[1, 2]")]


def test_commit_markers_are_pruned_to_the_latest_batches(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(commits, "KEEP_BATCHES", 2)
    for f in range(4):
        write_lines(tmp_path / "in", f"{f}.json", [good(f)])
    spec = pipeline("prune", [file_source(tmp_path / "in", **{"max-files-per-trigger": 1})], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0 and len(report.batches) == 4
    for dest in ("out", "dead-letter-queue"):
        assert sorted(p.name for p in (tmp_path / "state" / "commits" / dest).iterdir()) == ["2", "3"]
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [0, 1, 2, 3]


def test_a_commit_marker_writer_killed_mid_write_leaves_a_temp_file_that_the_next_run_removes(spark, tmp_path):
    """A real SIGKILL of a process inside the marker writer (its JSON encoding blocked) leaves ``.<batch>.*.tmp``
    beside the markers; the next run deletes it and keeps every real marker."""
    import signal
    import subprocess
    import sys

    state = tmp_path / "state"
    write_lines(tmp_path / "in", "0.json", [good(0)])
    spec = pipeline("leftovers", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    assert execute(spark, spec, state_dir=state, run_id="r1")[0] == 0
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from airflow_conduit.spark.commits import CommitLog\n"
        "class Slow:\n"
        "    def __str__(self):\n"
        "        print('writing', flush=True); time.sleep(600); return ''\n"
        "import airflow_conduit.spark.commits as c\n"
        "c.utc_now_iso = Slow\n"
        f"CommitLog({str(state)!r}).mark('out', 7, rows=1, run_id='killed')\n"
    )], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=60)
    leftovers = list((state / "commits" / "out").glob(".7.*.tmp"))
    assert len(leftovers) == 1 and not (state / "commits" / "out" / "7").exists()

    write_lines(tmp_path / "in", "1.json", [good(1)])
    assert execute(spark, spec, state_dir=state, run_id="r2")[0] == 0
    assert not list((state / "commits").rglob("*.tmp"))
    assert sorted(p.name for p in (state / "commits" / "out").iterdir()) == ["0", "1"]


def test_what_a_custom_processor_cached_is_released_when_the_batch_ends(spark, tmp_path, monkeypatch):
    from spark_helpers import proc

    released = []
    monkeypatch.setattr(PipelineRunner, "_plan_batch", _spy_release(PipelineRunner._plan_batch, released))
    write_lines(tmp_path / "in", "a.json", [good(1), good(2)])
    spec = pipeline("cache", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")],
                    processors=[proc("tagger", "custom", function="conduit_test_functions:tag_or_fail")],
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert released and all(not df.is_cached for df in released)


def _spy_release(plan_batch, released):
    def spy(self, batch, ctx):
        out = plan_batch(self, batch, ctx)
        released.extend(ctx.cached)  # the runner releases these after the pass
        assert all(df.is_cached for df in ctx.cached)
        return out

    return spy


def test_a_long_chain_of_processors_plans_and_runs_without_checkpoints(spark, tmp_path):
    """Without a cut between processors the plan must still stay small enough to plan (no stack overflow)."""
    from spark_helpers import proc

    write_lines(tmp_path / "in", "a.json", [good(1), good(2), "{bad", good(3).replace('"n3"', '"{\\"x\\": 1}"')])
    chain = []
    for i in range(15):
        chain += [
            proc(f"set-{i}", "field.set", field="amount", value="amount + 1"),
            proc(f"keep-{i}", "filter", condition="id <> 2"),
            proc(f"decode-{i}", "json.decode", field="name", schema="x INT", target=f"d{i}"),
        ]
    spec = pipeline("chain", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], processors=chain,
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    out = read_json_rows(spark, tmp_path / "out")
    assert [(r["id"], r["amount"], r["d14"]["x"]) for r in out] == [(3, 3 * 1.5 + 15, 1)]
    malformed = "airflow_conduit.spark.MalformedRecordError"
    assert report.totals == {"read": 4, "filtered": 1, "dlq": 2, "written": {"out": 1},
                             "dlq_kinds": {"in": {"processor": {malformed: 1}, "source": {malformed: 1}}}}
    dlq = {r["source_position"]: r for r in read_json_rows(spark, tmp_path / "dlq")}
    assert dlq[1]["component_id"] == "decode-0" and dlq[3]["stage"] == "source"
    assert '"name":"n1"' in dlq[1]["record"].replace(" ", "")  # the record as the source read it


def test_a_log_destination_first_does_not_carry_the_pass_and_counts_stay_right(spark, tmp_path, caplog):
    from airflow_conduit.pipeline.model import DestinationSpec

    write_lines(tmp_path / "in", "a.json", [good(1), "{bad", good(2)])
    log_dest = DestinationSpec(id="console", plugin="log", settings={"level": "warn", "message": "row"})
    spec = pipeline("log-first", [file_source(tmp_path / "in")], [log_dest, file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq"))
    with caplog.at_level("WARNING", logger="airflow_conduit.spark.log.console"):
        code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert report.totals == {"read": 3, "filtered": 0, "dlq": 1, "written": {"console": 2, "out": 2},
                             "dlq_kinds": {"in": {"source": {"airflow_conduit.spark.MalformedRecordError": 1}}}}
    assert len([r for r in caplog.records if r.name == "airflow_conduit.spark.log.console"]) == 2
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 2]


def _parses_per_write(monkeypatch) -> dict[str, list[list[str]]]:
    """destination id -> for each of its writes, the ``from_json`` parses in the written plan (their types)."""
    import re

    from airflow_conduit.spark import destinations

    parses: dict[str, list[list[str]]] = {}
    write = destinations.FileDestination.write

    def spy(self, df, batch_id):
        plan = df._jdf.queryExecution().executedPlan().toString()
        parses.setdefault(self.id, []).append(re.findall(r"from_json\((\w+)\(", plan))
        return write(self, df, batch_id)

    monkeypatch.setattr(destinations.FileDestination, "write", spy)
    return parses


def test_a_short_rejected_line_gets_its_reason_in_the_pass_without_a_parse(spark, tmp_path, monkeypatch):
    """A rejected line no longer than ``parsing.short_line_limit`` gets its reason in the pass, from
    code-generated JSON functions (no ``from_json`` in the pass; the DLQ's rows need none either), and the reason still
    names the field of the wrong type and tells a malformed line from a missing field."""
    write_lines(tmp_path / "in", "a.json", [
        good(1), "{bad", '{"id": 2, "name": "b", "amount": "lots"}', '{"name": "c", "amount": 1}', "[1, 2]",
        '{"id": "five", "name": null, "amount": 1}',
    ])
    spec = pipeline("short", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    parses = _parses_per_write(monkeypatch)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert parses == {"out": [[]]}, "no parse in the pass; the DLQ is written by the driver (no Spark plan)"
    dlq = sorted(read_json_rows(spark, tmp_path / "dlq"), key=lambda r: r["source_position"])
    assert [(r["source_position"], r["exception_class"].rsplit(".", 1)[1]) for r in dlq] == [
        (2, "MalformedRecordError"), (3, "WrongTypeError"), (4, "MissingFieldError"), (5, "MalformedRecordError"),
        (6, "WrongTypeError"),
    ]
    assert "wrong type: amount (" in dlq[1]["exception_message"]
    assert "missing required field(s): id" in dlq[2]["exception_message"]
    assert "wrong type: id (" in dlq[4]["exception_message"]


def test_a_long_rejected_line_is_parsed_once_after_the_pass(spark, tmp_path, monkeypatch):
    """A rejected line that may be over a size limit (a run of 1,200 digits: ``parsing.decidable_in_the_pass``) keeps
    its reason pending through the pass. The reader's
    typed result of it rides in its pending error (which fields came out NULL), so working out the reason
    needs no typed parse: the DLQ write parses it into a map only (one ``from_json``, plus the two size-limit
    checks, which parse only lines over a limit), and the reason still names the field of the wrong type."""
    long_wrong = '{"id": 2, "name": "' + "1" * 1200 + '", "amount": "lots"}'
    write_lines(tmp_path / "in", "a.json", [good(1), "{bad", long_wrong])
    spec = pipeline("once", [file_source(tmp_path / "in")], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    parses = _parses_per_write(monkeypatch)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert parses == {"out": [[]], "dead-letter-queue": [["MapType"] * 3]}
    dlq = sorted(read_json_rows(spark, tmp_path / "dlq"), key=lambda r: r["source_position"])
    assert [r["exception_class"].rsplit(".", 1)[1] for r in dlq] == ["MalformedRecordError", "WrongTypeError"]
    assert "wrong type: amount (" in dlq[1]["exception_message"]


def test_a_wide_schema_is_planned_and_every_bad_record_gets_its_reason(spark, tmp_path):
    """24 fields: the batch's plan stays plannable (with Catalyst's constraint propagation on, planning grew
    exponentially with the fields and ran out of heap at 15) and the DLQ names the wrong-typed field."""
    extra = [f"f{i:02d}" for i in range(21)]
    schema = "id BIGINT NOT NULL, name STRING NOT NULL, amount DOUBLE, " + ", ".join(
        f"{name} {'STRING' if i % 2 else 'DOUBLE'}" for i, name in enumerate(extra))

    def line(i: int, **override) -> str:
        record = {"id": i, "name": f"n{i}", "amount": i / 2, **{n: (f"s{j}" if j % 2 else j * 1.5) for j, n in enumerate(extra)}}
        record.update(override)
        return json.dumps({k: v for k, v in record.items() if v is not None})

    write_lines(tmp_path / "in", "wide.json", [line(1), line(2, f16="sixteen"), line(3, name=None), "{bad", line(5)])
    spec = pipeline("wide", [file_source(tmp_path / "in", schema=schema)], [file_dest(tmp_path / "out")],
                    dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 5]
    reasons = {r["source_position"]: (r["exception_class"], r["exception_message"]) for r in read_json_rows(spark, tmp_path / "dlq")}
    assert sorted(reasons) == [2, 3, 4]
    assert reasons[2][0].endswith("WrongTypeError")
    assert reasons[2][1].split(": ", 1)[1].split(" (expected")[0] == "f16", reasons[2][1]
    assert reasons[3][0].endswith("MissingFieldError") and "name" in reasons[3][1]
    assert reasons[4][0].endswith("MalformedRecordError")
