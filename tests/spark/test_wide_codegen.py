"""Wide records get whole-stage code generation in a batch's pass (deterministic: the pass's physical plan), while
the caller's session keeps its own ``spark.sql.codegen.maxFields``."""

from __future__ import annotations

import json

import pytest

from spark_helpers import dlq_file, file_dest, file_source, first_pass_plan, pipeline, proc, write_lines

pytestmark = pytest.mark.spark

FIELDS = 100  # over Spark's default spark.sql.codegen.maxFields (100, nested fields counted)
KEY = "spark.sql.codegen.maxFields"


def _schema() -> str:
    kinds = ("DOUBLE", "STRING", "BIGINT", "TIMESTAMP")
    return ", ".join(["id BIGINT NOT NULL", "name STRING NOT NULL", "addr STRUCT<street: STRING, city: STRING>",
                      *(f"f{j:03d} {kinds[j % len(kinds)]}" for j in range(FIELDS - 3))])


def _line(i: int) -> str:
    values = {"DOUBLE": i * 1.5, "STRING": f"s{i}", "BIGINT": i, "TIMESTAMP": "2026-11-01T10:00:00Z"}
    kinds = ("DOUBLE", "STRING", "BIGINT", "TIMESTAMP")
    record = {"id": i, "name": f"n{i}", "addr": {"street": "Main", "city": "c"},
              **{f"f{j:03d}": values[kinds[j % len(kinds)]] for j in range(FIELDS - 3)}}
    return json.dumps(record)


def _nodes(plan):
    """The physical plan's nodes, each with whether a whole-stage-codegen node is above it."""
    out, todo = [], [(plan, False)]
    while todo:
        node, generated = todo.pop()
        out.append((node, generated))
        generated = generated or node.nodeName().startswith("WholeStageCodegen")
        if node.nodeName() == "InputAdapter":  # the input of a code-generated stage: below it, not generated
            generated = False
        children = node.children()
        todo.extend((children.apply(i), generated) for i in range(children.size()))
    return out


def _pass_plan(spark, tmp_path):
    """The executed physical plan of the first batch's pass at ``FIELDS`` fields (good records, a rejected line and a
    record of the wrong type), with an ``sql`` processor, a file destination and a file DLQ with a nack window."""
    write_lines(tmp_path / "in", "a.json", [_line(1), "{broken", _line(2), json.dumps({"id": "x", "name": "w"}), _line(3)])
    spec = pipeline("wide", [file_source(tmp_path / "in", schema=_schema())], [file_dest(tmp_path / "out")],
                    processors=[proc("more", "sql", select=["*", "id * 2 AS twice"])],
                    dlq=dlq_file(tmp_path / "dlq", size=100, threshold=50))
    plan, code, report = first_pass_plan(spark, spec, tmp_path / "state")
    assert code == 0, report.error
    assert report.totals["dlq"] == 2 and report.totals["written"] == {"out": 3}
    return plan


def test_a_wide_records_projections_are_code_generated_in_one_stage(spark, tmp_path):
    """At 100 fields every projection of the pass (the record, its fates, the observation's inputs) is in a
    whole-stage-codegen stage below the coalesce: one loop that writes each record into one row, not one row per
    projection. With Spark's default maxFields none of them is."""
    assert spark.conf.get(KEY, None) is None
    nodes = _nodes(_pass_plan(spark, tmp_path))
    names = [n.nodeName() for n, _ in nodes]
    projects = [generated for node, generated in nodes if node.nodeName() == "Project"]
    assert len(projects) >= 2 and all(projects), names
    assert sum(name.startswith("WholeStageCodegen") for name in names) == 1, names
    assert spark.conf.get(KEY, None) is None  # the caller's session as it was


def test_a_users_max_fields_is_kept(spark, tmp_path):
    """A user who set spark.sql.codegen.maxFields keeps it: at Spark's default, the wide pass is not code-generated."""
    spark.conf.set(KEY, "100")
    try:
        nodes = _nodes(_pass_plan(spark, tmp_path))
        assert spark.conf.get(KEY) == "100"
    finally:
        spark.conf.unset(KEY)
    assert not any(generated for node, generated in nodes if node.nodeName() == "Project"), [n.nodeName() for n, _ in nodes]
