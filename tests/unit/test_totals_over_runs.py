"""`airflow-conduit run`'s "records:" line: the pipeline's totals over all its runs (runs/report.py)."""

from __future__ import annotations

from airflow_conduit.runs.report import RunReport, totals_over_runs


def report(run_id: str, *batches: dict) -> dict:
    """A run report as the runner writes it: one add_batch per batch the run recorded (after its commits)."""
    r = RunReport(pipeline_id="orders", run_id=run_id)
    for b in batches:
        r.add_batch(b["batch_id"], read=b["read"], filtered=b["filtered"], dlq=b["dlq"], written=b["written"])
        if b.get("already"):
            r.batches[-1]["already_committed"] = b["already"]
    return r.to_dict()


def batch(batch_id: int, read: int, written: int, dlq: int = 0, filtered: int = 0, already=None) -> dict:
    return {"batch_id": batch_id, "read": read, "filtered": filtered, "dlq": dlq, "written": {"lake": written},
            "already": already}


def test_a_run_killed_between_two_commits_and_its_restart_count_every_record_once():
    # s01 recorded batch 0 and was killed after the DLQ committed batch 1, before the lake did: s02 re-ran batch 1
    runs = [report("s01", batch(0, 8, 4, dlq=3, filtered=1)), report("s02", batch(1, 7, 3, dlq=4, already=["dead-letter-queue"]))]
    assert totals_over_runs(runs) == {"read": 15, "filtered": 1, "dlq": 7, "written": {"lake": 7}}
    assert totals_over_runs(runs[-1:])["read"] == 7  # what the last run alone says


def test_a_batch_recorded_by_two_runs_is_counted_once():
    # s01 recorded batch 1 and ended before Spark's checkpoint committed it: s02 re-ran it, every destination committed
    runs = [report("s01", batch(0, 8, 4, dlq=4), batch(1, 7, 3, dlq=4)),
            report("s02", batch(1, 7, 0, dlq=4, already=["lake", "dead-letter-queue"]), batch(2, 5, 5))]
    assert totals_over_runs(runs) == {"read": 20, "filtered": 0, "dlq": 8, "written": {"lake": 12}}


def test_rows_a_killed_run_committed_without_recording_come_from_the_commit_markers():
    # s01 was killed after the lake committed batch 1 and before recording it: s02 wrote nothing there again
    runs = [report("s01", batch(0, 8, 4)), report("s02", batch(1, 7, 0, already=["lake"]))]
    markers = {("lake", 1): 7}
    assert totals_over_runs(runs, lambda dest, b: markers.get((dest, b)))["written"] == {"lake": 11}
    assert totals_over_runs([])["read"] == 0


def test_rows_a_killed_attempt_wrote_before_the_re_run_wrote_the_rest_count_once_for_the_pipeline():
    # s01 was killed while writing batch 1 to Kafka: 1,479 of its 1,936 rows were in the topic; s02 wrote the 457 others
    runs = [report("s01", batch(0, 10, 10)), report("s02", batch(1, 1936, 457))]
    runs[1]["batches"][-1]["earlier_attempt_wrote"] = {"lake": 1479}
    assert runs[1]["totals"]["written"] == {"lake": 457}  # the re-run's own report: what this run wrote
    assert totals_over_runs(runs)["written"] == {"lake": 10 + 1936}  # the pipeline's: every row once
