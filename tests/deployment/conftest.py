"""The deployment layer: real Airflow 3.3 components as processes on a PostgreSQL the tests start.

One deployment per module (``deployment`` fixture): api-server, scheduler (LocalExecutor),
dag-processor and two triggerers, each in its own process group with its log in the module's
temp dir. The DAGs folder holds copies of the reference DAGs (dags/) next to a copy of
examples/orders, so the DAGs' defaults (spec, ``CONDUIT_STATE_ROOT``) point into the temp dir.
Tests drive and observe Airflow through its REST API (SimpleAuthManager, all admins) and read
the metadata database only for what the API does not show (which triggerer holds a trigger).
Every process started here, and every Spark job a pipeline started under the temp dir, is
stopped at the end, failure or not; a failing test prints the tail of every component log.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import postgres_server  # tests/postgres_server.py, shared with tests/spark

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
STARTUP_DEADLINE = 600  # seconds: five Airflow components start at once on a shared 2-core machine
LOG_TAIL_LINES = 60


def wait_for(condition, what: str, timeout: float, interval: float = 1.0, check=None):
    """Poll ``condition`` until it returns something truthy; ``check()`` may raise to give up early."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Component:
    """One Airflow component: a process group of its own, output to ``logs/<name>.log``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path):
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = logs / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {self.starts}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True, cwd=self.log_path.parent)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the component and every process it started)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            self.proc.wait(timeout=60)
            _kill_group_leftovers(self.proc.pid)

    def stop(self, grace: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.alive:
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill(signal.SIGKILL)

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _kill_group_leftovers(pgid: int) -> None:
    """Processes still in a killed group (a child that outlived its leader)."""
    import psutil

    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                proc.kill()
        except (ProcessLookupError, psutil.Error):
            continue


def kill_spark_jobs_under(root: Path) -> list[int]:
    """SIGKILL every process of a pipeline run whose state dir is under ``root`` (their own sessions: the
    drivers outlive the Airflow components by design). Returns the pids killed."""
    import psutil

    from airflow_conduit.hooks.backends.lease import RUN_MARKER_ENV

    prefix = str(root)
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_MARKER_ENV, "").startswith(prefix):
                found.append(proc)
        except psutil.Error:
            continue
    for proc in found:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(found, timeout=30)
    return [p.pid for p in found]


class Api:
    """Airflow's public REST API (/api/v2) of the deployment's api-server."""

    def __init__(self, base_url: str):
        import httpx

        self.base_url = base_url
        self.client = httpx.Client(base_url=base_url + "/api/v2", timeout=60)

    def get(self, path: str, **params):
        response = self.client.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def patch(self, path: str, body: dict, **params):
        response = self.client.patch(path, json=body, params=params)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict):
        response = self.client.post(path, json=body)
        response.raise_for_status()
        return response.json()

    def page(self, path: str, **params) -> str:
        """An HTML page of the api-server outside /api/v2 (the UI plugin's views under /conduit)."""
        import httpx

        response = httpx.get(self.base_url + path, params=params, timeout=60)
        response.raise_for_status()
        return response.text

    def try_get(self, path: str, **params):
        """The JSON answer, or None while the server is not there or says no (startup)."""
        import httpx

        try:
            response = self.client.get(path, params=params)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    # -- the things the tests look at --

    def unpause(self, dag_id: str, paused: bool = False) -> None:
        self.patch(f"/dags/{dag_id}", {"is_paused": paused}, update_mask="is_paused")

    def dag_runs(self, dag_id: str) -> list[dict]:
        return self.get(f"/dags/{dag_id}/dagRuns", order_by="id")["dag_runs"]

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}")

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        found = self.try_get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        return found.get("state") if found else None

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str):
        entry = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}", deserialize=True)
        return entry["value"]


class Deployment:
    def __init__(self, root: Path, env: dict[str, str], api: Api, components: dict[str, Component], database: dict):
        self.root = root
        self.env = env
        self.api = api
        self.components = components
        self.database = database

    @property
    def state_root(self) -> Path:
        return Path(self.env["CONDUIT_STATE_ROOT"])

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Read the metadata database (only what the REST API does not show)."""
        import psycopg2

        conn = psycopg2.connect(host=self.database["host"], port=self.database["port"], user="postgres", dbname="postgres")
        try:
            with conn, conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        finally:
            conn.close()

    def triggerer_of(self, dag_id: str, run_id: str, task_id: str) -> tuple[str, int] | None:
        """(component name, triggerer job id) of the triggerer running this task's trigger, None when unassigned."""
        rows = self.query(
            "SELECT j.hostname, j.id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
            "JOIN job j ON j.id = t.triggerer_id WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.task_id = %s",
            (dag_id, run_id, task_id),
        )
        return tuple(rows[0]) if rows else None

    def check_running(self, *names: str) -> None:
        """Fail at once (with the logs) when a component that should be up has exited."""
        for name in names or tuple(self.components):
            component = self.components[name]
            if not component.alive:
                raise AssertionError(f"{name} exited (code {component.proc.returncode}):\n{component.tail()}")

    def wait_healthy(self, timeout: float = STARTUP_DEADLINE) -> dict:
        def healthy():
            health = self.api.try_get("/monitor/health")
            if not health:
                return None
            parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            return health if all((health.get(p) or {}).get("status") == "healthy" for p in parts) else None

        return wait_for(healthy, "every component healthy (/api/v2/monitor/health)", timeout, interval=2,
                        check=self.check_running)

    def restart(self, name: str) -> None:
        component = self.components[name]
        component.stop()
        component.start()

    def logs_report(self) -> str:
        parts = [f"----- {name} ({c.log_path}) -----\n{c.tail()}" for name, c in self.components.items()]
        for driver_log in sorted(self.state_root.rglob("driver.log"))[-4:]:
            lines = driver_log.read_text(errors="replace").splitlines()[-25:]
            parts.append(f"----- {driver_log} -----\n" + "\n".join(lines))
        task_logs = sorted((self.root / "airflow-home" / "logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)[-3:]
        for task_log in task_logs:
            lines = task_log.read_text(errors="replace").splitlines()[-40:]
            parts.append(f"----- {task_log} -----\n" + "\n".join(lines))
        return "\n".join(parts)


def deployment_env(root: Path, database: dict, api_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CONDUIT_"))}
    bin_dir = str(Path(sys.executable).parent)
    here = str(Path(__file__).parent)
    env.update(
        {
            "AIRFLOW_HOME": str(root / "airflow-home"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__CORE__FERNET_KEY": "",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
                f"postgresql+psycopg2://postgres@{database['host']}:{database['port']}/postgres"
            ),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE": "3",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
                [{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                  "kwargs": {"path": str(root / "dags")}}]
            ),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(postgres_server.free_port()),
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "CONDUIT_STATE_ROOT": str(root / "state"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), here) if p),
        }
    )
    if not plugin_entry_point_installed():
        # A venv installed before the plugin's entry point existed (pip install -e of an older tree): the
        # api-server loads the UI plugin through provider info instead (docs/ui.md), as a new install would.
        env["AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS"] = "False"
    return env


def plugin_entry_point_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value.startswith("airflow_conduit.plugins") for ep in entry_points(group="airflow.plugins"))


def triggerer_env(env: dict[str, str], name: str) -> dict[str, str]:
    return {
        **env,
        "CONDUIT_COMPONENT": name,
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "component_hostname.hostname",
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(postgres_server.free_port()),
    }


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Airflow on PostgreSQL with LocalExecutor: api-server, scheduler, dag-processor, triggerer-a, triggerer-b."""
    if not postgres_server.installed():
        pytest.skip("PostgreSQL 15 server binaries not installed (Debian package postgresql)")
    root = tmp_path_factory.mktemp("deployment")
    (root / "logs").mkdir()
    shutil.copytree(REPO / "dags", root / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "examples" / "orders", root / "examples" / "orders", ignore=shutil.ignore_patterns("out", "state*"))
    with postgres_server.postgres_server("max_connections=300") as database:
        api_port = postgres_server.free_port()
        env = deployment_env(root, database, api_port)
        logs = root / "logs"
        with open(logs / "db-migrate.log", "wb") as log:
            subprocess.run([AIRFLOW, "db", "migrate"], env=env, stdout=log, stderr=subprocess.STDOUT, check=True,
                           timeout=STARTUP_DEADLINE)
        components = {
            "api-server": Component("api-server", [AIRFLOW, "api-server", "--port", str(api_port), "--host", "127.0.0.1"],
                                    env, logs),
            "scheduler": Component("scheduler", [AIRFLOW, "scheduler", "--skip-serve-logs"], env, logs),
            "dag-processor": Component("dag-processor", [AIRFLOW, "dag-processor"], env, logs),
            "triggerer-a": Component("triggerer-a", [AIRFLOW, "triggerer", "--skip-serve-logs"],
                                     triggerer_env(env, "triggerer-a"), logs),
            "triggerer-b": Component("triggerer-b", [AIRFLOW, "triggerer", "--skip-serve-logs"],
                                     triggerer_env(env, "triggerer-b"), logs),
        }
        deployed = Deployment(root, env, Api(f"http://127.0.0.1:{api_port}"), components, database)
        try:
            for component in components.values():
                component.start()
            deployed.wait_healthy()
            for dag_id in ("conduit_orders_available_now", "conduit_events_continuous"):
                wait_for(lambda: deployed.api.try_get(f"/dags/{dag_id}"), f"DAG {dag_id} parsed", STARTUP_DEADLINE,
                         interval=2, check=deployed.check_running)
            yield deployed
        except BaseException:
            print(deployed.logs_report())
            raise
        finally:
            for component in components.values():
                component.stop()
            kill_spark_jobs_under(root)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def logs_on_failure(request):
    """A failing test prints the tail of every component log, the latest driver logs and task logs."""
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed and "deployment" in request.fixturenames:
        print(request.getfixturevalue("deployment").logs_report())
