"""RecoveringDeclarativePipelineOperator: a Spark Declarative Pipelines project under the recovery engine.

A thin subclass of ``RecoveringSparkPipelineOperator``: the same run supervisor, deferral, recovery options,
budgets, XCom, sensors and UI. Only what is submitted differs: the project's ``spark-pipeline.yml`` instead of a
pipeline spec, run by ``spark/sdp/runner.py`` launched as ``spark-pipelines`` is (``spark/sdp/launch.py``) with
SDP's own flow retries off. The runner writes the same run report, structured error and exit codes as a pipeline
run, so the engine classifies and restarts it like any other (docs/sdp.md says why a subclass).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import yaml
from airflow.sdk.exceptions import AirflowFailException

from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
from airflow_conduit.spark.sdp.launch import LAUNCH_OPTION, MAX_FLOW_RETRIES_CONF, UnsupportedMaster, remote_for, runner_path

SPEC_FILE_NAMES = ("spark-pipeline.yml", "spark-pipeline.yaml")  # SDP's (pinned by tests/spark/test_sdp_internals.py)
REQUIRED_KEYS = ("name", "storage")


def project_spec_file(project: str | os.PathLike[str]) -> Path:
    """The project's ``spark-pipeline.yml``: ``project`` itself, or the one file of that name in the folder."""
    path = Path(project).absolute()
    if path.is_dir():
        found = [path / name for name in SPEC_FILE_NAMES if (path / name).is_file()]
        if len(found) != 1:
            raise AirflowFailException(f"pipeline_project {project}: expected one of {', '.join(SPEC_FILE_NAMES)} "
                                       f"in the folder, found {len(found)}; nothing was submitted")
        return found[0]
    if not path.is_file():
        raise AirflowFailException(f"pipeline_project {project}: no such file or folder; nothing was submitted")
    return path


def read_project(spec_file: Path) -> dict[str, Any]:
    """The project's spec, checked for what SDP requires (the runner refuses the rest, named, in its report)."""
    try:
        data = yaml.safe_load(spec_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AirflowFailException(f"{spec_file}: {exc}; nothing was submitted") from None
    if not isinstance(data, dict):
        raise AirflowFailException(f"{spec_file}: expected a mapping of name, storage, libraries...; nothing was submitted")
    missing = [key for key in REQUIRED_KEYS if not data.get(key)]
    if missing:
        raise AirflowFailException(f"{spec_file}: missing key(s) {', '.join(missing)}; nothing was submitted")
    return data


def warehouse_of(spec_file: Path, data: dict[str, Any]) -> str:
    """Where the project's tables (and their ``_quarantine`` tables) are: its warehouse dir, else the runner's default."""
    configured = (data.get("configuration") or {}).get("spark.sql.warehouse.dir")
    return str(configured) if configured else str(spec_file.parent / "spark-warehouse")


class RecoveringDeclarativePipelineOperator(RecoveringSparkPipelineOperator):
    """Run a Spark Declarative Pipelines project; restart it with backoff on transient errors, degrade on fatal ones.

    :param pipeline_project: the project's ``spark-pipeline.yml``, or its folder
    :param state_dir: the pipeline's state directory (run reports, recovery.json; SDP keeps its checkpoints in the
        project's ``storage``)
    :param conn_id: a Spark connection whose master is ``local[...]`` (a Connect server started per run) or
        ``sc://host:port`` (a Spark Connect server); the other arguments are ``RecoveringSparkPipelineOperator``'s
    """

    template_fields: Sequence[str] = ("pipeline_project", "state_dir", "conn_id", "backend_options")

    def __init__(self, *, pipeline_project: str, state_dir: str, **kwargs: Any):
        super().__init__(spec=str(pipeline_project), state_dir=state_dir, **kwargs)
        self.pipeline_project = str(pipeline_project)

    def _spec_path(self) -> str:
        return str(project_spec_file(self.pipeline_project))

    def _validated_spec(self) -> tuple[str, Any]:
        spec_file = project_spec_file(self.pipeline_project)
        data = read_project(spec_file)
        dlq = SimpleNamespace(plugin="file", settings={"path": warehouse_of(spec_file, data)})
        return str(spec_file), SimpleNamespace(id=str(data["name"]), dead_letter_queue=dlq)

    def get_hook(self):
        """The hook of the task's connection, its local backend launching the runner as ``spark-pipelines`` does."""
        if self.backend not in (None, "local"):
            raise AirflowFailException(f"backend {self.backend!r}: a declarative pipeline runs on the local backend only")
        self.backend_options = {**self.backend_options, "launch": LAUNCH_OPTION, "application": runner_path()}
        self.spark_conf = {**(self.spark_conf or {}), MAX_FLOW_RETRIES_CONF: "0"}
        self.backend = "local"
        hook = super().get_hook()
        try:
            remote_for(hook.connection_settings["master"])
        except UnsupportedMaster as exc:
            raise AirflowFailException(f"Spark connection {self.conn_id!r}: {exc}; nothing was submitted") from None
        return hook
