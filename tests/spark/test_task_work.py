"""The work every record costs in a batch's Spark tasks, as counts from the batch's physical plan (deterministic),
never times: what crosses the parts of the plan that are not code-generated (the coalesce into one task per core,
the observation), where each column is written into every record's row."""

from __future__ import annotations

import pytest

from airflow_conduit.spark import batch_pass as batch_pass_mod
from airflow_conduit.spark import columns as C
from airflow_conduit.spark.fates import FILTERED_ALL, NACKED, written
from spark_helpers import dlq_file, file_dest, file_source, first_pass_plan, good, pipeline, proc, write_lines

pytestmark = pytest.mark.spark


def _nodes(plan):
    """The physical plan's nodes, top down."""
    out, todo = [], [plan]
    while todo:
        node = todo.pop()
        out.append(node)
        children = node.children()
        todo.extend(children.apply(i) for i in range(children.size()))
    return out


def _names(attributes) -> list[str]:
    return [attributes.apply(i).name() for i in range(attributes.size())]


@pytest.fixture(scope="module")
def observed_plan(spark, tmp_path_factory):
    """The physical plan of a batch's pass (the observed frame the first write reads) of a pipeline with a source
    processor, a filter and an ``sql`` processor, a file destination and a file DLQ with a nack window, over good
    records, a rejected line and a record of the wrong type."""
    tmp_path = tmp_path_factory.mktemp("task_work")
    write_lines(tmp_path / "in", "a.json", [good(1), "{broken", good(2), '{"id": "x", "name": "w"}', good(3)])
    spec = pipeline("tasks", [file_source(tmp_path / "in", processors=[proc("up", "field.set", field="name", value="upper(name)")])],
                    [file_dest(tmp_path / "out")],
                    processors=[proc("keep", "filter", condition="id <> 2"), proc("more", "sql", select=["*", "id * 2 AS twice"])],
                    dlq=dlq_file(tmp_path / "dlq", size=100, threshold=50))
    plan, code, report = first_pass_plan(spark, spec, tmp_path / "state")
    assert code == 0, report.error
    assert report.totals["dlq"] == 2 and report.totals["written"] == {"out": 2}
    return plan


def test_only_the_columns_read_above_it_cross_the_coalesce(observed_plan):
    """``Coalesce`` and the observation are not code-generated: every column of the rows they pass is written for
    every record. The record's error, rejected text, origin and fields as read are read only below it, where the DLQ
    entry and the fate flags are built, and the read order only by a Kafka write or an expectation: they do not
    cross it."""
    coalesce = [n for n in _nodes(observed_plan) if n.nodeName() == "Coalesce"]
    assert len(coalesce) == 1, [n.nodeName() for n in _nodes(observed_plan)]
    crossing = set(_names(coalesce[0].output()))
    fields = {"id", "name", "amount", "twice"}
    assert fields <= crossing and {NACKED, FILTERED_ALL, written(0), batch_pass_mod.DLQ_ENTRY} <= crossing, crossing
    assert not crossing & {C.RAW, C.ERROR, C.FILTERED, C.SOURCE_INDEX, C.SOURCE_ID, C.POSITION, C.SEQ}, crossing
    assert not [c for c in crossing if c.startswith(C.ORIGINAL)], crossing
    # what is left: the destination's fields, the fate flags and the observation's inputs
    assert len(crossing) == len(fields) + 3 + 3, sorted(crossing)


def _children(expression) -> list:
    children = expression.children()
    return [children.apply(i) for i in range(children.size())]


def _json_reads(expression, guarded: bool = False) -> list[bool]:
    """For each ``get_json_object`` in ``expression``: whether it is the right operand of an ``AND`` whose left operand
    is an ``IS NULL`` (short-circuited when that is false)."""
    name = expression.nodeName()
    if name == "GetJsonObject":
        return [guarded]
    if name == "And":
        left, right = _children(expression)
        return _json_reads(left, guarded) + _json_reads(right, guarded or left.nodeName() == "IsNull")
    return [found for child in _children(expression) for found in _json_reads(child, guarded)]


def test_a_rejected_line_is_read_again_only_for_the_fields_the_reader_left_null(observed_plan):
    """A rejected line's reason reads a field's JSON value (``get_json_object``, a parse of the whole line) only
    behind the test that the reader left that field NULL: a line with one wrong-typed field is read again once or
    twice, not once per field of the schema."""
    reads = []
    for node in _nodes(observed_plan):
        expressions = node.expressions()
        for i in range(expressions.size()):
            reads += _json_reads(expressions.apply(i))
    assert reads, "the pass works out a rejected line's reason with get_json_object"
    assert all(reads), f"{reads.count(False)} of {len(reads)} field reads of a rejected line are not behind the field's typed NULL"
