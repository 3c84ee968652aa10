"""The task instance view shows expectation counts (per rule, in total and per batch) and DLQ replay totals."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from airflow_conduit.runs.report import RunReport
from airflow_conduit.plugins import pages
from airflow_conduit.plugins.state_view import Redactor
from airflow_conduit.plugins.view import pipeline_page
from test_ui_views import T0


def _task(state_dir, prefix):
    return SimpleNamespace(
        dag_id="d", run_id="r", task_id="t", map_index=-1, ti_state="success", try_number=1, state_dir=state_dir,
        run_prefixes=[prefix], job={"run_id": f"{prefix}-s01"}, xcom={}, audit=[], recovery=None,
        pipeline_state="stopped", submissions=1,
    )


def _view(state_dir, prefix) -> str:
    page = pipeline_page(_task(state_dir, prefix), Redactor(), now=T0 + timedelta(minutes=1))
    return pages.pipeline_view(page, pages.Links("", "/conduit"), Redactor().text)


def test_rules_are_counted_in_total_and_per_batch(tmp_path):
    report = RunReport(pipeline_id="p", run_id="x-t1-s01", status="succeeded", started_at=T0.isoformat())
    for batch, failed in ((0, 1), (1, 2)):
        report.add_batch(batch, read=5, filtered=0, dlq=failed, written={"lake": 5 - failed}, at=(T0 + timedelta(seconds=batch)).isoformat())
        report.add_expectations({"quality": {"positive": {"action": "drop", "passed": 5 - failed, "failed": failed},
                                             "named": {"action": "warn", "passed": 5, "failed": 0}}})
    report.write_atomic(tmp_path / "runs" / "x-t1-s01" / "report.json")
    html = _view(tmp_path, "x-t1")
    totals = html.split('id="expectations"')[1].split("</table>")[0]
    assert "<td>positive</td><td>drop</td><td class=\"n\">7</td><td class=\"n\">3</td>" in totals
    assert "<td>named</td><td>warn</td><td class=\"n\">10</td><td class=\"n\">0</td>" in totals
    per_batch = html.split('id="expectation-batches"')[1].split("</table>")[0]
    assert per_batch.count('class="rule-batch"') == 2
    assert '<td class="n">1</td><td class="n">3 / 2</td><td class="n">5 / 0</td>' in per_batch  # batch 1, newest first


def test_a_pipeline_without_rules_shows_no_expectations_and_a_replay_shows_its_totals(tmp_path):
    report = RunReport(pipeline_id="p", run_id="y-t1-s01", status="succeeded", started_at=T0.isoformat())
    report.add_batch(-1, read=3, filtered=0, dlq=1, written={"lake": 2}, at=T0.isoformat())
    report.replay = {"replay": 1, "batch_id": -1, "dry_run": False, "resumed": True, "replayed": 3, "passed": 2,
                     "passing": {"lake": 2}, "filtered": 0, "still_failing": 1, "skipped_already_replayed": 4}
    report.write_atomic(tmp_path / "runs" / "y-t1-s01" / "report.json")
    html = _view(tmp_path, "y-t1")
    assert 'id="expectations"' not in html
    row = html.split('id="replays"')[1].split("</table>")[0]
    assert "replay 1 (resumed)" in row and "<td>lake=2</td>" in row
    assert '<td class="n">3</td><td class="n">2</td><td>lake=2</td><td class="n">1</td><td class="n">4</td>' in row
