"""Wide records: what the runner builds per run and per batch does not grow in JVM round trips with the schema,
and the reason a long rejected line gets after the pass is the reason a short one gets in it."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
import py4j.clientserver

from airflow_conduit.spark import columns as C
from airflow_conduit.spark import dlq as dlq_mod
from airflow_conduit.spark import sources as sources_mod
from airflow_conduit.spark import runner as runner_mod
from airflow_conduit.spark.runner import execute
from airflow_conduit.spark.sources import plan_source
from spark_helpers import dlq_file, file_dest, file_source, pipeline, proc, read_json_rows, write_lines

pytestmark = pytest.mark.spark

PAD = "0" * 1200  # a string value that may be a number over the parser's limit (parsing.decidable_in_the_pass): its reason is pending


class Py4JCalls:
    """Counts the Py4J commands this thread sends to the JVM (every one is a round trip)."""

    def __init__(self, monkeypatch):
        self.count = 0
        self.thread = threading.get_ident()
        send = py4j.clientserver.ClientServerConnection.send_command

        def counting(connection, command):
            if threading.get_ident() == self.thread:
                self.count += 1
            return send(connection, command)

        monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)


def _schema(fields: int) -> str:
    kinds = ("DOUBLE", "STRING", "BIGINT", "TIMESTAMP")
    return ", ".join(["id BIGINT NOT NULL", "name STRING NOT NULL",
                      *(f"f{j:03d} {kinds[j % len(kinds)]}" for j in range(fields - 2))])


def _pending_reason_calls(spark, tmp_path, fields: int, monkeypatch) -> int:
    spec = pipeline(f"w{fields}", [file_source(tmp_path / f"in{fields}", schema=_schema(fields))],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    plans = [plan_source(spark, spec.sources[0], 0, trigger_seconds=0.0, mode=spec.mode)]
    reasons = dlq_mod.PendingReasons(spec, plans)
    calls = Py4JCalls(monkeypatch)
    reasons._reasons  # noqa: B018 - cached_property: built here, once per run
    return calls.count


def test_the_pending_reason_is_built_in_as_many_jvm_round_trips_at_any_width(spark, tmp_path, monkeypatch):
    """The reason of a long rejected line names every field it checks: built from Column calls it took a few dozen
    round trips per field (about 4,000 at 100 fields, at the batch's first rejected long line); as one SQL
    expression its count does not depend on the width."""
    _pending_reason_calls(spark, tmp_path / "first", 10, monkeypatch)  # Py4J's first lookups of a class, whenever they come
    narrow = _pending_reason_calls(spark, tmp_path, 10, monkeypatch)
    wide = _pending_reason_calls(spark, tmp_path, 100, monkeypatch)
    assert wide == narrow, (narrow, wide)
    assert wide < 200, wide  # the DLQ columns around it: a constant hundred or so


def test_a_long_rejected_line_gets_the_reason_a_short_one_gets(spark, tmp_path):
    """Each kind of rejected line, short (reason in the pass) and long (reason pending, worked out after the pass),
    and each replayed from the DLQ: the DLQ rows' classes and messages are the same. The field names
    need quoting (a quote, a backslash): such a schema's reasons are all pending, and they name the fields exactly."""
    schema = "id BIGINT NOT NULL, name STRING NOT NULL, amount DOUBLE, pad STRING"
    kinds = {
        "wrong type": {"id": 1, "name": "a", "amount": "lots"},
        "two wrong types": {"id": "one", "name": "a", "amount": "lots"},
        "missing key": {"name": "a", "amount": "lots"},
        "null key": {"id": None, "name": "a", "amount": "lots"},
    }
    lines = []
    for record in kinds.values():
        lines.append(json.dumps(record))
        lines.append(json.dumps(dict(record, pad=PAD)))
    lines.append("{bad")
    lines.append('{"id": 9, "name": "' + PAD + '", "amount": 1.0')  # malformed, long
    write_lines(tmp_path / "in", "a.json", lines)
    odd = "id BIGINT NOT NULL, `it's` STRING NOT NULL, `back\\slash` DOUBLE"
    write_lines(tmp_path / "odd", "b.json", [json.dumps({"id": 1, "back\\slash": "no"}),
                                              json.dumps({"id": 2, "it's": "x", "back\\slash": "no"})])
    spec = pipeline("reasons", [file_source(tmp_path / "in", schema=schema), file_source(tmp_path / "odd", sid="odd", schema=odd)],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    rows = read_json_rows(spark, tmp_path / "dlq")
    found = {(r["source_id"], r["source_position"]): (r["exception_class"].rsplit(".", 1)[1], r["exception_message"]) for r in rows}
    for k, kind in enumerate(kinds):
        short, long = found[("in", 2 * k + 1)], found[("in", 2 * k + 2)]
        assert short == long, (kind, short, long)
    malformed = 2 * len(kinds) + 1
    assert found[("in", malformed)] == found[("in", malformed + 1)] and found[("in", malformed)][0] == "MalformedRecordError"
    assert found[("in", 1)][1].startswith("record has field(s) of the wrong type: amount (expected id bigint")
    assert found[("in", 5)] == ("MissingFieldError", "record is missing required field(s): id")
    assert found[("odd", 1)] == ("MissingFieldError", "record is missing required field(s): it's")
    assert found[("odd", 2)][0] == "WrongTypeError"
    assert found[("odd", 2)][1].startswith("record has field(s) of the wrong type: back\\slash (expected")

    # a DLQ replay parses the same lines again (a generator's records: parsing.json_error without a pending reason)
    replay = dataclasses.replace(plan_source(spark, spec.sources[0], 0, trigger_seconds=0.0, mode=spec.mode), parser="generator")
    payloads = spark.createDataFrame([("in", 0, i + 1, line) for i, line in enumerate(lines)],
                                     f"{C.SOURCE_ID} string, {C.SOURCE_INDEX} int, {C.POSITION} long, {C.RAW} string")
    replayed = payloads.selectExpr(*sources_mod._record_columns(replay, keep_originals=False, seq=f"0 AS {C.SEQ}"))
    again = {(r[0], r[1]): (r[2].rsplit(".", 1)[1], r[3]) for r in replayed.selectExpr(
        C.SOURCE_ID, C.POSITION, f"{C.ERROR}.exception_class", f"{C.ERROR}.message").collect()}
    assert again == {key: reason for key, reason in found.items() if key[0] == "in"}


def test_a_line_with_a_control_character_in_a_string_is_malformed_short_or_long(spark, tmp_path):
    """The reader rejects a raw control character inside a string; the JSON functions the pass reads a rejected line
    with accept it, so from them such a line would look like one of the wrong type. It is explained after the pass
    (``parsing.decidable_in_the_pass``), short or long, as the reader saw it: malformed."""
    tab = '{"id": 1, "name": "a\tb", "amount": 1.0}'
    long_tab = '{"id": 2, "name": "a\tb", "amount": 2.0, "pad": "' + "x" * 1200 + '"}'
    assert "\t" in tab and "\\t" not in tab
    write_lines(tmp_path / "in", "a.json", [tab, long_tab, json.dumps({"id": 3, "name": "c", "amount": 3.0})])
    spec = pipeline("control", [file_source(tmp_path / "in", schema="id BIGINT NOT NULL, name STRING NOT NULL, amount DOUBLE, pad STRING")],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    rows = read_json_rows(spark, tmp_path / "dlq")
    assert sorted((r["source_position"], r["exception_class"].rsplit(".", 1)[1], r["exception_message"]) for r in rows) == [
        (1, "MalformedRecordError", "malformed JSON record: not a JSON object"),
        (2, "MalformedRecordError", "malformed JSON record: not a JSON object"),
    ]
    assert report.totals["written"] == {"out": 1}


def _round_trips_per_batch(spark, tmp_path, fields: int, monkeypatch) -> list[int]:
    """Run a pipeline of ``fields`` fields (an ``sql`` processor, a file destination, short bad lines) over 3 batches;
    the Py4J round trips of each batch's own thread (planning, bookkeeping; the JVM's own work is not counted)."""
    folder = tmp_path / f"in{fields}"
    for f in range(3):
        lines = [json.dumps({"id": f * 10 + i, "name": f"n{i}", **{f"f{j:03d}": None for j in range(fields - 2)}})
                 for i in range(5)]
        write_lines(folder, f"{f}.json", [*lines, "{bad", json.dumps({"id": "x", "name": "y"})])
    spec = pipeline(f"w{fields}", [file_source(folder, schema=_schema(fields), **{"max-files-per-trigger": 1})],
                    [file_dest(tmp_path / f"out{fields}")], processors=[proc("all", "sql", select=["*"])],
                    dlq=dlq_file(tmp_path / f"dlq{fields}"))
    counts: list[int] = []
    mine = threading.local()
    send = py4j.clientserver.ClientServerConnection.send_command

    def counting(connection, command):
        if getattr(mine, "batch", False):
            counts[-1] += 1
        return send(connection, command)

    process = runner_mod.PipelineRunner._process_batch

    def batch(self, df, batch_id):
        counts.append(0)
        mine.batch = True
        try:
            return process(self, df, batch_id)
        finally:
            mine.batch = False

    with monkeypatch.context() as patch:
        patch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)
        patch.setattr(runner_mod.PipelineRunner, "_process_batch", batch)
        code, report = execute(spark, spec, state_dir=tmp_path / f"state{fields}", run_id="r1")
    assert code == 0, report.error
    assert report.totals["dlq"] == 6 and report.totals["written"] == {"out": 15}
    return counts


def test_a_batch_plans_in_as_many_round_trips_at_100_fields_as_at_10(spark, tmp_path, monkeypatch):
    """A later batch (the run's columns built) sends the JVM what it sent at 10 fields, within a bound far below
    one round trip per field: the ``sql`` processor's select list and the destination's rows go as SQL text in
    one piece (``columns.jvm_strings``), the other select lists as JVM Seqs built once per run."""
    narrow = _round_trips_per_batch(spark, tmp_path, 10, monkeypatch)
    wide = _round_trips_per_batch(spark, tmp_path, 100, monkeypatch)
    assert len(narrow) == len(wide) == 3
    assert wide[1] - narrow[1] <= 10 and wide[2] - narrow[2] <= 10, (narrow, wide)


def _error_nodes(spark, fields: int) -> int:
    """Expression nodes of a JSON source's error column (its reason worked out in the pass), as Spark analyses it."""
    from pyspark.sql import functions as F

    from airflow_conduit.spark import parsing

    schema = parsing.parse_schema(_schema(fields))
    frame = spark.createDataFrame([], parsing.reader_schema(schema))
    text = C.quote(parsing.CORRUPT)
    error = F.expr(parsing.json_error(text, C.quote, f"({text} IS NOT NULL)", schema, what="record", defer_reason=True,
                                      stage="source", component_id="in", component_type="file"))
    analysed = frame.select(error.alias("error"))._jdf.queryExecution().analyzed()
    return len(analysed.expressions().head().treeString().splitlines())


# Expression nodes per field of the error column, which every plan of a batch analyses and optimises: the field's
# typed-NULL flag (5), its JSON value read by path (3) and its wrong-type test (6); 16 with a coalesce around each
# test (a NULL condition of a CASE WHEN counts as FALSE already).
ERROR_NODES_PER_FIELD = 14


def test_a_json_sources_error_column_has_a_bounded_number_of_expressions_per_field(spark):
    narrow, wide = _error_nodes(spark, 10), _error_nodes(spark, 50)
    assert (wide - narrow) / 40 <= ERROR_NODES_PER_FIELD, (narrow, wide)


def _plan_ahead_round_trips(spark, tmp_path, fields: int, monkeypatch) -> int:
    """The Py4J round trips of building the first batch's plan ahead of it (``conduit-plan-ahead``'s thread) and of
    reading the stream (``sources.read_stream``), in a run of ``fields`` fields (py4j's GC releases not counted)."""
    from py4j.protocol import MEMORY_COMMAND_NAME, MEMORY_DEL_SUBCOMMAND_NAME

    release = MEMORY_COMMAND_NAME + MEMORY_DEL_SUBCOMMAND_NAME
    folder = tmp_path / f"ahead{fields}"
    lines = [json.dumps({"id": i, "name": f"n{i}", **{f"f{j:03d}": None for j in range(fields - 2)}}) for i in range(3)]
    write_lines(folder, "0.json", [*lines, "{bad"])
    spec = pipeline(f"a{fields}", [file_source(folder, schema=_schema(fields))], [file_dest(tmp_path / f"aout{fields}")],
                    processors=[proc("all", "sql", select=["*"])], dlq=dlq_file(tmp_path / f"adlq{fields}"))
    count = 0
    reading = threading.local()
    send = py4j.clientserver.ClientServerConnection.send_command
    read_stream = runner_mod.read_stream
    ahead = []

    def counting(connection, command):
        nonlocal count
        if (threading.current_thread().name == "conduit-plan-ahead" or getattr(reading, "on", False)) and not command.startswith(release):
            count += 1
        return send(connection, command)

    def counted_read(*args, **kwargs):
        reading.on = True
        try:
            return read_stream(*args, **kwargs)
        finally:
            reading.on = False

    plan_ahead = runner_mod.PipelineRunner._plan_ahead

    def noted_plan_ahead(self, plan, stand_in):
        ahead.append(fields)
        return plan_ahead(self, plan, stand_in)

    with monkeypatch.context() as patch:
        patch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)
        patch.setattr(runner_mod, "read_stream", counted_read)
        patch.setattr(runner_mod.PipelineRunner, "_plan_ahead", noted_plan_ahead)
        code, report = execute(spark, spec, state_dir=tmp_path / f"astate{fields}", run_id="r1")
    assert code == 0, report.error
    assert ahead == [fields] and report.totals["dlq"] == 1  # the plan was built ahead, and the run did its work
    return count


def test_the_first_batchs_plan_is_built_ahead_in_as_many_round_trips_at_100_fields_as_at_10(spark, tmp_path, monkeypatch):
    """A JSON file source's record columns (error, fields as read, fields), the stream's select lists and the pass's
    select lists go to the JVM as SQL text, one list a round trip (``columns.jvm_strings``): the plan built ahead of
    the first batch does not cost more round trips with the schema's width (built from Column calls it took over
    2,000 more at 100 fields than at 10)."""
    _plan_ahead_round_trips(spark, tmp_path / "first", 10, monkeypatch)  # Py4J's first lookups of a class, whenever they come
    narrow = _plan_ahead_round_trips(spark, tmp_path, 10, monkeypatch)
    wide = _plan_ahead_round_trips(spark, tmp_path, 100, monkeypatch)
    assert wide - narrow <= 20, (narrow, wide)
