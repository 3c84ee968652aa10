"""The UI plugin's pages through Airflow's real API app and auth manager (SimpleAuthManager, JWTs),
on records and state directories produced by real pipeline runs (dag.test(), local Spark):
one pipeline that recovered from two transient failures, one that degraded on a fatal error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO, run_test_dag, xcoms

pytestmark = pytest.mark.integration

RECORD_SECRET = "hunter2-in-a-record"
CONN_SECRET = "conn-pw-Zq81x"


def _orders_copy(root: Path) -> Path:
    target = root / "orders"
    shutil.copytree(REPO / "examples" / "orders", target, ignore=shutil.ignore_patterns("out", "state*"))
    # A bad record (id is not a number) carrying a password: it lands in the DLQ as-is; the pages must mask it.
    bad = {"id": "x-1", "customer": "mallory", "password": RECORD_SECRET, "amount": 1.0}
    (target / "data" / "in" / "orders-0003.jsonl").write_text(json.dumps(bad) + "\n")
    return target


@pytest.fixture(scope="module")
def ui_runs(airflow_db, tmp_path_factory):
    """Two real runs; then the DAG bundle of the test DAGs belongs to team "red" and spark_default has a password."""
    from airflow.models.connection import Connection
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    root = tmp_path_factory.mktemp("ui")
    orders = _orders_copy(root)
    recovered = run_test_dag(
        "ui_recovered",
        spec=str(orders / "pipeline.yaml"),
        state_dir=str(root / "state-recovered"),
        min_delay="1s",
        max_retries=5,
        max_retries_window="1h",
        poll_interval=0.5,
        backend_options={"faults": {"transient_first_runs": 2}},
    )
    assert recovered.state == "success"
    degraded = run_test_dag(
        "ui_degraded",
        spec=str(orders / "pipeline.yaml"),
        state_dir=str(root / "state-degraded"),
        _plain_task=True,
        poll_interval=0.5,
        backend_options={"faults": {"fatal": True}},
    )
    assert degraded.state == "failed"
    with create_session() as session:
        session.add_all([Team(name="red"), Team(name="blue")])
        session.flush()
        bundle = session.get(DagBundleModel, "conduit-tests")
        bundle.teams.append(session.get(Team, "red"))
        session.add(Connection(conn_id="conduit_local", conn_type="spark", host="local[*]", password=CONN_SECRET))
    yield {"recovered": recovered, "degraded": degraded, "orders": orders, "root": root}
    with create_session() as session:
        bundle = session.get(DagBundleModel, "conduit-tests")
        bundle.teams.clear()
        session.query(Team).filter(Team.name.in_(["red", "blue"])).delete()
        session.query(Connection).filter(Connection.conn_id == "conduit_local").delete()


@pytest.fixture
def client(ui_runs, monkeypatch):
    """Airflow's API app (create_app: plugins, auth manager, middlewares) in multi-team mode."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,red:viewer:red,blue:viewer:blue")
    app = airflow_api_app(monkeypatch)
    with TestClient(app) as test_client:
        yield test_client


def airflow_api_app(monkeypatch):
    from airflow import plugins_manager, settings
    from airflow.api_fastapi.app import create_app

    if not plugin_entry_point_installed():
        # A venv installed before the entry point existed (pip install -e of an older tree): load the
        # plugin through provider info instead, which is the other registration it has.
        monkeypatch.setattr(settings, "LAZY_LOAD_PROVIDERS", False)
    for cached in (plugins_manager._get_plugins, plugins_manager._get_ui_plugins, plugins_manager.get_fastapi_plugins):
        cached.cache_clear()
    return create_app(apps="core")


def plugin_entry_point_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value.startswith("airflow_conduit.plugins") for ep in entry_points(group="airflow.plugins"))


def token(username: str, role: str, teams: list[str] | None = None) -> dict[str, str]:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    jwt = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=username, role=role, teams=teams))
    return {"Authorization": f"Bearer {jwt}"}


def ti_query(dr, task_id: str = "pipeline", **extra) -> dict:
    return {"dag_id": dr.dag_id, "run_id": dr.run_id, "task_id": task_id, "map_index": "-1", **extra}


def test_the_operator_records_what_the_views_read(ui_runs):
    """The record names the plugin reads (plugins/records.py) are the ones the operator's run store writes."""
    from airflow_conduit.plugins import records
    from airflow_conduit.runs import store

    assert (records.XCOM_STATE, records.XCOM_AUDIT, records.STORE_KEY) == (store.XCOM_STATE, store.XCOM_AUDIT, store.STORE_KEY)
    dr = ui_runs["recovered"]
    values = xcoms(dr.dag_id, dr.run_id)
    assert {records.XCOM_STATE, records.XCOM_AUDIT, records.XCOM_SUMMARY, "conduit_job", "conduit_dlq"} <= set(values)


def test_registered_in_provider_info_and_the_api_server(client):
    from airflow.providers_manager import ProvidersManager

    from airflow_conduit.get_provider_info import get_provider_info

    [plugin] = get_provider_info()["plugins"]
    assert plugin["plugin-class"] == "airflow_conduit.plugins.conduit_ui.ConduitUIPlugin"
    assert any(p.plugin_class == plugin["plugin-class"] for p in ProvidersManager().plugins)
    views = client.get("/api/v2/plugins", headers=token("admin", "admin")).json()
    [ours] = [p for p in views["plugins"] if p["name"] == "airflow_conduit"]
    destinations = {v["destination"]: v["href"] for v in ours["external_views"]}
    assert destinations["nav"] == "/conduit/pipelines"
    assert destinations["task_instance"].startswith("/conduit/ti?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}")


def test_no_token_no_data(client, ui_runs):
    dr = ui_runs["recovered"]
    for path, params in [("/conduit/pipelines", {}), ("/conduit/ti", ti_query(dr)), ("/conduit/log", ti_query(dr)),
                         ("/conduit/dlq", ti_query(dr)), ("/conduit/dag-run", {"dag_id": dr.dag_id, "run_id": dr.run_id})]:
        response = client.get(path, params=params)
        assert response.status_code == 401, path
        assert "mallory" not in response.text and "recovered" not in response.text
    bad = client.get("/conduit/ti", params=ti_query(dr), headers={"Authorization": "Bearer not-a-jwt"})
    assert bad.status_code == 403


def test_a_user_without_access_to_the_dag_sees_nothing(client, ui_runs):
    dr = ui_runs["recovered"]
    blue = token("blue", "viewer", ["blue"])
    for path in ("/conduit/ti", "/conduit/log", "/conduit/dlq"):
        assert client.get(path, params=ti_query(dr), headers=blue).status_code == 403, path
    overview = client.get("/conduit/pipelines", headers=blue)
    assert overview.status_code == 200
    assert "ui_recovered" not in overview.text and "ui_degraded" not in overview.text
    red = client.get("/conduit/pipelines", headers=token("red", "viewer", ["red"]))
    assert "ui_recovered" in red.text and "ui_degraded" in red.text


def test_task_instance_view_of_a_recovered_pipeline(client, ui_runs):
    dr = ui_runs["recovered"]
    page = client.get("/conduit/ti", params=ti_query(dr), headers=token("red", "viewer", ["red"]))
    assert page.status_code == 200
    assert "default-src 'none'" in page.headers["content-security-policy"]  # no script runs in these pages
    text = page.text
    assert 'class="badge state-stopped"' in text  # available-now: recovered, then the job finished
    kinds = re.findall(r'<li class="event" data-event="([a-z-]+)"', text)
    assert kinds.count("failed") == 2 and kinds.count("restart-scheduled") == 2 and kinds.count("restarted") == 2
    assert "recovered" in kinds and kinds[-1] == "stopped"
    assert text.count('class="tl-event"') == len(kinds)  # every audit event is drawn on the timeline
    assert "transient, code 1" in text  # the failures with their classification and code
    assert re.search(r"restart #2 in 2s", text)  # the second restart's backoff delay (min-delay 1s, factor 2)
    assert len(re.findall(r'<tr class="run" ', text)) == 3
    # Retry budget: both restarts hold a slot of the 1 h window (max-retries 5).
    assert re.search(r'id="budget"><div class="k">Restarts in window</div><div class="v">2 of 5</div>', text)
    assert 'id="slot-frees"' in text and 'id="next-restart"' not in text  # not backing off any more
    # Batches: written per destination and DLQ counts from the successful run's report.
    totals = xcoms(dr.dag_id, dr.run_id)["return_value"]["report"]["totals"]
    assert "written → lake" in text
    batch_rows = re.findall(r'<tr class="batch">(.*?)</tr>', text)
    assert batch_rows
    assert sum(int(re.findall(r'<td class="n">(\d+)</td>', row)[-1]) for row in batch_rows) == totals["dlq"]
    assert "deadletterqueue-records-produced" in text
    # DLQ grouped by stage, component and error, samples redacted.
    assert re.search(r'<tr class="dlq-group"><td>source</td><td>orders-in</td>', text)
    assert re.search(r'<tr class="dlq-group"><td>processor</td><td>decode-payload</td>', text)
    assert f'id="dlq-total">{totals["dlq"]} records' in text
    assert RECORD_SECRET not in text


def test_task_instance_view_of_a_degraded_pipeline(client, ui_runs):
    dr = ui_runs["degraded"]
    text = client.get("/conduit/ti", params=ti_query(dr), headers=token("red", "viewer", ["red"])).text
    assert 'class="badge state-degraded"' in text
    assert 'id="degraded-reason"' in text and "fatal error" in text
    kinds = re.findall(r'<li class="event" data-event="([a-z-]+)"', text)
    assert kinds == ["started", "failed", "degraded"]


def test_pipelines_page_lists_every_pipeline_and_degraded_stands_out(client, ui_runs):
    text = client.get("/conduit/pipelines", headers=token("red", "viewer", ["red"])).text
    rows = re.findall(r'<tr class="pipeline ([a-z]+)" data-dag="([^"]+)"', text)
    assert ("degraded", "ui_degraded") in rows and ("stopped", "ui_recovered") in rows
    # Degraded pipelines are listed first, highlighted, and counted in a banner. Other test modules' DAGs
    # share the test bundle (and may be degraded too), so the order is checked over every row.
    states = [state for state, _ in rows]
    assert states == sorted(states, key=lambda state: state != "degraded")
    degraded = states.count("degraded")
    assert f'id="degraded-count">{degraded} degraded pipeline{"s" if degraded != 1 else ""}' in text
    recovered_row = re.search(r'data-dag="ui_recovered".*?</tr>', text, re.S).group(0)
    dlq = xcoms(ui_runs["recovered"].dag_id, ui_runs["recovered"].run_id)["return_value"]["report"]["totals"]["dlq"]
    assert f'<td class="n">{dlq}</td>' in recovered_row  # DLQ records in the last 24 h
    assert "transient</b> code" in recovered_row and "read " in recovered_row


def test_a_task_that_is_not_a_pipeline_says_so(client, ui_runs):
    dr = ui_runs["degraded"]
    red = token("red", "viewer", ["red"])
    response = client.get("/conduit/ti", params=ti_query(dr, task_id="plain"), headers=red)
    assert response.status_code == 200
    assert re.search(r'<p class="muted" id="not-a-pipeline">plain is not a pipeline task', response.text)
    assert client.get("/conduit/ti", params=ti_query(dr, task_id="no_such_task"), headers=red).status_code == 404


def test_driver_log_and_dlq_pages_mask_secrets_and_refuse_foreign_paths(client, ui_runs):
    dr = ui_runs["degraded"]
    red = token("red", "viewer", ["red"])
    state = ui_runs["root"] / "state-degraded"
    [run_folder] = list((state / "runs").iterdir())
    with (run_folder / "driver.log").open("a") as log:  # a password that leaked into the driver's output
        log.write(f"connecting to jdbc:postgresql://app:{CONN_SECRET}@db/x with password {CONN_SECRET}\n")
    page = client.get("/conduit/log", params=ti_query(dr), headers=red)
    assert page.status_code == 200
    assert 'id="driver-log"' in page.text and "AIRFLOW_CONDUIT_ERROR" in page.text
    assert CONN_SECRET not in page.text and "app:***@db" in page.text
    # Paths never come from the request: a run id is looked up among the task's own runs only.
    outside = ui_runs["root"] / "outside"
    (outside / "runs" / "x-s01").mkdir(parents=True)
    (outside / "runs" / "x-s01" / "driver.log").write_text("SECRET FILE")
    for run in ("../../outside/runs/x-s01", "/etc", "../state-recovered/runs/" + run_folder.name, "x-s01"):
        response = client.get("/conduit/log", params=ti_query(dr, run=run), headers=red)
        assert response.status_code == 404 and "SECRET FILE" not in response.text
    for bad in ({"state_dir": str(outside)}, {"path": "/etc/passwd"}):
        response = client.get("/conduit/log", params=ti_query(dr, **bad), headers=red)
        assert "SECRET FILE" not in response.text and "root:" not in response.text
    dlq = client.get("/conduit/dlq", params=ti_query(ui_runs["recovered"]), headers=red)
    assert dlq.status_code == 200 and "mallory" in dlq.text
    assert RECORD_SECRET not in dlq.text and "&quot;password&quot;: &quot;***&quot;" in dlq.text


def test_extra_links_point_at_the_plugin_pages(ui_runs):
    from airflow.models.taskinstancekey import TaskInstanceKey

    from airflow_conduit.operators.links import DeadLetterQueueLink, SparkUILink

    dr = ui_runs["recovered"]
    key = TaskInstanceKey(dr.dag_id, "pipeline", dr.run_id, 1, -1)
    assert SparkUILink().get_link(None, ti_key=key).startswith(f"/conduit/log?dag_id={dr.dag_id}&run_id=")
    assert DeadLetterQueueLink().get_link(None, ti_key=key).startswith(f"/conduit/dlq?dag_id={dr.dag_id}&run_id=")


# -- the real thing: `airflow api-server` as a process, Debian's headless Chromium driven by Playwright -----

CHROMIUM = "/usr/bin/chromium"
# As the machine's browser probe starts it: without the background-networking flags Chromium keeps dialling
# Google's hosts on this closed network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Every browser step waits on a condition in the page, never on (virtual) time; this is only its deadline.
BROWSER_DEADLINE_MS = 180_000


def _free_port() -> int:
    from ports import free_port  # this test process's own block (tests/ports.py)

    return free_port()


@pytest.fixture
def browser():
    """Debian's Chromium through Playwright (``executable_path``: no browser download). Playwright replaces the
    ``--screenshot --virtual-time-budget`` command line, whose runs hung past 180 s three times in a row in CI."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=BROWSER_DEADLINE_MS)
        try:
            yield chromium
        finally:
            chromium.close()


def _login_url(server: str, target: str) -> str:
    """SimpleAuthManager's all-admins login: it sets the session cookie and redirects to ``target``."""
    from urllib.parse import quote

    return f"{server}/auth/token/login?next={quote(target, safe='')}"


def _open(browser, server: str, target: str):
    """A page logged in (its own context: a fresh cookie jar) and navigated to ``target``."""
    context = browser.new_context(viewport={"width": 1400, "height": 1300})
    context.set_default_timeout(BROWSER_DEADLINE_MS)
    page = context.new_page()
    page.goto(_login_url(server, target), wait_until="load")
    return page


def _dom(browser, server: str, target: str) -> str:
    """The DOM of one of the plugin's own pages (rendered on the server: complete once loaded)."""
    page = _open(browser, server, target)
    try:
        return page.content()
    finally:
        page.context.close()


@pytest.fixture
def api_server(ui_runs, tmp_path):
    """`airflow api-server` on this session's metadata DB, every user an admin (the auth cases are tested above)."""
    import subprocess
    import sys
    import time

    import httpx

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make system-deps installs it)")
    port = _free_port()
    env = dict(os.environ, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
               AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}")
    env.pop("AIRFLOW__CORE__MULTI_TEAM", None)
    if not plugin_entry_point_installed():  # see airflow_api_app()
        env["AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS"] = "False"
    log = (tmp_path / "api-server.log").open("w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "api-server", "--port", str(port), "--host", "127.0.0.1"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    try:
        while True:
            assert proc.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{server}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "api-server did not answer within 4 minutes"
            time.sleep(1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_views_in_a_real_browser_against_a_real_api_server(api_server, browser, ui_runs, tmp_path):
    """Headless Chromium loads the plugin's pages from `airflow api-server` (logged in by cookie)
    and the rendered DOM shows the state badges, the timeline's events, batch counts and the DLQ summary;
    inside Airflow's own UI, the "Pipeline" tab embeds the same views."""
    recovered, degraded = ui_runs["recovered"], ui_runs["degraded"]
    from urllib.parse import urlencode

    def ti_page(dr) -> str:
        return "/conduit/ti?" + urlencode(ti_query(dr))

    dom = _dom(browser, api_server, ti_page(recovered))
    assert 'class="badge state-stopped"' in dom, dom[:2000]
    kinds = re.findall(r'<li class="event" data-event="([a-z-]+)"', dom)
    assert {"started", "failed", "restart-scheduled", "restarted", "recovered", "stopped"} <= set(kinds)
    assert len(re.findall(r'<g class="tl-event"', dom)) == len(kinds)
    totals = xcoms(recovered.dag_id, recovered.run_id)["return_value"]["report"]["totals"]
    assert f'id="dlq-total">{totals["dlq"]} records' in dom
    assert '<tr class="dlq-group"><td>source</td><td>orders-in</td>' in dom
    assert re.search(r'<tr class="batch">', dom)

    dom = _dom(browser, api_server, ti_page(degraded))
    assert 'class="badge state-degraded"' in dom and 'id="degraded-reason"' in dom

    # A pipeline caught while it backs off: `airflow dags test` in another process, first run failing,
    # min-delay 5m; stopped (no further Spark run) once the views have been looked at.
    backing_off = _start_backing_off_pipeline(ui_runs["orders"], ui_runs["root"], tmp_path)
    try:
        run_id = _wait_for_pipeline_state("ui_recovering", "recovering", backing_off)
        recovering = SimpleNamespace(dag_id="ui_recovering", run_id=run_id)
        dom = _dom(browser, api_server, ti_page(recovering))
        assert 'class="badge state-recovering"' in dom and 'id="next-restart"' in dom, dom[:3000]
        assert re.search(r'id="budget"><div class="k">Restarts in window</div><div class="v">1 of 5</div>', dom)

        dom = _dom(browser, api_server, "/conduit/pipelines")
        assert re.search(r'<tr class="pipeline degraded" data-dag="ui_degraded"', dom)
        assert re.search(r'<tr class="pipeline recovering" data-dag="ui_recovering"', dom)
        _screenshots(browser, api_server, tmp_path, {
            "ui-pipeline-recovering.png": (_airflow_ti_route(recovering), ".badge.state-recovering"),
            "ui-pipelines.png": ("/plugin/conduit-pipelines", "tr.pipeline.degraded"),
        })
    finally:
        _stop(backing_off)

    # The same views inside Airflow's UI (the "Pipeline" tab), as screenshots.
    _screenshots(browser, api_server, tmp_path, {
        "ui-pipeline-recovered.png": (_airflow_ti_route(recovered), ".badge.state-stopped"),
        "ui-pipeline-degraded.png": (_airflow_ti_route(degraded), ".badge.state-degraded"),
    })


def _airflow_ti_route(dr) -> str:
    from urllib.parse import quote

    return f"/dags/{dr.dag_id}/runs/{quote(dr.run_id, safe='')}/tasks/pipeline/plugin/conduit-pipeline"


def _screenshots(browser, server: str, tmp_path: Path, views: dict[str, tuple[str, str]]) -> None:
    """Airflow's UI pages once the plugin's view inside them (an iframe) shows ``selector``; screenshots saved
    in $CONDUIT_UI_SCREENSHOTS (e.g. docs/) when set."""
    shots = Path(os.environ.get("CONDUIT_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    for name, (target, selector) in views.items():
        page = _open(browser, server, target)
        try:
            page.frame_locator("iframe").locator(selector).first.wait_for(state="visible")
            page.screenshot(path=str(shots / name))
        finally:
            page.context.close()
        assert (shots / name).stat().st_size > 10_000, f"{name}: no screenshot"


def _start_backing_off_pipeline(orders: Path, root: Path, tmp_path: Path):
    import subprocess
    import sys

    params = {"dag_id": "ui_recovering", "plain_task": False, "operator": {
        "spec": str(orders / "pipeline.yaml"), "state_dir": str(root / "state-recovering"), "conn_id": "conduit_local", "min_delay": "5m",
        "max_retries": 5, "max_retries_window": "1h", "poll_interval": 0.5, "backend_options": {"faults": {"transient_first_runs": 1}}}}
    env = dict(os.environ, CONDUIT_TEST_DAG=json.dumps(params))
    return subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "dags", "test", "ui_recovering"], env=env,
                            stdout=(tmp_path / "dags-test.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_pipeline_state(dag_id: str, state: str, proc) -> str:
    """The Airflow run id once the pipeline's ``pipeline_state`` XCom says ``state`` (generous deadline: Spark)."""
    import time

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    deadline = time.monotonic() + 300
    while True:
        with create_session() as session:
            row = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.key == "pipeline_state").first()
            if row is not None and XComModel.deserialize_value(row) == state:
                return row.run_id
        assert proc.poll() is None, f"`airflow dags test {dag_id}` ended before the pipeline was {state}"
        assert time.monotonic() < deadline, f"{dag_id} was not {state} within 5 minutes"
        time.sleep(1)


def _stop(proc) -> None:
    import signal
    import subprocess

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_stop_recorded_in_the_state_dir_wins_over_the_running_state_airflow_kept():
    """A user stop of a deferred task is recorded by the trigger's on_kill in recovery.json only (no task
    context in the triggerer): the task's XCom and task_state_store still say running. The view says stopped
    (seen on the deployment layer, tests/deployment)."""
    from airflow_conduit.plugins.records import PipelineTask, apply_recovery_file

    def carry(*events: str) -> dict:
        audit = [{"at": f"2026-01-01T00:00:0{i}+00:00", "event": e, "pipeline_state": "running" if e == "started" else e,
                  "message": e, "details": {}} for i, e in enumerate(events)]
        return {"recovery": {"pipeline_state": audit[-1]["pipeline_state"], "audit": audit}, "submissions": 1}

    def task() -> PipelineTask:
        return PipelineTask(dag_id="d", run_id="r", task_id="t", map_index=-1, ti_state="success", try_number=1,
                            start_date=None, end_date=None, xcom={"pipeline_state": "running"}, carry=carry("started"))

    stopped, running = task(), task()
    apply_recovery_file(stopped, {"pipeline_state": "stopped", "carry": carry("started", "stopped")})
    apply_recovery_file(running, {"pipeline_state": "running", "carry": carry("started")})
    assert stopped.pipeline_state == "stopped" and [e["event"] for e in stopped.audit] == ["started", "stopped"]
    assert running.pipeline_state == "running"
    kept_none = task()
    kept_none.carry = None
    apply_recovery_file(kept_none, {"pipeline_state": "running", "carry": carry("started")})
    assert kept_none.carry == carry("started")
