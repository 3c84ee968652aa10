"""The UI plugin's pure parts: reading a state dir and a file DLQ, redaction, the budget, the timeline."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from airflow_conduit.runs.report import RunReport
from airflow_conduit.plugins import pages
from airflow_conduit.plugins.state_view import (
    Redactor,
    dlq_folder,
    dlq_groups,
    dlq_rows,
    dlq_rows_from_logs,
    log_tail,
    run_prefix,
    runs_of,
)
from airflow_conduit.plugins.view import budget_of, pipeline_page
from airflow_conduit.recovery import FakeClock, RecoveryEngine, RecoveryOptions

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def write_run(state: Path, run_id: str, *, dlq: int = 0, status: str = "succeeded", log: str = "") -> None:
    folder = state / "runs" / run_id
    folder.mkdir(parents=True)
    report = RunReport(pipeline_id="p", run_id=run_id, status=status, started_at=T0.isoformat(), ended_at=T0.isoformat())
    report.totals = {"read": 3, "filtered": 0, "dlq": dlq, "written": {"lake": 3 - dlq}}
    report.batches = [{"batch_id": 0, "read": 3, "filtered": 0, "dlq": dlq, "written": {"lake": 3 - dlq}, "at": T0.isoformat()}]
    report.write_atomic(folder / "report.json")
    (folder / "driver.log").write_text(log)


def test_redactor_masks_url_credentials_known_values_and_secret_fields():
    r = Redactor(["s3cr3t-value"])
    assert r.text("jdbc:postgresql://u:pw@h/db and s3cr3t-value") == "jdbc:postgresql://u:***@h/db and ***"
    assert r.data({"password": "x", "nested": {"api-key": "y", "note": "has s3cr3t-value"}}) == {
        "password": "***", "nested": {"api-key": "***", "note": "has ***"}}


def test_runs_of_a_task_instance_are_its_own_runs_only(tmp_path):
    for run in ("a-pipeline-t1-s01", "a-pipeline-t1-s02", "b-pipeline-t1-s01", "a-pipeline-t1-extra"):
        write_run(tmp_path, run)
    assert run_prefix("a-pipeline-t1-s02") == "a-pipeline-t1"
    assert [r.run_id for r in runs_of(tmp_path, ["a-pipeline-t1"])] == ["a-pipeline-t1-s01", "a-pipeline-t1-s02"]
    assert len(runs_of(tmp_path, [""])) == 3  # every run of the state dir (the overview's DLQ counts)
    import os

    os.utime(tmp_path / "runs" / "a-pipeline-t1-s01" / "report.json", (1_000_000, 1_000_000))  # an old run
    recent = runs_of(tmp_path, [""], changed_since=2_000_000, newest=0)
    assert sorted(r.run_id for r in recent) == ["a-pipeline-t1-s02", "b-pipeline-t1-s01"]
    assert len(runs_of(tmp_path, [""], changed_since=9e12, newest=2)) == 2  # nothing recent: the newest two
    assert runs_of(None, ["a"]) == [] and runs_of(tmp_path / "missing", ["a"]) == []


def test_log_tail_masks_and_keeps_the_end(tmp_path):
    path = tmp_path / "driver.log"
    path.write_text("".join(f"line {i}\n" for i in range(1000)) + "password is hunter22\n")
    text, truncated = log_tail(path, Redactor(["hunter22"]), limit=200)
    assert truncated and text.endswith("password is ***") and "line 0\n" not in text
    assert log_tail(tmp_path / "none.log", Redactor()) == ("", False)


def test_dlq_rows_of_the_task_runs_grouped_redacted_and_cut(tmp_path):
    assert dlq_folder("jdbc:postgresql://h/db#t") is None and dlq_folder("file://relative/x") is None
    folder = dlq_folder(f"file://{tmp_path}/dlq")
    rows = [
        {"run_id": "r-s01", "batch_id": 0, "stage": "source", "component_id": "in", "exception_class": "E",
         "exception_message": "bad type\nstack", "record": json.dumps({"id": i, "password": "pw-123", "blob": "x" * 500})}
        for i in range(5)
    ] + [{"run_id": "other-s01", "stage": "processor", "component_id": "p", "exception_message": "nope", "record": "{}"}]
    (folder / "batch_id=0").mkdir(parents=True)
    (folder / "batch_id=0" / "part-0000.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found, truncated = dlq_rows(folder, {"r-s01"})
    assert len(found) == 5 and not truncated
    assert dlq_rows(folder, {"r-s01"}, limit=2) == (found[:2], True)
    [group] = dlq_groups(found, Redactor(), samples=3)
    assert (group.stage, group.component, group.error, group.count) == ("source", "in", "E: bad type", 5)
    assert len(group.samples) == 3
    sample = group.samples[0]["record"]
    assert "pw-123" not in sample and '"password": "***"' in sample and "x" * 201 not in sample


def test_budget_counts_restarts_in_the_window_until_the_slot_frees():
    clock = FakeClock(T0)
    options = RecoveryOptions.from_mapping({"min-delay": "1s", "max-retries": 3, "max-retries-window": "1m"})
    engine = RecoveryEngine(options, clock=clock)
    engine.start()
    decision = engine.on_failure({"code": 1500, "message": "flaky"})
    state = json.loads(engine.state.to_json())
    pending = budget_of(state, clock.now())
    assert (pending.used, pending.max_retries, pending.windowed) == (1, 3, True)
    assert pending.next_restart_at == decision.restart_at
    clock.advance(1)
    engine.on_restarted()
    running = budget_of(json.loads(engine.state.to_json()), clock.now())
    assert running.next_restart_at is None and running.oldest_frees_at == clock.now() + timedelta(minutes=1)
    assert budget_of(json.loads(engine.state.to_json()), clock.now() + timedelta(minutes=2)).used == 0
    assert budget_of(None, T0) is None


def test_strimzi_budget_counts_restarts_since_the_reset_with_no_slot_to_free():
    clock = FakeClock(T0)
    engine = RecoveryEngine(RecoveryOptions(policy="strimzi", max_retries=7), clock=clock)
    engine.start()
    for _ in range(2):
        clock.advance(30)
        decision = engine.on_failure({"code": 1500, "message": "flaky"})
        clock.advance(decision.delay_seconds)
        engine.on_restarted()
    later = clock.now() + timedelta(minutes=5, seconds=30)  # past the 5m max-retries-window, short of the 6m reset
    budget = budget_of(json.loads(engine.state.to_json()), later)
    assert (budget.used, budget.max_retries, budget.windowed) == (2, 7, False)
    assert budget.oldest_frees_at is None and budget.counted == "since the last reset"


def test_pipeline_page_draws_every_audit_event_and_each_run(tmp_path):
    write_run(tmp_path, "x-t1-s01", status="failed")
    write_run(tmp_path, "x-t1-s02", dlq=1, log="ok")
    audit = [{"at": (T0 + timedelta(seconds=i)).isoformat(), "event": e, "pipeline_state": "running", "message": e, "details": {}}
             for i, e in enumerate(["started", "failed", "restart-scheduled", "restarted", "stopped"])]
    task = SimpleNamespace(
        dag_id="d", run_id="r", task_id="t", map_index=-1, ti_state="success", try_number=1, state_dir=tmp_path,
        run_prefixes=["x-t1"], job={"run_id": "x-t1-s02"}, xcom={"conduit_dlq": "jdbc:postgresql://app:pw-9@db/x#dlq"}, audit=audit,
        recovery=None, pipeline_state="stopped", submissions=2,
    )
    page = pipeline_page(task, Redactor(), now=T0 + timedelta(minutes=1))
    assert page.current_run.run_id == "x-t1-s02" and not page.live
    html = pages.pipeline_view(page, pages.Links("", "/conduit"), Redactor().text)
    assert html.count('class="tl-event"') == 5 and html.count('class="run-bar"') == 2
    assert 'class="badge state-stopped"' in html and 'id="dlq-total">1 records sent to the DLQ' in html
    assert "pw-9" not in html and "jdbc:postgresql://app:***@db/x#dlq" in html
    assert "/conduit/log?dag_id=d&amp;run_id=r&amp;task_id=t&amp;map_index=-1&amp;run=x-t1-s01" in html


def test_log_dlq_rows_come_from_the_driver_logs_of_the_task_runs(tmp_path):
    row = {"run_id": "x-t1-s01", "batch_id": 2, "stage": "processor", "component_id": "decode", "exception_class": "E",
           "exception_message": "bad", "record": json.dumps({"password": "***"})}
    log = (
        "2026-01-01 10:00:00 INFO airflow_conduit.spark.runner: batch 2 committed\n"
        f"2026-01-01 10:00:00 WARNING airflow_conduit.spark.log.dlq: record delivery failed [batch 2]: {json.dumps(row)}\n"
        f"2026-01-01 10:00:00 WARNING airflow_conduit.spark.log.audit: record delivery failed [batch 2]: {json.dumps({'id': 1})}\n"
    )
    write_run(tmp_path, "x-t1-s01", log=log)
    rows, truncated = dlq_rows_from_logs(runs_of(tmp_path, ["x-t1"]))
    assert rows == [row] and not truncated  # a plain log destination's records are not DLQ rows
    [group] = dlq_groups(rows, Redactor())
    assert (group.stage, group.component, group.count) == ("processor", "decode", 1)
