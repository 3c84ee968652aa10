"""The Spark standalone launcher against a real master and worker on 127.0.0.1 (REST submission on).

The pipeline's driver runs in the cluster (submitted over the master's REST API with mainClass
SparkSubmit); the fault injection SIGKILLs it after the lake destination wrote
batch 0 and before the DLQ and the batch commit. The operator sees the driver FAILED without a
structured error, classifies it as an infrastructure failure (transient), restarts it, and the
outputs hold every good record once and every bad record once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import dlq_lines, lake_ids, run_test_dag, xcoms
from ports import free_port

pytestmark = pytest.mark.integration


def spark_class() -> str:
    return str(Path(sys.executable).parent / "spark-class")


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """A master (REST submission enabled) and one worker, both on loopback, for this module."""
    folder = tmp_path_factory.mktemp("standalone")
    ports = {name: free_port() for name in ("master", "rest", "master_ui", "worker_ui")}
    props = folder / "master.properties"
    props.write_text(f"spark.master.rest.enabled true\nspark.master.rest.port {ports['rest']}\n")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    procs = []

    def start(args: list[str], log: str) -> subprocess.Popen:
        with open(folder / log, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(proc)
        return proc

    master_url = f"spark://127.0.0.1:{ports['master']}"
    start([spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(ports["master"]),
           "--webui-port", str(ports["master_ui"]), "--properties-file", str(props)], "master.log")
    start([spark_class(), "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1", "--cores", "3",
           "--memory", "4g", "--work-dir", str(folder / "work"), "--webui-port", str(ports["worker_ui"])], "worker.log")
    deadline = time.monotonic() + 90
    while True:
        try:
            state = httpx.get(f"http://127.0.0.1:{ports['master_ui']}/json/", timeout=2).json()
            if state.get("aliveworkers") == 1:
                httpx.get(f"http://127.0.0.1:{ports['rest']}/", timeout=2)  # REST server answers (404 is fine)
                break
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"standalone cluster did not start; see {folder}")
        time.sleep(1)
    conn_id = "spark_standalone_test"
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": ports["master"],
         "extra": {"deploy-mode": "cluster", "rest-port": str(ports["rest"]), "master-ui-port": str(ports["master_ui"])}}
    )
    yield {"conn_id": conn_id, "ports": ports, "folder": folder, "master_ui": f"http://127.0.0.1:{ports['master_ui']}"}
    for proc in reversed(procs):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)


def test_driver_killed_mid_run_is_restarted_and_outputs_stay_exactly_once(airflow_db, standalone_cluster, orders):
    state_dir = orders / "state"
    dr = run_test_dag(
        "standalone_crash_restart",
        spec=str(orders / "pipeline.yaml"),
        state_dir=str(state_dir),
        conn_id=standalone_cluster["conn_id"],
        min_delay="1s",
        max_retries=3,
        poll_interval=1,
        backend_options={"faults": {"crash_after_destination": {"destination": "lake", "batch": 0}}},
    )
    assert dr.state == "success"
    values = xcoms(dr.dag_id, dr.run_id)
    assert values["conduit_job"]["backend"] == "standalone"
    assert values["conduit_job"]["driver_id"].startswith("driver-")
    assert values["return_value"]["submissions"] == 2
    events = values["audit_log"]
    [failure] = [e for e in events if e["event"] == "failed"]
    assert failure["details"]["classification"]["code"] == 1400  # infrastructure: the driver was killed
    assert [e["event"] for e in events][-1] == "stopped"

    # The first run died after the lake wrote batch 0: on restart batch 0 is re-run, the lake skips it
    # (already committed for that batch), the DLQ writes it. Every record once.
    expected = json.loads((orders / "expected.json").read_text())
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])
    assert len(dlq_lines(orders / "out" / "dlq")) == len(expected["dlq"])

    # Both drivers ran in the cluster, as applications with executors on the worker.
    cluster = httpx.get(f"{standalone_cluster['master_ui']}/json/", timeout=5).json()
    assert sorted(d["state"] for d in cluster["completeddrivers"]) == ["FAILED", "FINISHED"]
    assert len(cluster["completedapps"]) == 2
    assert values["_link_SparkUILink"].startswith("/conduit/log?dag_id=")  # the UI plugin's driver log page


def test_a_running_driver_is_killed_and_confirmed_gone(standalone_cluster, orders):
    from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook
    from airflow_conduit.runs.handles import JobHandle

    spec = orders / "continuous.yaml"
    spec.write_text((orders / "pipeline.yaml").read_text().replace("mode: available-now", "mode: continuous"))
    hook = SparkPipelineHook(standalone_cluster["conn_id"])
    assert hook.backend_kind == "standalone"
    handle = hook.submit_job(str(spec), "killme", str(orders / "state-kill"))
    deadline = time.monotonic() + 120
    while SparkPipelineHook.get_job_status(handle).driver_state != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(1)
    stored = JobHandle.from_dict(json.loads(json.dumps(handle.to_dict())))  # as the trigger/on_kill get it back: ids, no connection lookup
    # Before a next submission the hook makes sure this driver is gone: REST kill, then the master's word.
    SparkPipelineHook.backend_for_handle(stored).ensure_gone(stored)
    status = SparkPipelineHook.get_job_status(stored)
    assert not SparkPipelineHook.is_job_active(status)
    assert status.state == "failed" and status.driver_state == "KILLED"
