"""PySpark's internal pipeline functions, the only module that touches them (docs/sdp.md, the runner).

``spark-pipelines run`` is ``pyspark/pipelines/cli.py``: it loads the project's ``spark-pipeline.yml``,
creates a dataflow graph on the Spark Connect server, imports the project's definitions into it and
starts a run whose events it prints. The runner (``spark/sdp/runner.py``) does the same steps with the
same functions, so that it keeps what the CLI throws away: the typed exception of a failed run, the
events as they arrive, and which flow a registration failure belongs to.

``tests/spark/test_sdp_internals.py`` pins every name and signature used here: a PySpark upgrade that
changes one fails there, not in a user's run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from pyspark.pipelines import cli as _cli
from pyspark.pipelines import spark_connect_pipeline as _scp
from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry

SPEC_FILE_NAMES: tuple[str, ...] = tuple(_cli.PIPELINE_SPEC_FILE_NAMES)
PipelineSpec = _cli.PipelineSpec


def load_spec(path: str | Path) -> Any:
    """The project's ``spark-pipeline.yml`` as SDP reads it (``PipelineSpec``: name, storage, configuration...)."""
    return _cli.load_pipeline_spec(Path(path))


def connect_session(remote: str, port: int, options: dict[str, str]) -> Any:
    """The run's Spark Connect session; for ``--remote local[...]`` on a local server of its own ``port``.

    PySpark starts a local server on the fixed port 15002 and connects to ``sc://localhost``: two runs on one
    machine (two pipelines, or another user's) would collide. Same server, started the same way, its own port;
    then PySpark's Connect mode on, as its builder turns it on for a local remote.
    """
    import os

    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    if remote.startswith("local"):
        RemoteSparkSession._start_connect_server(remote, {**options, "spark.connect.grpc.binding.port": str(port)})
        remote = f"sc://localhost:{port}"
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return RemoteSparkSession.builder.remote(remote).config(map=dict(options)).getOrCreate()


def create_graph(spark: Any, spec: Any, sql_conf: dict[str, str]) -> str:
    """A dataflow graph on the Connect server; its id."""
    return _scp.create_dataflow_graph(spark, default_catalog=spec.catalog, default_database=spec.database,
                                      sql_conf=sql_conf)


class NamingRegistry(SparkConnectGraphElementRegistry):
    """The CLI's registry, remembering which flow or SQL file was being registered when the server refused it."""

    registering: str | None = None

    def register_flow(self, flow: Any) -> None:  # noqa: D401 - the base class's method
        self.registering = getattr(flow, "name", None)
        super().register_flow(flow)
        self.registering = None

    def register_output(self, output: Any) -> None:
        self.registering = getattr(output, "name", None)
        super().register_output(output)
        self.registering = None

    def register_sql(self, sql_text: str, file_path: Path) -> None:
        self.registering = str(file_path)
        super().register_sql(sql_text, file_path)
        self.registering = None


def register_into(registry: NamingRegistry, spark: Any, spec_path: str | Path, spec: Any, graph_id: str) -> None:
    """Import the project's Python and SQL definitions into the graph, as ``spark-pipelines run`` does."""
    _cli.register_definitions(Path(spec_path), registry, spec, spark, graph_id)


def start_run(spark: Any, graph_id: str, storage: str, *, full_refresh: list[str] | None = None,
              full_refresh_all: bool = False, refresh: list[str] | None = None, dry: bool = False) -> Iterator[Any]:
    """Start the run; its results as the server streams them (``pipeline_event_result`` dicts, see ``event_of``)."""
    return _scp.start_run(spark, graph_id, full_refresh=full_refresh or [], full_refresh_all=full_refresh_all,
                          refresh=refresh or [], dry=dry, storage=storage)


def event_of(result: dict[str, Any]) -> tuple[str, Any] | None:
    """``(message, timestamp as an aware datetime)`` of one run result, None for the run's start acknowledgement."""
    if "pipeline_event_result" not in result:
        return None
    event = result["pipeline_event_result"].event
    from datetime import timezone

    return event.message, event.timestamp.ToDatetime().replace(tzinfo=timezone.utc)
