"""OpenLineage end to end: the orders reference DAG under dag.test() with Airflow's OpenLineage provider on a file
transport, and the Spark listener on the file transport beside it (``<file>.spark``): no server.

One DAG run with one injected transient failure (the driver killed right after the lake committed batch 1, so
the first Spark application has started and reported) is shared by the tests of a task with two Spark runs; a
fatal pipeline (failed before its Spark session) gives the FAIL event. docs/lineage.md.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from conftest import load_reference_dag, run_test_dag

pytestmark = pytest.mark.integration

DAG_ID = "conduit_orders_available_now"
TASK_JOB = f"{DAG_ID}.orders_pipeline"
LINEAGE_ENV = ("AIRFLOW__OPENLINEAGE__TRANSPORT", "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO",
               "AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO", "AIRFLOW__OPENLINEAGE__NAMESPACE")


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _argv_and_conf(hook, spec_path: str) -> tuple[list[str], dict]:
    """What the local backend would submit for ``hook``: the spark-submit argv and the Spark settings."""
    from airflow_conduit.spark.connector_jars import connectors_of_spec_file

    backend = hook.backend
    conf = backend._spark_conf(4040, connectors_of_spec_file(spec_path))
    args = ["--spec", spec_path, "--run-id", "r-s01", "--state-dir", "/tmp/state"]
    return backend.build_command("/app/entrypoint.py", "/app/deps.zip", args, conf, "conduit-r-s01"), conf


def test_with_lineage_off_the_argv_and_spark_conf_are_the_ones_without_lineage(airflow_db, orders, monkeypatch):
    """Lineage off ([openlineage] disabled, or no provider configured): the operator's hook submits byte for byte
    what a hook given the task's own options submits; on, the same plus only the listener's settings."""
    from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook
    from airflow_conduit.lineage.spark_listener import LISTENER_CLASS, lineage_spark_conf
    from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator

    spec_path = str(orders / "pipeline.yaml")
    spark_conf = {"spark.sql.shuffle.partitions": "2", "spark.driver.extraClassPath": "/opt/mine.jar"}
    options = {"env": {"A": "1"}}
    operator = RecoveringSparkPipelineOperator(task_id="p", spec=spec_path, state_dir=str(orders / "state"),
                                               conn_id="conduit_local", backend_options=options, spark_conf=spark_conf)
    without_lineage = _argv_and_conf(SparkPipelineHook("conduit_local", backend_options={**options, "conf": spark_conf}), spec_path)
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "file", "log_file_path": "/tmp/ol.jsonl"}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO", "true")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "true")
    hook = operator.get_hook()
    assert hook.backend_options == {**options, "conf": spark_conf}
    assert _argv_and_conf(hook, spec_path) == without_lineage

    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "false")  # on: the listener and its settings, nothing else
    on = lineage_spark_conf(spark_conf, None, app_name="conduit.orders")
    added = {key: value for key, value in on.items() if spark_conf.get(key) != value}
    assert added["spark.extraListeners"] == LISTENER_CLASS
    assert added["spark.driver.extraClassPath"].startswith("/opt/mine.jar" + os.pathsep)
    assert added["spark.openlineage.transport.location"] == "/tmp/ol.jsonl.spark"
    assert set(added) == {"spark.extraListeners", "spark.driver.extraClassPath", "spark.openlineage.transport.type",
                          "spark.openlineage.transport.location", "spark.openlineage.namespace", "spark.openlineage.appName"}


@pytest.fixture(scope="module")
def lineage_file(airflow_db):
    """The provider configured to a file transport with both Spark injections on, for this module only; the
    provider's listener registered with the task runner's listeners (the plugin registers it only when lineage was
    on when Airflow first loaded its plugins in this process)."""
    from airflow.providers.openlineage.plugins.listener import OpenLineageListener
    from airflow.sdk.listener import get_listener_manager

    folder = Path(tempfile.mkdtemp(prefix="conduit-lineage-"))
    events = folder / "events.jsonl"
    saved = {name: os.environ.get(name) for name in LINEAGE_ENV}
    os.environ.update({
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events), "append": True}),
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "true",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO": "true",
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "conduit-tests",
    })
    manager = get_listener_manager()
    present = [p for p in manager.pm.get_plugins() if isinstance(p, OpenLineageListener)]
    for listener in present:
        listener.adapter._client = None  # made again from the configuration above
    added = None if present else OpenLineageListener()
    if added is not None:
        manager.add_listener(added)
    yield events
    if added is not None:
        manager.pm.unregister(added)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def task_events(events: Path, run_id: str | None = None) -> list[dict]:
    found = [e for e in read_events(events) if e["job"]["name"] == TASK_JOB]
    return [e for e in found if run_id is None or e["run"]["runId"] == run_id]


def children_of(events: Path, parent_run_id: str) -> list[dict]:
    """The Spark listener's events whose parent run is ``parent_run_id`` (the applications' own events)."""
    return [e for e in read_events(Path(str(events) + ".spark"))
            if ((e["run"].get("facets") or {}).get("parent") or {}).get("run", {}).get("runId") == parent_run_id]


@pytest.fixture(scope="module")
def restarted_run(lineage_file, tmp_path_factory):
    """The orders reference DAG, its driver killed once after the lake committed batch 1 (transient 1410)."""
    import shutil

    from conftest import REPO

    orders = tmp_path_factory.mktemp("lineage") / "orders"
    shutil.copytree(REPO / "examples" / "orders", orders, ignore=shutil.ignore_patterns("out", "state*"))
    before = len(read_events(lineage_file))
    dag = load_reference_dag("conduit_orders_available_now.py")
    dr = dag.test(run_conf={"spec": str(orders / "pipeline.yaml"), "state_dir": str(orders / "state"),
                            "faults": {"crash_after_destination": {"destination": "lake", "batch": 1}}})
    assert dr.state == "success"
    ours = [e for e in read_events(lineage_file)[before:] if e["job"]["name"] == TASK_JOB]
    run_ids = {e["run"]["runId"] for e in ours}
    assert len(run_ids) == 1, f"one task run expected, got {run_ids}"
    return {"orders": orders, "state_dir": orders / "state", "events": lineage_file, "run_id": run_ids.pop(), "dag_run": dr}


def _reports(state_dir: Path) -> list[dict]:
    from airflow_conduit.lineage.datasets import task_run_ids

    recovery = json.loads((state_dir / "recovery.json").read_text())
    return [json.loads((state_dir / "runs" / run_id / "report.json").read_text()) for run_id in task_run_ids(recovery)
            if (state_dir / "runs" / run_id / "report.json").exists()]


def test_the_task_reports_start_and_complete_with_the_specs_datasets(restarted_run):
    events = task_events(restarted_run["events"], restarted_run["run_id"])
    kinds = [e["eventType"] for e in events]
    assert kinds[0] == "START" and kinds[-1] == "COMPLETE" and "FAIL" not in kinds, kinds
    orders = restarted_run["orders"]
    complete = events[-1]
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [("file", str(orders / "data" / "in"))]
    assert [(d["namespace"], d["name"]) for d in complete["outputs"]] == [
        ("file", str(orders / "out" / "lake")), ("file", str(orders / "out" / "dlq"))]  # the destination, the DLQ
    start = events[0]
    assert start["inputs"][0]["name"] == complete["inputs"][0]["name"]  # known from the spec before Spark runs
    assert [d["name"] for d in start["outputs"]] == [d["name"] for d in complete["outputs"]]


def test_the_dlq_facet_counts_are_the_run_reports(restarted_run):
    from airflow_conduit.runs.report import totals_over_runs

    complete = task_events(restarted_run["events"], restarted_run["run_id"])[-1]
    reports = _reports(restarted_run["state_dir"])
    totals = totals_over_runs(reports)
    expected = json.loads((restarted_run["orders"] / "expected.json").read_text())
    facet = complete["inputs"][0]["inputFacets"]["conduit_deadLetterQueue"]
    assert facet["records"] == totals["dlq"] == len(expected["dlq"])
    assert sum(n for classes in facet["byStage"].values() for n in classes.values()) == facet["records"]
    by_stage = {stage: sum(classes.values()) for stage, classes in facet["byStage"].items()}
    assert by_stage == {stage: sum(1 for d in expected["dlq"] if d["stage"] == stage) for stage in by_stage}
    assert facet["deadLetterQueue"] == {"namespace": "file", "name": str(restarted_run["orders"] / "out" / "dlq")}
    assert complete["inputs"][0]["inputFacets"]["dataQualityMetrics"]["rowCount"] == totals["read"]
    outputs = {d["name"]: d["outputFacets"]["outputStatistics"]["rowCount"] for d in complete["outputs"]}
    assert outputs == {str(restarted_run["orders"] / "out" / "lake"): totals["written"]["lake"],
                       str(restarted_run["orders"] / "out" / "dlq"): totals["dlq"]}
    run_totals = complete["run"]["facets"]["conduit_totals"]
    assert (run_totals["read"], run_totals["filtered"], run_totals["sparkRuns"]) == (totals["read"], totals["filtered"], 2)


def test_restarts_of_one_task_try_are_spark_runs_under_one_parent(restarted_run):
    """Two Spark applications (the killed one, the one that finished), each a child of the one task run."""
    children = children_of(restarted_run["events"], restarted_run["run_id"])
    assert len({e["run"]["runId"] for e in children}) == 2
    parents = {json.dumps(e["run"]["facets"]["parent"]["job"], sort_keys=True) for e in children}
    assert parents == {json.dumps({"namespace": "conduit-tests", "name": TASK_JOB}, sort_keys=True)}
    assert len(_reports(restarted_run["state_dir"])) == 2


def test_a_fatal_pipeline_gives_a_fail_event_with_its_classification(lineage_file, orders):
    before = len(read_events(lineage_file))
    dr = run_test_dag("lineage_fatal", spec=str(orders / "pipeline.yaml"), state_dir=str(orders / "state"),
                      poll_interval=0.5, backend_options={"faults": {"fatal": True}})
    assert dr.state == "failed"
    ours = [e for e in read_events(lineage_file)[before:] if e["job"]["name"] == "lineage_fatal.pipeline"]
    assert [e["eventType"] for e in ours][-1] == "FAIL", [e["eventType"] for e in ours]
    facets = ours[-1]["run"]["facets"]
    failure = facets["conduit_failure"]
    assert (failure["fatal"], failure["code"], failure["codeName"]) == (True, 2900, "INJECTED_FATAL")
    assert "fatal 2900" in facets["errorMessage"]["message"]  # the provider's, from the task's exception
    assert [d["name"] for d in ours[-1]["outputs"]] == [str(orders / "out" / "lake"), str(orders / "out" / "dlq")]
