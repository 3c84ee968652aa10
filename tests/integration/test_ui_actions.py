"""The UI plugin's actions: the DLQ browser's API (paging, filters, permissions) through Airflow's real API app and
SimpleAuthManager, then a real `airflow api-server` with a scheduler and a triggerer driven by headless Chromium:
two users, one allowed to trigger the pipeline's DAG (role ``user``), one read-only (``viewer``).

- ``ui_fake_pipeline`` (dag_files/ui_replay_dag.py): the records of a pipeline task over a state dir this module
  writes, whose file DLQ holds 10,000 records (no Spark): the browser pages through it.
- ``ui_replay``: the orders pipeline and its DLQ replay in one DAG (as conduit_orders_dlq_replay), run once with
  dag.test(); the first user previews a replay in the page and starts it (Airflow's REST API, its session), the
  scheduler runs it, the page follows the run and the DLQ then shows the records replayed. The second user's Start
  is disabled and its forged POST is refused by Airflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest

from conftest import REPO, TEST_DAGS
from test_ui_plugin import browser  # noqa: F401 - the shared Chromium fixture

pytestmark = pytest.mark.integration

USERS = {"operator": ("user", "op-pass-1"), "watcher": ("viewer", "view-pass-1")}
FAKE_RECORDS = 10_000
SECRET = "pw-in-a-dlq-record"


def _fake_dlq(folder: Path) -> None:
    """10,000 DLQ records over 20 batches: two stages, two components, three error classes, an hour of times."""
    for batch in range(20):
        out = folder / f"batch_id={batch}"
        out.mkdir(parents=True)
        with (out / "part-00000.json").open("w") as handle:
            for i in range(batch * 500, batch * 500 + 500):
                handle.write(json.dumps({
                    "pipeline_id": "orders", "run_id": "fake-pipeline-t1-00000000-s01", "batch_id": batch,
                    "source_id": "orders-in", "source_file": "file:/data/in/orders.jsonl", "source_split_start": 0,
                    "source_position": i + 1, "stage": "source" if i % 4 else "processor",
                    "component_id": "orders-in" if i % 4 else "decode-payload",
                    "component_type": "file" if i % 4 else "json.decode",
                    "exception_class": ("airflow_conduit.spark.MalformedRecordError", "airflow_conduit.spark.WrongTypeError",
                                        "airflow_conduit.spark.MissingFieldError")[i % 3],
                    "exception_message": f"record {i} is bad", "attempt": 1,
                    "time_of_error": f"2026-03-01T10:{i % 60:02d}:00.000000Z",
                    "record": json.dumps({"id": f"x-{i}", "customer": "c", "password": SECRET}),
                }) + "\n")


@pytest.fixture(scope="module")
def ui_setup(airflow_db, tmp_path_factory):
    """The fake pipeline (dag.test: its records only) and the real orders pipeline (dag.test: Spark), both DAGs
    unpaused for the scheduler; CONDUIT_UI_REPLAY names their files for this process and the ones it starts."""
    from airflow.models.connection import Connection
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    from conftest import run_test_dag  # noqa: F401 - the bundle settings come with conftest

    root = tmp_path_factory.mktemp("ui-actions")
    orders = root / "orders"
    shutil.copytree(REPO / "examples" / "orders", orders, ignore=shutil.ignore_patterns("out", "state*"))
    fake_state = root / "fake-state"
    fake_state.mkdir()
    spec = (REPO / "examples" / "orders" / "pipeline.yaml").read_text()
    spec = spec.replace("path: data/in", f"path: {orders / 'data' / 'in'}").replace("path: out/lake", f"path: {root / 'fake-lake'}")
    spec = spec.replace("path: out/dlq", f"path: {root / 'fake-dlq'}")
    (fake_state / "pipeline.yaml").write_text(spec)
    _fake_dlq(root / "fake-dlq")
    paths = {"spec": str(orders / "pipeline.yaml"), "state_dir": str(root / "state"), "fake_state_dir": str(fake_state),
             "continuous_state_dir": str(root / "continuous-state")}
    os.environ["CONDUIT_UI_REPLAY"] = json.dumps(paths)
    with create_session() as session:
        if session.get(Connection, "conduit_local") is None:  # (or already added by another module)
            session.add(Connection(conn_id="conduit_local", conn_type="spark", host="local[*]"))
    fake = _dag("ui_fake_pipeline").test()
    assert fake.state == "success"
    with create_session() as session:
        session.get(DagModel, "ui_fake_pipeline").is_paused = False
    yield {"root": root, "orders": orders, "fake": fake, "paths": paths}


@pytest.fixture(scope="module")
def replay_setup(ui_setup):
    """The orders pipeline run once (dag.test, Spark): its DLQ holds the example's bad records."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    first = _dag("ui_replay").test()
    assert first.state == "success"
    with create_session() as session:
        session.get(DagModel, "ui_replay").is_paused = False
    return {**ui_setup, "first": first}


def _dag(dag_id: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"ui_replay_dag_{time.monotonic_ns()}", TEST_DAGS / "ui_replay_dag.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"ui_replay": module.dag, "ui_fake_pipeline": module.fake_dag}[dag_id]


def users_setting() -> str:
    return ",".join(f"{name}:{role}" for name, (role, _) in USERS.items())


@pytest.fixture
def client(ui_setup, monkeypatch):
    from fastapi.testclient import TestClient

    from test_ui_plugin import airflow_api_app

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", users_setting())
    monkeypatch.delenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", raising=False)
    with TestClient(airflow_api_app(monkeypatch)) as test_client:
        yield test_client


def auth(name: str) -> dict[str, str]:
    from test_ui_plugin import token

    return token(name, USERS[name][0])


def fake_key(ui_setup, **extra) -> dict:
    dr = ui_setup["fake"]
    return {"dag_id": dr.dag_id, "run_id": dr.run_id, "task_id": "pipeline", "map_index": "-1", **extra}


def test_the_dlq_api_pages_and_filters_server_side(client, ui_setup):
    first = client.get("/conduit/api/dlq", params=fake_key(ui_setup, limit=50), headers=auth("watcher"))
    assert first.status_code == 200, first.text
    page = first.json()
    assert page["readable"] and page["kind"] == "file" and page["total"] == FAKE_RECORDS
    assert page["count"] == 50 and len(page["records"]) == 50
    assert [r["batch_id"] for r in page["records"]] == [19] * 50  # newest batch first
    assert page["facets"]["stage"] == {"source": 7500, "processor": 2500}
    record = page["records"][0]
    assert record["encoding"] == "text" and SECRET not in json.dumps(page) and '"password": "***"' in record["raw"]
    assert {"stage", "component_id", "exception_class", "exception_message", "time_of_error", "attempt"} <= set(record["context"])
    assert record["position"]["source_id"] == "orders-in" and record["run_id"].startswith("fake-pipeline")
    last = client.get("/conduit/api/dlq", params=fake_key(ui_setup, offset=9990, limit=50), headers=auth("watcher")).json()
    assert last["count"] == 10 and [r["batch_id"] for r in last["records"]] == [0] * 10
    filtered = client.get("/conduit/api/dlq", params=fake_key(
        ui_setup, stage="processor", error_class="airflow_conduit.spark.WrongTypeError", since="2026-03-01T10:30:00Z",
        limit=200), headers=auth("watcher")).json()
    expected = [i for i in range(FAKE_RECORDS) if i % 4 == 0 and i % 3 == 1 and i % 60 >= 30]
    assert filtered["total"] == len(expected) and filtered["count"] == min(200, len(expected))
    assert all(r["context"]["stage"] == "processor" and r["context"]["time_of_error"] >= "2026-03-01T10:30" for r in filtered["records"])
    bad = client.get("/conduit/api/dlq", params=fake_key(ui_setup, since="yesterday"), headers=auth("watcher"))
    assert bad.status_code == 400 and "since" in bad.json()["detail"]
    assert client.get("/conduit/api/dlq", params=fake_key(ui_setup, limit=5000), headers=auth("watcher")).status_code == 422


def test_reading_needs_the_dags_task_instances_and_start_needs_trigger_rights(client, ui_setup):
    for path in ("/conduit/api/dlq", "/conduit/api/replay-preview", "/conduit/api/lag"):
        response = client.get(path, params=fake_key(ui_setup))
        assert response.status_code == 401, path
        assert SECRET not in response.text
        assert client.get(path, params=fake_key(ui_setup), headers={"Authorization": "Bearer forged"}).status_code == 403
    watcher = client.get("/conduit/api/replay-preview", params=fake_key(ui_setup), headers=auth("watcher")).json()
    operator = client.get("/conduit/api/replay-preview", params=fake_key(ui_setup), headers=auth("operator")).json()
    assert watcher["can_trigger"] is False and operator["can_trigger"] is True
    assert operator["replay_dag"] == watcher["replay_dag"] == {
        "dag_id": "ui_fake_pipeline", "task_id": "dlq_replay",
        "conf": {"replay": True, "dry_run": False, "force": False, "stages": [], "components": [], "error_classes": [],
                 "since": None, "until": None}}
    page = client.get("/conduit/ti", params=fake_key(ui_setup), headers=auth("watcher")).text
    assert 'id="replay-start" disabled title="you may not trigger DAG ui_fake_pipeline"' in page
    assert 'data-can-trigger="0"' in page
    assert 'data-can-trigger="1"' in client.get("/conduit/ti", params=fake_key(ui_setup), headers=auth("operator")).text
    forged = client.post("/api/v2/dags/ui_fake_pipeline/dagRuns", json={"logical_date": None, "conf": operator["replay_dag"]["conf"]},
                         headers=auth("watcher"))
    assert forged.status_code == 403


def test_the_preview_is_the_replays_own_selection_and_writes_nothing(client, ui_setup):
    fake_state = Path(ui_setup["paths"]["fake_state_dir"])
    before = sorted(p.relative_to(ui_setup["root"]) for p in ui_setup["root"].rglob("*"))
    preview = client.get("/conduit/api/replay-preview", params=fake_key(ui_setup, stage="processor"),
                         headers=auth("operator")).json()
    assert preview["selected"] == 2500 and preview["skipped"] == {"not matching the filters": 7500}
    assert sum(preview["error_classes"].values()) == 2500 and len(preview["error_classes"]) == 3
    assert "fingerprint" in preview["rule"] and set(preview["fingerprints"]) == {"orders-in"}
    assert preview["replay_dag"]["conf"]["stages"] == ["processor"]
    assert sorted(p.relative_to(ui_setup["root"]) for p in ui_setup["root"].rglob("*")) == before
    assert not (fake_state / "replays").exists()


# -- a real api-server, scheduler and triggerer; headless Chromium ----------------------------------------------


class Processes:
    """Airflow components as processes of their own (each its own process group, its log in ``logs``)."""

    def __init__(self, env: dict[str, str], logs: Path):
        self.env, self.logs, self.procs = env, logs, {}

    def start(self, name: str, *args: str) -> None:
        airflow = str(Path(sys.executable).parent / "airflow")
        self.procs[name] = subprocess.Popen([airflow, *args], env=self.env, stdout=(self.logs / f"{name}.log").open("w"),
                                            stderr=subprocess.STDOUT, start_new_session=True, cwd=self.logs)

    def check(self) -> None:
        for name, proc in self.procs.items():
            assert proc.poll() is None, f"{name} exited:\n" + (self.logs / f"{name}.log").read_text()[-3000:]

    def stop(self) -> None:
        import signal

        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def airflow_processes(ui_setup, kafka, tmp_path_factory):
    """`airflow api-server` on this session's metadata DB; two users with passwords (SimpleAuthManager); the test
    broker as the Kafka example's KAFKA_BOOTSTRAP_SERVERS. ``workers`` adds a scheduler and a triggerer."""
    import httpx

    from test_ui_plugin import CHROMIUM, _free_port, plugin_entry_point_installed

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make system-deps installs it)")
    logs = tmp_path_factory.mktemp("ui-actions-logs")
    port = _free_port()
    passwords = logs / "passwords.json"
    passwords.write_text(json.dumps({name: password for name, (_, password) in USERS.items()}))
    env = dict(os.environ, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=users_setting(),
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
               AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}", AIRFLOW__CORE__EXECUTOR="LocalExecutor",
               AIRFLOW__CORE__PARALLELISM="2",
               AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
               AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK="False", AIRFLOW__API__WORKERS="1",
               AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(_free_port()),
               AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(_free_port()),
               AIRFLOW__API_AUTH__JWT_SECRET="ui-actions-" + "x" * 40, KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap)
    for key in ("AIRFLOW__CORE__MULTI_TEAM", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"):
        env.pop(key, None)
    if not plugin_entry_point_installed():
        env["AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS"] = "False"
    processes = Processes(env, logs)
    server = f"http://127.0.0.1:{port}"
    try:
        processes.start("api-server", "api-server", "--port", str(port), "--host", "127.0.0.1")
        deadline = time.monotonic() + 300
        while True:
            processes.check()
            try:
                if httpx.get(f"{server}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "api-server did not answer within 5 minutes"
            time.sleep(1)
        yield {"server": server, "logs": logs, "processes": processes}
    finally:
        processes.stop()


@pytest.fixture(scope="module")
def workers(airflow_processes, replay_setup):
    """A scheduler (LocalExecutor) and a triggerer, started once every in-process dag.test() of the module has run:
    a triggerer would otherwise also take up the deferred task of a dag.test() run."""
    processes = airflow_processes["processes"]
    processes.start("scheduler", "scheduler", "--skip-serve-logs")
    processes.start("triggerer", "triggerer", "--skip-serve-logs")
    return airflow_processes


def login(browser, server: str, name: str):
    """A browser context with ``name``'s session cookie (SimpleAuthManager's token endpoint, the user's password)."""
    import httpx

    from test_ui_plugin import BROWSER_DEADLINE_MS

    answer = httpx.post(f"{server}/auth/token", json={"username": name, "password": USERS[name][1]}, timeout=60)
    assert answer.status_code in (200, 201), answer.text
    context = browser.new_context(viewport={"width": 1400, "height": 1500})
    context.set_default_timeout(BROWSER_DEADLINE_MS)
    context.add_cookies([{"name": "_token", "value": answer.json()["access_token"], "url": server}])
    return context


def plugin_url(server: str, page: str, dr, task_id: str = "pipeline") -> str:
    return f"{server}/conduit/{page}?" + urlencode({"dag_id": dr.dag_id, "run_id": dr.run_id, "task_id": task_id, "map_index": -1})


def shots_dir(tmp_path: Path) -> Path:
    shots = Path(os.environ.get("CONDUIT_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def test_the_browser_pages_through_ten_thousand_records(airflow_processes, browser, ui_setup, tmp_path):
    from playwright.sync_api import expect

    server = airflow_processes["server"]
    context = login(browser, server, "watcher")
    page = context.new_page()
    answers = []
    page.on("response", lambda r: answers.append(r.url) if "/conduit/api/dlq" in r.url else None)
    page.goto(plugin_url(server, "ti", ui_setup["fake"]))
    page.wait_for_selector("#dlq-status[data-total]")
    assert page.locator("#dlq-status").get_attribute("data-total") == str(FAKE_RECORDS)
    assert page.locator("tr.dlq-record").count() == 50
    assert page.locator("#dlq-range").inner_text() == "1–50 of 10000"
    page.click("#dlq-next")
    expect(page.locator("#dlq-range")).to_have_text("51–100 of 10000")
    assert page.locator("tr.dlq-record").count() == 50
    page.select_option("select[name=stage]", "processor")
    page.click("#dlq-apply")
    expect(page.locator("#dlq-status")).to_have_attribute("data-total", "2500")
    page.locator("tr.dlq-record").first.click()
    page.wait_for_selector("#record-detail")
    detail = page.locator("#record-detail").inner_text()
    assert "decode-payload" in detail and "never replayed" in detail and SECRET not in detail
    assert "limit=50" in answers[-1] and all("limit=50" in a for a in answers)  # one page at a time, never all
    assert page.locator("#replay-start").is_disabled()
    page.click("#replay-preview")
    page.wait_for_selector("#replay-selected")
    assert page.locator("#replay-selected").inner_text() == "2500"
    assert page.locator("#replay-start").is_disabled()  # a viewer may not trigger
    page.locator("#dlq-browser").screenshot(path=str(shots_dir(tmp_path) / "ui-dlq-browser.png"))
    # The same browser on the Pipelines page, opened from the pipeline's row.
    page.goto(f"{server}/conduit/pipelines")
    page.click('tr.pipeline[data-dag="ui_fake_pipeline"] button.open-dlq')
    expect(page.locator("#dlq-status")).to_have_attribute("data-total", str(FAKE_RECORDS))
    expect(page.locator("#dlq-for")).to_have_text("ui_fake_pipeline › pipeline")
    assert page.locator("tr.dlq-record").count() == 50
    context.close()


# -- Kafka: the lag of a pipeline's source partitions, its Kafka DLQ browsed -------------------------------------


@contextlib.contextmanager
def chromium():
    """Debian's Chromium for a part of a test (Playwright's sync API runs an event loop: no dag.test() inside)."""
    from playwright.sync_api import sync_playwright

    from test_ui_plugin import BROWSER_DEADLINE_MS, CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=BROWSER_DEADLINE_MS)
        try:
            yield browser
        finally:
            browser.close()


def lag_in_the_browser(server: str, total: str, screenshot: Path | None = None) -> str:
    """The Pipelines page as the read-only user sees it, once the Kafka pipeline's lag shows ``total``."""
    from playwright.sync_api import expect

    with chromium() as browser:
        context = login(browser, server, "watcher")
        view = context.new_page()
        view.goto(f"{server}/conduit/pipelines")
        row = view.locator('tr.lag-row[data-dag="conduit_kafka_orders_to_delta"] .kafka-lag')
        expect(row).to_have_attribute("data-total", total)
        if screenshot is not None:
            row.screenshot(path=str(screenshot))
        content = view.content()
        context.close()
        return content


def test_kafka_lag_shows_a_backlog_that_a_run_clears(client, kafka, airflow_processes, tmp_path, monkeypatch):
    """The Kafka -> Delta reference DAG on the test broker: after a run, records produced meanwhile are a backlog
    (broker end offsets minus the checkpoint's), per partition; the next run reads them and the lag is zero. The
    run's progress events (spark/progress.py) give the chart's points; its Kafka DLQ is browsed record by record."""
    from conftest import load_reference_dag
    from test_kafka_delta_dag import example_on_topics_of_its_own

    example, _, topic, dlq_topic = example_on_topics_of_its_own(kafka, tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap)
    dag = load_reference_dag("conduit_kafka_orders_to_delta.py")
    conf = {"spec": str(example / "pipeline.yaml"), "state_dir": str(example / "state")}
    dr = dag.test(run_conf=conf)
    assert dr.state == "success"
    key = {"dag_id": dr.dag_id, "run_id": dr.run_id, "task_id": "kafka_orders_to_delta", "map_index": "-1"}

    caught_up = client.get("/conduit/api/lag", params=key, headers=auth("watcher")).json()
    assert caught_up["kafka"] and caught_up["mode"] == "between runs", caught_up
    assert {(p["topic"], p["partition"]) for p in caught_up["partitions"]} == {(topic, 0), (topic, 1)}
    assert all(p["lag"] == 0 for p in caught_up["partitions"])
    assert caught_up["history"] and all(p["rows_per_second"] is not None for p in caught_up["history"])
    assert kafka.bootstrap not in json.dumps(caught_up)  # no server address, no client setting reaches the page

    kafka.produce(topic, [json.dumps({"id": 200 + i, "customer": f"late{i}", "amount": 1.0}).encode() for i in range(5)],
                  partition=1)
    behind = client.get("/conduit/api/lag", params=key, headers=auth("watcher")).json()
    lags = {(p["topic"], p["partition"]): p["lag"] for p in behind["partitions"]}
    assert lags == {(topic, 0): 0, (topic, 1): 5}
    page = client.get("/conduit/pipelines", headers=auth("watcher")).text
    assert 'class="kafka-lag"' in page and "api/lag?dag_id=conduit_kafka_orders_to_delta" in page
    server = airflow_processes["server"]
    content = lag_in_the_browser(server, "5", shots_dir(tmp_path) / "ui-kafka-lag.png")
    assert re.search(rf'data-partition="1"><td>{re.escape(topic)}</td><td class="n">1</td><td class="n">\d+</td><td class="n">\d+</td>'
                     r'<td class="n lag-cell">5</td>', content), content[-3000:]
    assert kafka.bootstrap not in content

    dr = dag.test(run_conf=conf)
    assert dr.state == "success"
    key["run_id"] = dr.run_id
    after = client.get("/conduit/api/lag", params=key, headers=auth("watcher")).json()
    assert [p["lag"] for p in after["partitions"]] == [0, 0]
    lag_in_the_browser(server, "0")

    dlq = client.get("/conduit/api/dlq", params=key, headers=auth("watcher")).json()
    assert dlq["kind"] == "kafka" and dlq["readable"], dlq
    assert dlq["total"] >= 7 and all(r["position"]["dlq_position"].startswith(f"{dlq_topic}/") for r in dlq["records"])
    assert kafka.bootstrap not in json.dumps(dlq)


def test_a_jdbc_dlq_is_paged_and_filtered_by_postgresql(tmp_path):
    """A JDBC DLQ table (the DLQ's columns) on a real PostgreSQL: count, page and facets computed by the database."""
    import psycopg2

    import postgres_server
    from airflow_conduit.pipeline.replay_request import ReplayFilter
    from airflow_conduit.plugins import dlq_browse

    if not postgres_server.installed():
        pytest.skip("PostgreSQL 15 server binaries not installed (Debian package postgresql)")
    with postgres_server.postgres_server() as db:
        settings = {"url": db["url"], "table": "orders_dlq", "user": "postgres", "password": None}
        view = lambda row: {"batch_id": row["batch_id"], "stage": row["stage"], "position": row["source_position"]}  # noqa: E731
        assert dlq_browse.jdbc_page(settings, ReplayFilter(), 0, 10, view).total == 0  # no table yet: nothing dead-lettered
        conn = psycopg2.connect(host=db["host"], port=db["port"], user="postgres", dbname="postgres")
        with conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE orders_dlq (run_id text, batch_id bigint, source_id text, source_position bigint, "
                        "stage text, component_id text, exception_class text, exception_message text, time_of_error text, "
                        "record text, _conduit_batch_id bigint)")
            cur.executemany("INSERT INTO orders_dlq VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", [
                ("r-s01", i // 100, "in", i, "source" if i % 2 else "processor", "in" if i % 2 else "decode", f"E{i % 3}",
                 f"bad {i}", f"2026-03-01T10:{i % 60:02d}:00.000000Z", json.dumps({"id": i}), i // 100) for i in range(300)])
        conn.close()
        page = dlq_browse.jdbc_page(settings, ReplayFilter(), 0, 10, view)
        assert page.total == 300 and [r["batch_id"] for r in page.records] == [2] * 10
        assert page.facets["stage"] == {"processor": 150, "source": 150}
        only = ReplayFilter.from_mapping({"stages": "source", "exception_classes": "E0", "since": "2026-03-01T10:30:00Z"})
        expected = [i for i in range(300) if i % 2 and i % 3 == 0 and i % 60 >= 30]
        filtered = dlq_browse.jdbc_page(settings, only, 5, 1000, view)
        assert filtered.total == len(expected) and len(filtered.records) == len(expected) - 5
        assert all(r["stage"] == "source" for r in filtered.records)


# -- with a scheduler and a triggerer (after every dag.test() of the module) ------------------------------------


def test_a_user_starts_a_replay_and_a_viewer_cannot(workers, browser, replay_setup, tmp_path):
    import httpx

    ui_setup = replay_setup
    airflow_processes = workers
    server = airflow_processes["server"]
    first = ui_setup["first"]
    viewer = login(browser, server, "watcher")
    page = viewer.new_page()
    page.goto(plugin_url(server, "ti", first))
    page.wait_for_selector("#dlq-status[data-total]")
    page.click("#replay-force")
    page.click("#replay-preview")
    page.wait_for_selector("#replay-selected")
    assert page.locator("#replay-start").is_disabled()
    forged = page.evaluate("""async () => (await fetch('/api/v2/dags/ui_replay/dagRuns', {method: 'POST',
        credentials: 'same-origin', headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({logical_date: null, conf: {replay: true, dry_run: false, force: true}})})).status""")
    assert forged == 403
    viewer.close()

    operator = login(browser, server, "operator")
    page = operator.new_page()
    page.goto(plugin_url(server, "ti", first))
    page.wait_for_selector("#dlq-status[data-total]")
    dlq_total = int(page.locator("#dlq-status").get_attribute("data-total"))
    assert dlq_total > 0
    page.click("#replay-force")  # the spec is unchanged since the records failed: a forced replay takes them
    page.click("#replay-preview")
    page.wait_for_selector("#replay-selected")
    selected = int(page.locator("#replay-selected").inner_text())
    assert 0 < selected <= dlq_total
    assert page.locator("#replay-start").is_enabled()
    page.locator("#dlq-browser").screenshot(path=str(shots_dir(tmp_path) / "ui-replay-preview.png"))
    page.click("#replay-start")
    page.wait_for_selector("#replay-progress[data-run-id]")
    page.wait_for_selector("#replay-progress[data-state]", timeout=900_000)
    assert page.locator("#replay-progress").get_attribute("data-state") == "success", \
        (airflow_processes["logs"] / "scheduler.log").read_text()[-3000:]
    run_id = page.locator("#replay-progress").get_attribute("data-run-id")
    page.wait_for_selector("#replays-table tr.replay-row[data-status=done]")
    page.locator("#dlq-browser").screenshot(path=str(shots_dir(tmp_path) / "ui-replay-done.png"))
    records = page.locator("tr.dlq-record td.replays").all_inner_texts()
    assert any("#1 taken" in r for r in records)
    # The replay ran as Airflow ran it: a DAG run of the user's, with the conf the page sent.
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter_by(dag_id="ui_replay", run_id=run_id).one()
        assert run.conf["replay"] is True and run.conf["force"] is True and run.triggering_user_name == "operator"
    plan = json.loads((Path(ui_setup["paths"]["state_dir"]) / "replays" / "1" / "plan.json").read_text())
    assert plan["status"] == "done" and len(plan["taken"]) == selected
    operator.close()
    assert httpx.get(f"{server}/api/v2/monitor/health", timeout=30).status_code == 200


def test_a_user_stops_a_running_pipeline_after_confirming_and_a_viewer_cannot(workers, browser, ui_setup, tmp_path):
    """The graceful stop from the Pipeline tab: the task marked success through Airflow's REST API with the user's
    session; the running batch completes and the state dir says stopped."""
    import httpx
    from playwright.sync_api import expect

    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    airflow_processes = workers
    server = airflow_processes["server"]
    with create_session() as session:
        session.get(DagModel, "ui_continuous").is_paused = False
    state_dir = Path(ui_setup["paths"]["continuous_state_dir"])
    token = httpx.post(f"{server}/auth/token", json={"username": "operator", "password": USERS["operator"][1]}).json()["access_token"]
    api = httpx.Client(base_url=f"{server}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    run = api.post("/dags/ui_continuous/dagRuns", json={"logical_date": None})
    assert run.status_code == 200, run.text
    dr = SimpleNamespace(dag_id="ui_continuous", run_id=run.json()["dag_run_id"])

    def running() -> bool:
        ti = api.get(f"/dags/ui_continuous/dagRuns/{dr.run_id}/taskInstances/pipeline").json()
        reports = [json.loads(p.read_text()) for p in state_dir.glob("runs/*/report.json")] if state_dir.exists() else []
        return ti.get("state") == "deferred" and any(r.get("status") == "running" and r.get("batches") for r in reports)

    wait_until(running, "the continuous pipeline deferred with a running Spark run", 600, airflow_processes)
    viewer = login(browser, server, "watcher")
    page = viewer.new_page()
    page.goto(plugin_url(server, "ti", dr))
    expect(page.locator("#stop-ask")).to_be_disabled()
    viewer.close()

    operator = login(browser, server, "operator")
    page = operator.new_page()
    page.goto(plugin_url(server, "ti", dr))
    page.click("#stop-ask")
    expect(page.locator("#stop-confirm")).to_be_visible()
    page.locator("#stop").screenshot(path=str(shots_dir(tmp_path) / "ui-stop-confirm.png"))
    page.click("#stop-no")  # cancelled: nothing happens
    expect(page.locator("#stop-confirm")).to_be_hidden()
    assert api.get(f"/dags/ui_continuous/dagRuns/{dr.run_id}/taskInstances/pipeline").json()["state"] == "deferred"
    page.click("#stop-ask")
    page.click("#stop-yes")
    expect(page.locator("#stop-result")).to_have_text(re.compile("Stop requested"))
    operator.close()

    def stopped() -> bool:
        try:
            recovery = json.loads((state_dir / "recovery.json").read_text())
        except (OSError, ValueError):
            return False
        return recovery.get("pipeline_state") == "stopped"

    wait_until(stopped, "recovery.json says stopped", 300, airflow_processes)
    assert api.get(f"/dags/ui_continuous/dagRuns/{dr.run_id}/taskInstances/pipeline").json()["state"] == "success"


def wait_until(condition, what: str, seconds: float, processes) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n" + \
            "\n".join((processes["logs"] / f"{n}.log").read_text(errors="replace")[-2000:] for n in ("scheduler", "triggerer"))
        time.sleep(2)
