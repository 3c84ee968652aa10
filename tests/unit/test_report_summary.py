"""What a run report puts into the trigger's event (and so into XCom): expectation counts per batch, replay totals."""

from __future__ import annotations

from airflow_conduit.runs.report import RunReport, replay_totals_text
from airflow_conduit.triggers.pipeline import report_summary


def test_per_rule_counts_of_each_batch_and_in_total_travel_in_the_event():
    report = RunReport(pipeline_id="p", run_id="r")
    report.add_batch(0, read=3, filtered=0, dlq=0, written={"lake": 3})  # before the rules existed: no entry
    report.add_batch(1, read=4, filtered=0, dlq=1, written={"lake": 3})
    report.add_expectations({"quality": {"positive": {"action": "drop", "passed": 3, "failed": 1}}})
    summary = report_summary(RunReport.from_dict(report.to_dict()))
    assert summary["expectations_by_batch"] == [
        {"batch_id": 1, "expectations": {"quality": {"positive": {"action": "drop", "passed": 3, "failed": 1}}}}]
    assert summary["totals"]["expectations"] == {"quality": {"positive": {"action": "drop", "passed": 3, "failed": 1}}}
    assert "replay" not in summary and "replay" not in report.to_dict()


def test_a_replay_reports_its_totals_and_a_pipeline_without_rules_has_no_rule_counts():
    report = RunReport(pipeline_id="p", run_id="r")
    report.replay = {"replay": 2, "batch_id": -2, "dry_run": False, "resumed": False, "replayed": 5, "passed": 4,
                     "passing": {"lake": 4}, "filtered": 0, "still_failing": 1, "skipped_already_replayed": 3}
    summary = report_summary(RunReport.from_dict(report.to_dict()))
    assert summary["replay"] == report.replay and "expectations_by_batch" not in summary
    assert replay_totals_text(summary["replay"]) == (
        "replay 2 (batch -2): replayed=5 now passing[lake=4] filtered=0 still failing=1 skipped as already replayed=3")
    assert replay_totals_text({"replay": None, "skipped_already_replayed": 3}) == "nothing to replay; 3 skipped as already replayed"
    settled = {"replay": None, "skipped_already_replayed": 3, "skipped": {"already replayed": 3, "spec unchanged since it failed": 2}}
    assert replay_totals_text(settled) == ("nothing to replay; 3 skipped as already replayed, 2 skipped as their spec is "
                                           "unchanged since they failed (force takes them)")
