"""The built wheel, installed into a clean venv of another Python, works without the checkout.

`make test-wheel` builds dist/ (`make dist`), installs the wheel into .venv-wheel-<python> (its dependencies
from that Python's constraints file, the wheel itself afresh at every run; no editable install, no test
packages) and runs this module with AIRFLOW_CONDUIT_WHEEL_VENV naming that venv. Every command runs in a
temporary folder outside the checkout, with an environment that names neither the checkout nor a jars folder:
the package data, the entry points and the Kafka and Delta connectors (Spark's Ivy, spark.jars.packages)
must all come from site-packages. This process (the main venv) only plays the outside world: the Kafka
broker, the topics' records, and reading the Delta table's files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import airflow_conduit

pytestmark = pytest.mark.release

REPO = Path(__file__).resolve().parents[2]
VENV_ENV = "AIRFLOW_CONDUIT_WHEEL_VENV"
DAG_ID = "conduit_kafka_orders_to_delta"
COMMAND_TIMEOUT_SECONDS = 900


@dataclass
class Installed:
    venv: Path
    home: Path  # the user's folder: AIRFLOW_HOME, dags/, examples/ (outside the checkout)
    env: dict[str, str]

    def run(self, *argv: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(self.venv / "bin" / argv[0]), *argv[1:]], cwd=self.home, env={**self.env, **(extra_env or {})},
            capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS,
        )
        assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        return done

    def python(self, code: str) -> str:
        return self.run("python", "-c", code).stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    if not os.environ.get(VENV_ENV):
        pytest.fail(f"run through `make test-wheel`: {VENV_ENV} names the venv the built wheel is installed in")
    venv = Path(os.environ[VENV_ENV])
    home = tmp_path_factory.mktemp("wheel-user")
    env = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ["HOME"],  # Spark's Ivy cache (~/.ivy2.5.2): the connectors are downloaded once
        "LANG": "C.UTF-8",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow' / 'airflow.db'}",
        "CONDUIT_STATE_ROOT": str(home / "state"),
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    (home / "dags").mkdir()
    shutil.copy(REPO / "dags" / f"{DAG_ID}.py", home / "dags")
    shutil.copytree(REPO / "examples" / "kafka_delta", home / "examples" / "kafka_delta",
                    ignore=shutil.ignore_patterns("out", "state*"))
    shutil.copy(REPO / "examples" / "orders" / "expected.json", home / "expected.json")
    found = Installed(venv, home, env)
    found.run("airflow", "db", "migrate")
    return found


def test_the_wheel_is_installed_not_the_checkout_on_another_python(installed):
    where = json.loads(installed.python(
        "import json, sys, airflow_conduit; from importlib.metadata import distribution; "
        "d = distribution('airflow-conduit'); "
        "print(json.dumps({'file': airflow_conduit.__file__, 'python': list(sys.version_info[:2]), "
        "'direct_url': d.read_text('direct_url.json') or ''}))"
    ))
    assert Path(where["file"]).is_relative_to(installed.venv), where["file"]
    assert "site-packages" in where["file"] and not Path(where["file"]).is_relative_to(REPO / "airflow_conduit")
    assert '"editable": true' not in where["direct_url"] and ".whl" in where["direct_url"]  # the wheel file
    assert tuple(where["python"]) != sys.version_info[:2]  # not the main venv's Python
    assert not (Path(where["file"]).parents[1] / "jars").exists()  # no jars/ beside the installed package


def test_airflow_providers_list_shows_the_provider_with_its_version(installed):
    providers = json.loads(installed.run("airflow", "providers", "list", "-o", "json").stdout)
    [ours] = [p for p in providers if p["package_name"] == "airflow-conduit"]
    assert ours["version"] == airflow_conduit.__version__


def test_the_ui_plugin_registers_from_the_wheels_entry_point(installed):
    plugins = json.loads(installed.run("airflow", "plugins", "-o", "json").stdout)
    [ours] = [p for p in plugins if p["name"] == "airflow_conduit"]
    assert ours["source"].startswith(f"airflow-conduit=={airflow_conduit.__version__}")
    assert [app["url_prefix"] for app in ours["fastapi_apps"]] == ["/conduit"]
    assert "Pipelines" in [view["name"] for view in ours["external_views"]]


def test_the_cli_validates_a_spec_and_names_the_pinned_connectors(installed):
    spec = installed.home / "examples" / "kafka_delta" / "pipeline.yaml"
    validated = installed.run("airflow-conduit", "validate", str(spec), extra_env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092"})
    assert validated.stdout.startswith(f"OK: {spec}: pipeline kafka-orders")
    packages = installed.run("airflow-conduit", "jars", "packages").stdout.strip().split(",")
    assert any(p.startswith("org.apache.spark:spark-sql-kafka-0-10_2.13:") for p in packages)
    assert any(p.startswith("io.delta:delta-spark_") for p in packages)


def test_the_kafka_to_delta_reference_dag_runs_end_to_end_from_the_wheel(installed, kafka):
    """dag.test() (`airflow dags test`) of the reference DAG on a copy of its example: the good orders land in
    the Delta table, the bad ones in the DLQ topic, with connectors Spark's Ivy resolved (no jars folder)."""
    from confluent_kafka import KafkaException

    for topic, partitions in (("orders", 2), ("orders-dlq", 1)):
        try:
            kafka.create_topic(topic, partitions=partitions)
        except KafkaException as exc:  # the session's broker: another module may have made it
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    example = installed.home / "examples" / "kafka_delta"
    lines = (example / "sample" / "orders.jsonl").read_bytes().splitlines()
    for partition in (0, 1):
        kafka.produce("orders", lines[partition::2], partition=partition)
    state_dir = installed.home / "state" / "kafka-orders"
    conf = {"spec": str(example / "pipeline.yaml"), "state_dir": str(state_dir)}
    installed.run("airflow", "dags", "test", DAG_ID, "-c", json.dumps(conf),
                  extra_env={"KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap})

    expected = json.loads((installed.home / "expected.json").read_text())
    rows = delta_rows(example / "out" / "orders")
    assert sorted(r["id"] for r in rows) == sorted(expected["written_ids"])
    assert len(kafka.read_all("orders-dlq")) == len(expected["dlq"])
    driver_logs = "".join(p.read_text(errors="replace") for p in state_dir.glob("runs/*/driver.log"))
    assert "spark-sql-kafka-0-10_2.13" in driver_logs and ":: resolving dependencies ::" in driver_logs  # Ivy


def delta_rows(table: Path) -> list[dict]:
    """The rows of an append-only Delta table, read from its log's added files (no Spark in this process)."""
    import pyarrow.parquet as pq

    live: set[str] = set()
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                live.add(action["add"]["path"])
            if "remove" in action:
                live.discard(action["remove"]["path"])
    return [row for path in sorted(live) for row in pq.read_table(table / path).to_pylist()]
