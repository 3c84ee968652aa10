"""One run of a Spark Declarative Pipelines project under the recovery engine (launched as spark-pipelines is).

    spark-class org.apache.spark.deploy.SparkPipelines airflow_conduit/spark/sdp/runner.py [spark-submit options] \\
        --remote local[*] --spec spark-pipeline.yml --run-id RUN_ID --state-dir STATE_DIR [--faults JSON]

It does what ``spark-pipelines run`` does (``internals.py``) with SDP's own flow retries off
(``spark.sql.pipelines.maxFlowRetryAttempts=0``: the engine owns retries), and keeps what the CLI
throws away: it writes the product's run report (``STATE_DIR/runs/<run-id>/report.json``, with a
``flows`` key: each flow's state timeline, rows written, error chain), and on failure the structured
error (``AIRFLOW_CONDUIT_ERROR {json}`` on stderr, exit 70 fatal / 75 transient / 78 a refused project)
classified from the run's typed exception, the failing flow's streaming error and the flow messages.

``--faults`` (tests, demos): ``{"transient_first_runs": N}`` as for a pipeline run, and
``{"transient_after_batch": {"flow": F, "batch": B}}``: once per state dir, the run ends with an injected
transient failure (1500) right after flow F committed batch B.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the package comes from --py-files or site-packages
    sys.path[:] = [p for p in sys.path if Path(p).resolve() != Path(__file__).resolve().parent]

from airflow_conduit.spark.pyspark_path import without_redundant_pyspark_zip  # noqa: E402

sys.path[:] = without_redundant_pyspark_zip(sys.path)

from airflow_conduit.recovery import codes  # noqa: E402
from airflow_conduit.recovery.classify import structured_error_from_exception  # noqa: E402
from airflow_conduit.recovery.errors import StructuredError, TransientError  # noqa: E402
from airflow_conduit.runs.report import RunReport, read_json, report_path, utc_now_iso, write_json_atomic  # noqa: E402
from airflow_conduit.runs.status import RunStatus  # noqa: E402
from airflow_conduit.spark.sdp.events import RunEvents, error_chain, short_name  # noqa: E402
from airflow_conduit.spark.sdp.launch import MAX_FLOW_RETRIES_CONF  # noqa: E402

log = logging.getLogger("airflow_conduit.spark.sdp.runner")
FLOW_STAGE = "flow"  # the structured error's stage; component_type below
FLOW_COMPONENT = "sdp-flow"


class InjectedTransient(TransientError):
    code = codes.INJECTED_TRANSIENT


class FlowFailed(Exception):
    """The run failed: its typed exception (``__cause__``) with what the events and the listener said about the flow."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="airflow_conduit.spark.sdp.runner", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="the project's spark-pipeline.yml")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--faults", default=None)
    parser.add_argument("--replay", default=None, help="a quarantine replay request (JSON)")
    parser.add_argument("--name", default=None, help=argparse.SUPPRESS)  # spark-submit's, passed on by SparkPipelines
    return parser.parse_args(argv)


class SdpRun:
    """The report of one run, kept up to date from the events (main thread) and the streaming listener (its thread)."""

    def __init__(self, report: RunReport, path: Path, state_dir: Path, faults: dict[str, Any]):
        self.report, self.path, self.state_dir, self.faults = report, path, state_dir, faults
        self.events = RunEvents()
        self.lock = threading.Lock()
        self.query_flows: dict[str, str] = {}  # streaming query id -> flow
        self.listener_errors: dict[str, str] = {}  # flow -> the streaming error's text (with its error class)
        self.injected: InjectedTransient | None = None

    def save(self, durable: bool = False) -> None:
        with self.lock:
            self.report.flows = self.events.to_dict()
            self.report.write_atomic(self.path, durable=durable)

    # -- the flow messages (main thread) ---------------------------------------------------------

    def on_event(self, message: str, at: str) -> None:
        print(f"{at}: {message}", flush=True)  # the driver log keeps what spark-pipelines prints
        with self.lock:
            self.events.on_message(message, at)
            self.report.last_progress_at = at
        self.save()

    # -- the streaming listener (its own thread) ---------------------------------------------------

    def on_started(self, query_id: str, name: str | None) -> None:
        if name:
            self.query_flows[query_id] = short_name(name)

    def on_progress(self, progress: Any) -> None:
        flow = short_name(progress.name or self.query_flows.get(str(progress.id), "?"))
        rows = int(progress.numInputRows or 0)
        observed = dict(progress.observedMetrics or {})
        from airflow_conduit.spark.sdp.expectations import counts_from_observed

        counts = counts_from_observed(flow, observed)
        with self.lock:
            state = self.events.flow(flow)
            state.batches += 1
            batch_id = f"{flow}#{progress.batchId}"
            if counts is None:  # a flow of the project's own: its rows read are its rows appended
                state.rows_written += rows
                self.report.add_batch(batch_id, read=rows, filtered=0, dlq=0, written={flow: rows})
            elif counts.kind == "quarantine":
                state.rows_written += counts.quarantined
                self.report.add_batch(batch_id, read=0, filtered=0, dlq=counts.quarantined, written={})
                if counts.quarantined:
                    self.report.add_counters(deadletterqueue_records_produced=counts.quarantined,
                                             total_record_failures=counts.quarantined)
            else:
                state.rows_written += counts.written
                self.report.add_batch(batch_id, read=counts.read, filtered=counts.dropped, dlq=0,
                                      written={counts.target: counts.written})
                if counts.rules:
                    self.report.add_expectations({flow: counts.rules})
        self.save()
        self._fault_after(flow, int(progress.batchId))

    def on_terminated(self, query_id: str, exception: str | None, error_class: str | None) -> None:
        if exception:
            flow = self.query_flows.get(query_id, "?")
            self.listener_errors[flow] = f"[{error_class}] {exception}" if error_class else exception

    def _fault_after(self, flow: str, batch: int) -> None:
        fault = self.faults.get("transient_after_batch") or {}
        if not fault or short_name(str(fault.get("flow"))) != flow or int(fault.get("batch", -1)) != batch:
            return
        marker = self.state_dir / "faults" / "sdp-transient-after-batch.json"
        if read_json(marker):
            return
        write_json_atomic(marker, {"fired_by": self.report.run_id, "flow": flow, "batch": batch})
        error = StructuredError(code=codes.INJECTED_TRANSIENT, fatal=False, stage=FLOW_STAGE, component_id=flow,
                                component_type=FLOW_COMPONENT, exception_class="InjectedTransient",
                                message=f"injected transient failure after flow {flow} committed batch {batch}")
        finish(self, error)  # the listener's thread cannot stop the run: this process ends here, as a crash would
        os._exit(codes.EXIT_TRANSIENT)

    # -- the end ---------------------------------------------------------------------------------------

    def failure(self, exc: BaseException, registering: str | None) -> StructuredError:
        """The run's failure, classified: the flow, its condition, the flows skipped downstream, the error chain."""
        failed = self.events.failed()
        flow = failed[0] if failed else (short_name(registering) if registering else None)
        texts = [str(exc)] + [self.listener_errors[f] for f in failed if f in self.listener_errors]
        texts = [text for text in texts + self.events.messages if text.strip()]
        chain = [typed_error(exc)] + [c for c in error_chain("\n".join(texts))]
        chain = _unique(chain)
        wrapped = FlowFailed("\n".join(texts))
        wrapped.__cause__ = exc
        skipped = self.events.skipped()
        error = structured_error_from_exception(
            wrapped, stage=FLOW_STAGE, component_id=flow, component_type=FLOW_COMPONENT,
            extra={"flow": flow, "failed_flows": failed, "skipped_flows": skipped, "error_chain": chain})
        condition = next((c["condition"] for c in chain[1:] if c.get("condition")), None) or chain[0].get("condition")
        where = f"flow {flow}" if flow else "the pipeline"
        error.message = error.message.removeprefix(f"{FlowFailed.__name__}: ").removeprefix(f"{FlowFailed.__name__}:").strip()
        error.message = (f"{where} failed: [{condition}] {error.message}" if condition else f"{where} failed: {error.message}")
        if skipped:
            error.message += f" (skipped downstream: {', '.join(skipped)})"
        return error


def typed_error(exc: BaseException) -> dict[str, Any]:
    """The run's typed exception: error class, SQLSTATE, parameters (PySparkException's accessors)."""
    def call(name: str) -> Any:
        method = getattr(exc, name, None)
        try:
            return method() if callable(method) else None
        except Exception:  # noqa: BLE001 - an accessor that fails tells nothing
            return None

    return {"exception_class": f"{type(exc).__module__}.{type(exc).__qualname__}", "condition": call("getCondition"),
            "sqlstate": call("getSqlState"), "parameters": call("getMessageParameters") or {},
            "message": str(exc).splitlines()[0][:500] if str(exc) else ""}


def _unique(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for entry in chain:
        key = entry.get("condition") or entry.get("message")
        if key in seen:
            continue
        seen.add(key)
        out.append(entry)
    return out


def finish(run: SdpRun, error: StructuredError | None) -> int:
    """Write the report's end (durable) and, on failure, the error line; the exit code."""
    with run.lock:
        if error is None:
            run.report.status = RunStatus.SUCCEEDED
            run.report.ended_at = utc_now_iso()
        else:
            run.report.fail(error.to_dict())
    try:
        run.save(durable=True)
    except OSError:
        log.warning("the run report could not be written: %s", run.path, exc_info=True)
    if error is None:
        return codes.EXIT_OK
    print(error.to_error_line(), file=sys.stderr, flush=True)
    return codes.EXIT_FATAL if error.fatal else codes.EXIT_TRANSIENT


def add_listener(spark: Any, run: SdpRun) -> None:
    from pyspark.sql.streaming import StreamingQueryListener

    class FlowListener(StreamingQueryListener):
        def onQueryStarted(self, event):  # noqa: N802 - PySpark's names
            run.on_started(str(event.id), event.name)

        def onQueryProgress(self, event):  # noqa: N802
            try:
                run.on_progress(event.progress)
            except Exception:  # noqa: BLE001 - a report that cannot be updated must not end the run
                log.warning("progress of a flow not recorded", exc_info=True)

        def onQueryIdle(self, event):  # noqa: N802
            pass

        def onQueryTerminated(self, event):  # noqa: N802
            run.on_terminated(str(event.id), event.exception, getattr(event, "errorClassOnException", None))

    spark.streams.addListener(FlowListener())


WAREHOUSE_CONF = "spark.sql.warehouse.dir"


def session(spec: Any, project_dir: Path) -> Any:
    """The Connect session, as the CLI builds it, but on a local server of its own port (``internals.start_local_server``).

    The tables live in the project's ``spark-warehouse`` unless it says otherwise: a run's working directory is its
    run folder, and each run would get a warehouse of its own.
    """
    from airflow_conduit.spark.sdp import internals

    options = {"spark.sql.connect.serverStacktrace.enabled": "false", WAREHOUSE_CONF: str(project_dir / "spark-warehouse"),
               **persistent_catalog(spec, project_dir),
               **{key: str(value) for key, value in spec.configuration.items()}, MAX_FLOW_RETRIES_CONF: "0"}
    return internals.connect_session(os.environ.get("SPARK_REMOTE") or "local", free_port(), options)


CATALOG_CONF = "spark.sql.catalogImplementation"
METASTORE_URL_CONF = "spark.hadoop.javax.jdo.option.ConnectionURL"


def persistent_catalog(spec: Any, project_dir: Path) -> dict[str, str]:
    """A catalog that outlives the run, unless the project chose one: a Hive metastore (Derby) in the project folder.

    Spark's default in-memory catalog forgets the tables when the run ends, and SDP's next run then refuses to
    create them again over their data (LOCATION_ALREADY_EXISTS): no second run, no restart, no resumed stream.
    """
    if CATALOG_CONF in spec.configuration or spec.catalog:
        return {}
    metastore = project_dir / "metastore_db"
    return {CATALOG_CONF: "hive", METASTORE_URL_CONF: f"jdbc:derby:;databaseName={metastore};create=true"}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def storage_of(spec: Any, project_dir: Path) -> str:
    """SDP's checkpoint root; a relative one is the project's (not the run folder's, which changes every run)."""
    storage = str(spec.storage)
    return storage if "://" in storage or os.path.isabs(storage) else str(project_dir / storage)


def sql_conf(spec: Any, spark: Any) -> dict[str, str]:
    """The flows' SQL configuration: the project's, with SDP's own flow retries off whatever it says, and without the
    Spark configs a running session cannot change (``spark.sql.warehouse.dir``...: SDP would set them on every flow and
    fail it with CANNOT_MODIFY_STATIC_CONFIG, SQLSTATE 46110; the session got them when it started)."""
    conf = {key: value for key, value in spec.configuration.items()
            if not key.startswith("spark.") or spark.conf.isModifiable(key)}
    if conf.get(MAX_FLOW_RETRIES_CONF, "0") != "0":
        log.warning("%s=%s in the project is replaced by 0: the recovery engine restarts failed runs",
                    MAX_FLOW_RETRIES_CONF, conf[MAX_FLOW_RETRIES_CONF])
    conf[MAX_FLOW_RETRIES_CONF] = "0"
    return conf


def refused(run: SdpRun, message: str, exc: BaseException) -> int:
    error = StructuredError(code=codes.INVALID_SPEC, fatal=True, message=message, stage="runner",
                            exception_class=f"{type(exc).__module__}.{type(exc).__qualname__}")
    finish(run, error)
    return codes.EXIT_INVALID_SPEC


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = parse_args(argv)
    log.info("run %s: driver started", args.run_id)
    state_dir = Path(args.state_dir).absolute()
    spec_path = Path(args.spec).absolute()
    report = RunReport(pipeline_id=spec_path.parent.name, run_id=args.run_id, started_at=utc_now_iso())
    try:
        faults = json.loads(args.faults) if args.faults else {}
    except ValueError as exc:
        faults = {}
        return refused(SdpRun(report, report_path(state_dir, args.run_id), state_dir, faults), f"--faults: {exc}", exc)
    run = SdpRun(report, report_path(state_dir, args.run_id), state_dir, faults)
    from airflow_conduit.spark.sdp import internals

    try:
        spec = internals.load_spec(spec_path)
    except Exception as exc:  # noqa: BLE001 - a project SDP refuses: named, not a traceback
        return refused(run, f"{spec_path}: {exc}", exc)
    report.pipeline_id = spec.name
    try:
        from airflow_conduit.spark.faults import check_start_faults

        check_start_faults(state_dir, faults)
    except TransientError as exc:
        return finish(run, StructuredError(code=exc.code, fatal=False, message=str(exc), stage="runner",
                                           exception_class=type(exc).__name__))
    run.report.status = RunStatus.RUNNING
    run.save(durable=True)
    registry = None
    spark = None
    try:
        spark = session(spec, spec_path.parent)
        log.info("run %s: session ready", args.run_id)
        add_listener(spark, run)
        graph = internals.create_graph(spark, spec, sql_conf(spec, spark))
        registry = internals.NamingRegistry(spark, graph)
        internals.register_into(registry, spark, spec_path, spec, graph)
        registry.registering = None
        for result in internals.start_run(spark, graph, storage_of(spec, spec_path.parent)):
            event = internals.event_of(result)
            if event is not None:
                message, at = event
                run.on_event(message, at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        error = None
        record_table_rows(spark, run)
    except Exception as exc:  # noqa: BLE001 - every failure of the run is classified and reported
        error = run.failure(exc, registry.registering if registry is not None else None)
    finally:
        if spark is not None:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - the server may be gone already
                pass
    return finish(run, error)


def record_table_rows(spark: Any, run: SdpRun) -> None:
    """Materialized views write no stream progress: their rows are the table's, counted once the run completed."""
    for name, flow in list(run.events.flows.items()):
        if flow.batches == 0 and flow.state == "COMPLETED":
            try:
                flow.rows_written = int(spark.read.table(name).count())
            except Exception:  # noqa: BLE001 - a flow into a sink or a view has no table to count
                pass


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # a local Connect server's threads can keep a finished interpreter from exiting
