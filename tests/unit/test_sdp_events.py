"""SDP's flow messages read into the run report's per-flow timeline (spark/sdp/events.py); pure."""

from __future__ import annotations

from airflow_conduit.spark.sdp.events import RunEvents, error_chain
from airflow_conduit.spark.sdp.launch import UnsupportedMaster, pipelines_command, remote_for

import pytest

FAILED_MESSAGE = (
    "Flow 'spark_catalog.default.events' has FAILED more than 0 times and will not be restarted.\n"
    "Error: [STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [FAILED_READ_FILE.NO_HINT] "
    "Encountered error while reading file file:///in/1.json.  SQLSTATE: KD001 SQLSTATE: XXKST")


def run_of(*messages: str) -> RunEvents:
    events = RunEvents()
    for index, message in enumerate(messages):
        events.on_message(message, f"t{index}")
    return events


def test_a_failing_stream_logs_completed_before_failed_and_counts_as_failed():
    events = run_of("Flow spark_catalog.default.events is QUEUED.", "Flow spark_catalog.default.counts is QUEUED.",
                    "Flow spark_catalog.default.events is RUNNING.", "Flow spark_catalog.default.events has COMPLETED.",
                    FAILED_MESSAGE, "Flow 'spark_catalog.default.counts' SKIPPED due to upstream failure(s).")
    assert events.failed() == ["events"] and events.skipped() == ["counts"]
    flow = events.to_dict()["events"]
    assert [entry["state"] for entry in flow["timeline"]] == ["QUEUED", "RUNNING", "COMPLETED", "FAILED"]
    assert flow["state"] == "FAILED"
    assert flow["error"]["chain"][0]["condition"] == "FAILED_READ_FILE.NO_HINT"


def test_a_flow_the_graph_cannot_resolve_is_failed_with_its_error():
    events = run_of("Failed to resolve flow: 'spark_catalog.default.customer_totals'.\nError: [UNRESOLVED_COLUMN."
                    "WITH_SUGGESTION] A column with name `amount_usd` cannot be resolved. SQLSTATE: 42703;")
    assert events.failed() == ["customer_totals"]
    assert events.flows["customer_totals"].error["chain"][0] == {
        "condition": "UNRESOLVED_COLUMN.WITH_SUGGESTION", "sqlstate": "42703",
        "message": "A column with name `amount_usd` cannot be resolved."}


def test_a_completed_run():
    events = run_of("Flow spark_catalog.default.a is RUNNING.", "Flow spark_catalog.default.a has COMPLETED.",
                    "Run is COMPLETED.")
    assert events.run_state == "COMPLETED" and events.failed() == [] and events.flows["a"].state == "COMPLETED"


def test_error_chain_keeps_nested_causes_with_brackets_in_their_messages():
    chain = error_chain("[FAILED_READ_FILE.NO_HINT] Encountered error. SQLSTATE: KD001\nCaused by: x.SparkException: "
                        "[MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION] Malformed records: [null,null]. SQLSTATE: 22023")
    assert [(c["condition"], c["sqlstate"]) for c in chain] == [
        ("FAILED_READ_FILE.NO_HINT", "KD001"), ("MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION", "22023")]


def test_the_command_is_spark_pipelines_with_the_master_as_remote():
    argv = ["/venv/bin/spark-submit", "--master", "local[2]", "--conf", "a=b", "--name", "conduit-r1",
            "/pkg/runner.py", "--spec", "p.yml", "--run-id", "r1"]
    assert pipelines_command(argv, "/pkg/runner.py", ["--spec", "p.yml", "--run-id", "r1"]) == [
        "/venv/bin/spark-class", "org.apache.spark.deploy.SparkPipelines", "/pkg/runner.py", "--conf", "a=b",
        "--remote", "local[2]", "--spec", "p.yml", "--run-id", "r1"]


def test_a_master_sdp_cannot_run_on_is_refused_naming_it():
    assert remote_for("sc://connect:15002") == "sc://connect:15002"
    with pytest.raises(UnsupportedMaster, match="yarn"):
        remote_for("yarn")


def test_column_names_of_a_ddl_schema_with_nested_types():
    from airflow_conduit.spark.sdp.expectations import column_names

    assert column_names("id INT, tags ARRAY<STRING>, m MAP<STRING, INT>, s STRUCT<a: INT, b: DECIMAL(10, 2)>") == [
        "id", "tags", "m", "s"]


def test_expectation_counts_come_from_the_flows_observation():
    from airflow_conduit.spark.sdp.expectations import counts_from_observed

    table = counts_from_observed("orders", {"conduit_expectations|table|orders": {
        "rows": 6, "written": 3, "dropped": 1, "quarantine:id_present": 1, "drop:amount_positive": 1, "fail:limit": 0}})
    assert (table.kind, table.target, table.read, table.written, table.dropped) == ("table", "orders", 6, 3, 1)
    assert table.rules["id_present"] == {"action": "quarantine", "passed": 5, "failed": 1}
    assert table.rules["limit"] == {"action": "fail", "passed": 6, "failed": 0}
    quarantine = counts_from_observed("orders_quarantine", {"conduit_expectations|quarantine|orders": {"rows": 2}})
    assert (quarantine.target, quarantine.quarantined) == ("orders_quarantine", 2)
    assert counts_from_observed("other", {"someone_elses": {"rows": 1}}) is None


def test_an_unknown_action_is_refused_naming_the_rule():
    from airflow_conduit.spark.sdp.expectations import expect

    with pytest.raises(ValueError, match="'amount_positive'.*warn, drop, quarantine, fail"):
        expect("amount_positive", "amount > 0", "reject")


def test_the_local_backend_launches_an_sdp_run_as_spark_pipelines():
    from airflow_conduit.hooks.backends.local import LocalBackend

    backend = LocalBackend(master="local[2]", launch="spark-pipelines")
    cmd = backend.build_command("/pkg/runner.py", "/tmp/a.zip", ["--spec", "p.yml"], {"a": "b"}, "conduit-r1")
    assert cmd[0].endswith("spark-class") and cmd[1:3] == ["org.apache.spark.deploy.SparkPipelines", "/pkg/runner.py"]
    assert cmd[cmd.index("--remote") + 1] == "local[2]" and "--master" not in cmd and "--name" not in cmd
    assert cmd[-2:] == ["--spec", "p.yml"] and "--py-files" in cmd
    assert callable(backend.launch)  # the launch option does not shadow the backend's launch()
