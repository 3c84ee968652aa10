"""``airflow-conduit run PIPELINE.yaml --state-dir DIR``: run a pipeline locally, recovering like the operator.

Same pieces as RecoveringSparkPipelineOperator, without Airflow scheduling:
the hook's local backend (spark-submit, ``local[*]`` unless --master/--conn-id say
otherwise), the same run loop (``runs.service.RunService``: decisions, refused
submissions, timeline, the store), the trigger's watcher (``RunWatcher``, run
in-process) and real sleeping for the backoff delays. Prints the recovery
timeline; keeps ``STATE_DIR/recovery.json`` up to date (read by PipelineStateSensor).

Exit codes: 0 the pipeline finished (stopped), 2 the spec, an option or the
connection was refused (nothing started), 3 the pipeline is degraded, 4 another
driver holds the state dir's lease (nothing started), 5 the run could not be
started on this machine, 130 interrupted or SIGTERM (the job was stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_conduit.runs.handles import JobHandle
    from airflow_conduit.runs.service import Finished, Next, RunService

EXIT_OK = 0
EXIT_SPEC_REFUSED = 2  # the spec or an option (state dir, recovery options, --faults) was refused
EXIT_DEGRADED = 3
EXIT_LEASE_HELD = 4
EXIT_NOT_STARTED = 5  # the backend could not start a run (an OS error, the Spark binary missing...)
EXIT_INTERRUPTED = 130
CLI_CONN_ID = "conduit_cli_master"
MAX_POLL_INTERVAL = 3600.0
LEASE_RELEASE_WAIT_SECONDS = 60.0

OPTION_FLAGS = (
    ("--min-delay", "min_delay", "Conduit min-delay (default 1s)"),
    ("--max-delay", "max_delay", "Conduit max-delay (default 10m)"),
    ("--backoff-factor", "backoff_factor", "Conduit backoff-factor (default 2)"),
    ("--max-retries", "max_retries", "Conduit max-retries: restarts within the window; -1 infinite (default), 0 none"),
    ("--max-retries-window", "max_retries_window", "Conduit max-retries-window (default 5m)"),
    ("--policy", "policy", "backoff policy: exponential (default), strimzi, fixed"),
    ("--crash-loop-limit", "crash_loop_limit", "degrade when the same error ends N runs in a row with no record; -1 off (default)"),
)


def _say(line: str) -> None:
    print(f"{datetime.now(timezone.utc).strftime('%H:%M:%S')} {line}", flush=True)


def _options(args: argparse.Namespace):
    from airflow_conduit.recovery import RecoveryOptions

    # Text as typed: the recovery options read durations and numbers themselves (and name the option on error).
    values = {name: getattr(args, name) for _, name, _ in OPTION_FLAGS}
    return RecoveryOptions.from_mapping({name: value for name, value in values.items() if value is not None})


def _conf(args: argparse.Namespace) -> dict:
    return {} if args.spark_ui else {"spark.ui.enabled": "false"}  # nobody is shown it unless asked; it costs start-up


def _hook(args: argparse.Namespace):
    """The hook of --conn-id, or of --master as a spark connection of this process (no Airflow DB needed)."""
    from airflow_conduit.hooks.spark_pipeline import SparkPipelineHook

    conn_id = args.conn_id
    if conn_id is None:
        os.environ[f"AIRFLOW_CONN_{CLI_CONN_ID.upper()}"] = json.dumps({"conn_type": "spark", "host": args.master})
        conn_id = CLI_CONN_ID
    return SparkPipelineHook(conn_id, backend="local", backend_options={"conf": _conf(args)})


def _backend_without_airflow(args: argparse.Namespace):
    """The local backend for a plain ``--master`` (``local[*]``, ``spark://host:port``) when Airflow's configuration
    sets no ``[conduit]`` option: the run is submitted, watched and ended without loading Airflow (its import is
    most of this command's start-up). None otherwise: the hook reads the connection and the configuration."""
    from airflow_conduit.get_provider_info import WORKER_CONFIG_OPTIONS
    from airflow_conduit.hooks.backends.local import LocalBackend
    from airflow_conduit.hooks.spark_submit_adapter import is_plain_master

    if args.conn_id is not None or not is_plain_master(args.master.strip()) or _conduit_config_set():
        return None
    jars = [jar.strip() for jar in WORKER_CONFIG_OPTIONS["worker_jars"][1].split(",") if jar.strip()]
    return LocalBackend(master=args.master.strip(), conf=_conf(args), worker_jars=jars,
                        spark_local_ip=WORKER_CONFIG_OPTIONS["spark_local_ip"][1] or None)


def _conduit_config_set() -> bool:
    """Whether Airflow's configuration may set a ``[conduit]`` option: an ``AIRFLOW__CONDUIT__*`` variable, or a
    ``[conduit]`` section in its ``airflow.cfg``."""
    if any(key.startswith("AIRFLOW__CONDUIT__") for key in os.environ):
        return True
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    path = os.environ.get("AIRFLOW_CONFIG") or os.path.join(home, "airflow.cfg")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return any(line.strip().lower() == "[conduit]" for line in fh)
    except OSError:
        return False


def _control_plane_errors() -> tuple:
    """The control-plane errors, once one exists: their module imports Airflow, and a run that was submitted
    without it (``_backend_without_airflow``) loads it only when one is raised."""
    if "airflow_conduit.hooks.errors" not in sys.modules:
        return ()
    from airflow_conduit.hooks.errors import ConduitControlPlaneError

    return (ConduitControlPlaneError,)


def _lease_refusals() -> tuple:
    if "airflow_conduit.hooks.errors" not in sys.modules:
        return ()
    from airflow_conduit.hooks.refusals import LEASE_REFUSALS

    return LEASE_REFUSALS


def _stop_on_sigterm() -> None:
    """SIGTERM stops the pipeline like Ctrl-C does (the job is stopped, recovery.json says stopped)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


async def _watch(handle: JobHandle, poll_interval: float, report_progress: bool) -> dict:
    """The watcher's next event (the trigger's watcher, ``hooks/backends/watch.py``). It polls; the CLI, which
    started the driver's wrapper on this machine, also wakes when that process exits, and looks at once instead
    of at the next poll."""
    from airflow_conduit.hooks.backends.watch import RunWatcher

    def next_event() -> asyncio.Future:
        watcher = RunWatcher(handle, poll_interval=poll_interval, report_progress=report_progress)
        return asyncio.ensure_future(anext(watcher.events()))

    watching = next_event()
    with _process_exit(handle.pid) as exited:
        if exited is not None:
            await asyncio.wait({watching, exited}, return_when=asyncio.FIRST_COMPLETED)
    if not watching.done():  # the process exited while the trigger waited for its next poll
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        watching = next_event()
    return await watching


@contextlib.contextmanager
def _process_exit(pid: int | None):
    """A future done when process ``pid`` exits (a pidfd becomes readable then), or None where pidfds are not
    available. A false wake costs one look at the job, never a wrong answer: the watcher reads the exit record."""
    pidfd = None
    if pid and hasattr(os, "pidfd_open"):
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid)
    if pidfd is None:
        yield None
        return
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    try:
        yield exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def _quiet_airflow_logs() -> None:
    """The timeline is the output: keep Airflow's own info lines (spark-submit command, trigger polls) out."""
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # read when airflow is first imported


def run_pipeline(args: argparse.Namespace) -> int:
    _quiet_airflow_logs()
    # Pure modules first: bad input is refused before Airflow is even imported.
    from airflow_conduit.pipeline import SpecError, load_pipeline
    from airflow_conduit.pipeline.faults_option import parse_faults
    from airflow_conduit.pipeline.state_dir_check import usable_state_dir

    try:
        spec = load_pipeline(args.spec)
    except SpecError as exc:
        print(f"FAILED: {args.spec}: the spec was refused, nothing was started", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_SPEC_REFUSED
    try:
        options = _options(args)
        faults = parse_faults(args.faults) or None
        _check_run_flags(args)
        # Absolute from here on: the driver runs in another working directory (a relative path was read twice).
        args.state_dir = usable_state_dir(args.state_dir)
    except ValueError as exc:  # RecoveryConfigError, FaultsError, StateDirError: each names its option
        print(f"FAILED: {exc}; nothing was started", file=sys.stderr)
        return EXIT_SPEC_REFUSED

    from airflow_conduit.hooks import kafka_connections
    from airflow_conduit.hooks.backends.kinds import backend_for_handle, submit_run
    from airflow_conduit.recovery import codes
    from airflow_conduit.runs.service import RunService
    from airflow_conduit.runs.state_dir import StateDir, StateDirFull
    from airflow_conduit.runs.store import RunStore

    state_dir = StateDir(args.state_dir)
    try:
        backend = _backend_without_airflow(args)
        if backend is None:
            hook = _hook(args)
            hook.check_connection()
            backend = hook.backend
        kafka_connections.check(spec, args.spec)
    except _control_plane_errors() as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return EXIT_SPEC_REFUSED

    def submit(run_id: str, previous: JobHandle | None) -> JobHandle:
        return submit_run(backend, args.spec, run_id, args.state_dir, faults, previous=previous)

    # A foreground command ends at once when another driver holds the state dir (the operator waits and retries).
    service = RunService(RunStore(args.state_dir, {"cli": True, "pid": os.getpid()}), submit, _control_plane_errors,
                         _lease_refusals, end_when_leased=True)
    state_dir.keep_reserve()  # before the first run takes the room: recovery.json can still be written on a full disk
    _say(f"pipeline {spec.id}: state dir {args.state_dir}; recovery options {json.dumps(options.to_dict())}")
    _stop_on_sigterm()
    try:
        readable = "cli-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        return _finish(_follow(service, service.start(options, readable_prefix=readable, pipeline_id=spec.id,
                                                      resume_earlier=False), args),
                       service, state_dir, spec)
    except _control_plane_errors() as exc:  # not transient (a connection that became unusable): not retried
        print(f"FAILED: {exc}", file=sys.stderr)
        service.stop(f"not submitted: {exc}")
        return not_started_exit_code(exc)
    except StateDirFull as exc:  # recovery.json cannot be kept: the pipeline cannot be supervised from here
        if service.watched is not None:
            backend_for_handle(service.watched).kill(service.watched, graceful=True)
        print(f"FAILED: {exc}; the pipeline is degraded (code {codes.NO_SPACE_LEFT})", file=sys.stderr)
        return EXIT_DEGRADED
    except KeyboardInterrupt:
        if service.watched is not None:
            _say(f"interrupted: stopping run {service.watched.run_id}")
            backend_for_handle(service.watched).kill(service.watched, graceful=True)
        service.stop("stopped by user (interrupted)")
        return EXIT_INTERRUPTED


def _follow(service: RunService, step: Next, args: argparse.Namespace) -> Finished:
    """Wait the way of a foreground command for what the run service asks (watch in-process, sleep) until the
    pipeline ends, printing its timeline."""
    from airflow_conduit.runs.service import BackoffOver, WaitBackoff, WatchRun

    while isinstance(step, WatchRun | WaitBackoff):
        _say_all(step.lines)
        if isinstance(step, WaitBackoff):
            time.sleep(step.seconds)
            step = service.advance(BackoffOver(step.previous))
            continue
        if step.submitted and args.spark_ui and step.handle.spark_ui:
            _say(f"Spark UI: {step.handle.spark_ui}")
        step = service.advance(asyncio.run(_watch(step.handle, args.poll_interval, step.report_progress)))
    return step


def _finish(step: Finished, service: RunService, state_dir, spec) -> int:
    """How the command ends: what the pipeline's runs did, and its exit code."""
    from airflow_conduit.runs.service import Ending

    if step.ending is Ending.REFUSED:
        print(f"FAILED: {step.message}", file=sys.stderr)
        return EXIT_LEASE_HELD
    _say_all(step.lines)
    if step.handle is not None:
        _let_go_of_the_state_dir(step.handle)
    if step.ending is Ending.DEGRADED:
        _say_input_file_findings(state_dir, service.supervisor)
        print(step.message, file=sys.stderr)
        return EXIT_DEGRADED
    _summary(_pipeline_totals(state_dir, service.supervisor), spec)
    _say_input_file_findings(state_dir, service.supervisor)
    _say_all(_destinations_added(state_dir, service.supervisor))
    return EXIT_OK


def _say_all(lines: list[str]) -> None:
    for line in lines:
        _say(line)


def not_started_exit_code(exc: BaseException) -> int:
    """The exit code of a run the backend did not start: 4 the state dir is busy, 2 a connection is
    unusable, 5 anything else (nothing of that run started either way)."""
    from airflow_conduit.hooks.errors import ConnectionUnusable, StateDirBusy

    if isinstance(exc, StateDirBusy):
        return EXIT_LEASE_HELD
    if isinstance(exc, ConnectionUnusable):
        return EXIT_SPEC_REFUSED
    return EXIT_NOT_STARTED


def _let_go_of_the_state_dir(handle: JobHandle) -> None:
    """Return only once the last run's wrapper let go of the lease (a moment after it recorded the exit):
    a command started right after this one (``dlq replay``, another ``run``) must find the state dir free."""
    from airflow_conduit.hooks.backends import lease

    if handle.lease_path:
        lease.wait_released(handle.lease_path, LEASE_RELEASE_WAIT_SECONDS)


def _check_run_flags(args: argparse.Namespace) -> None:
    """Flags argparse cannot check by type alone; each error names its flag."""
    if not (0 < args.poll_interval <= MAX_POLL_INTERVAL):  # also refuses nan
        raise ValueError(f"--poll-interval: expected seconds between 0 and {MAX_POLL_INTERVAL:g}, got {args.poll_interval!r}")
    if not args.master.strip():
        raise ValueError("--master: empty; give a Spark master URL such as local[*] or spark://host:7077")
    if args.conn_id is not None and not args.conn_id.strip():
        raise ValueError("--conn-id: empty; give an Airflow connection id or leave the flag out")


def _pipeline_totals(state_dir, supervisor) -> dict:
    """The records of every run of this command (restarts included), not only of the last run."""
    from airflow_conduit.runs.report import read_json, report_path, totals_over_runs

    def committed_rows(destination: str, batch_id: int) -> int | None:  # STATE_DIR/commits/<destination>/<batch>
        return (read_json(state_dir.path / "commits" / destination / str(batch_id)) or {}).get("rows")

    reports = [read_json(report_path(state_dir.path, run_id)) for run_id in supervisor.run_ids()]
    return totals_over_runs([report for report in reports if report], committed_rows)  # a run that never started has none


def _say_input_file_findings(state_dir, supervisor) -> None:
    """The input files this command's runs found changed after they were read (``INPUT_FILE_CHANGED``), one line
    each: the driver log and the run report hold them too, but a user reads this command's output."""
    from airflow_conduit.runs.report import read_json, report_path
    from airflow_conduit.spark.input_files import describe

    seen: dict[str, dict] = {}
    for run_id in supervisor.run_ids():
        for finding in (read_json(report_path(state_dir.path, run_id)) or {}).get("input_files_changed") or []:
            if isinstance(finding, dict) and finding.get("file"):
                seen[finding["file"]] = finding
    for finding in seen.values():
        print(f"WARNING {describe(finding)}")
def _destinations_added(state_dir, supervisor) -> list[str]:
    """What the runs of this command said about destinations new in the spec (where each begins), once each."""
    from airflow_conduit.runs.report import read_json, report_path

    lines: list[str] = []
    for run_id in supervisor.run_ids():
        for note in (read_json(report_path(state_dir.path, run_id)) or {}).get("destinations_added") or []:
            if note.get("message") and note["message"] not in lines:
                lines.append(note["message"])
    return lines


def _summary(totals: dict, spec) -> None:
    from airflow_conduit.pipeline.locations import dlq_location

    print(f"records: read {totals.get('read', 0)}, filtered {totals.get('filtered', 0)}, "
          f"dead letter queue {totals.get('dlq', 0)}, written {totals.get('written', {})}")
    print(f"dead letter queue: {dlq_location(spec)}")
    for destination in spec.destinations:
        where = destination.settings.get("path") or destination.settings.get("table") or destination.plugin
        print(f"destination {destination.id}: {where}")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a pipeline on local Spark, restarting it on transient failures",
        description="Run a pipeline through spark-submit on this machine with the recovery engine deciding restarts "
        "(backoff, windowed retry budget) like the Airflow operator does. Exit codes: 0 finished, 2 spec or "
        "connection refused, 3 degraded, 4 another driver holds the state dir, 5 a run could not be started, "
        "130 interrupted.",
    )
    parser.add_argument("spec", metavar="PIPELINE.yaml", help="pipeline spec file")
    parser.add_argument("--state-dir", required=True, help="the pipeline's state directory (kept across runs)")
    for flag, name, text in OPTION_FLAGS:
        parser.add_argument(flag, dest=name, default=None, help=text)
    parser.add_argument("--faults", default=None, help='fault injection, JSON, e.g. \'{"transient_first_runs": 2}\'')
    parser.add_argument("--master", default="local[*]", help="Spark master for spark-submit (default local[*])")
    parser.add_argument("--conn-id", default=None, help="use this Airflow spark connection instead of --master")
    parser.add_argument("--poll-interval", type=float, default=2.0,
                        help="seconds between looks at the job (its end is seen at once)")
    parser.add_argument("--spark-ui", action="store_true",
                        help="keep Spark's web UI on and print its address (off by default: it slows the start)")
    parser.set_defaults(func=run_pipeline)
