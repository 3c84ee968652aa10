"""Where a run is (spark/stage.py): what a failure is classified with, recorded in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_conduit
from airflow_conduit.spark.stage import RUNNER, StageTracker

SPARK_DIR = Path(airflow_conduit.__file__).parent / "spark"


def test_the_tracker_moves_between_stages_and_back_to_the_runner():
    stage = StageTracker()
    assert stage.where == RUNNER == ("runner", None, None)
    stage.at("destination", "lake", "file")
    assert stage.where == ("destination", "lake", "file")
    stage.at("dlq")
    assert stage.where == ("dlq", None, None)
    stage.reset()
    assert stage.where == RUNNER


def test_the_spark_layer_records_its_stage_only_through_the_tracker():
    """An assignment to a ``_where`` attribute (the runner's former private field) would be read by nobody:
    the failure would be reported at the wrong stage."""
    stray = [f"{path.name}:{node.lineno}" for path in sorted(SPARK_DIR.glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.Assign, ast.AnnAssign))
             for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
             if isinstance(target, ast.Attribute) and target.attr == "_where"]
    assert not stray, f"use stage.at(...) / stage.reset() instead: {stray}"
