"""The example pipeline (examples/orders/) loaded by the real spec loader and run: the outcome it documents."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from airflow_conduit.pipeline import load_pipeline
from airflow_conduit.spark.runner import execute
from spark_helpers import read_json_rows

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders"


@pytest.mark.skipif(not (EXAMPLE / "expected.json").exists(), reason="examples/orders not present")
def test_example_pipeline_produces_its_expected_outcome(spark, tmp_path):
    folder = tmp_path / "orders"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("out", "state"))
    for i, path in enumerate(sorted((folder / "data" / "in").iterdir())):  # file order = name order
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    expected = json.loads((folder / "expected.json").read_text())
    spec = load_pipeline(str(folder / "pipeline.yaml"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error

    lake = [r.asDict(recursive=True) for r in spark.read.parquet(str(folder / "out" / "lake")).collect()]
    assert sorted(r["id"] for r in lake) == expected["written_ids"]
    assert [r["id"] for r in lake if r["currency"] == "EUR" and r["id"] in expected["currency_defaulted_ids"]] == \
        expected["currency_defaulted_ids"]
    dlq = read_json_rows(spark, folder / "out" / "dlq")
    got = sorted((r["source_file"].rsplit("/", 1)[1], r["source_position"], r["stage"], r["component_id"]) for r in dlq)
    want = sorted((d["file"], d["line"], d["stage"], d["component_id"]) for d in expected["dlq"])
    assert got == want
    totals = report.totals
    assert totals["read"] == expected["input_lines"]
    assert totals["filtered"] == len(expected["filtered_ids"])
    assert totals["read"] == totals["dlq"] + totals["filtered"] + totals["written"]["lake"]
