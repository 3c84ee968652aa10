"""``airflow-conduit dlq replay PIPELINE.yaml --state-dir DIR [filters] [--dry-run]``.

Replays the pipeline's dead-lettered records through its current spec on a
local SparkSession in this process (``spark/replay.py`` says how: exactly
once per destination, replayed records marked, an interrupted replay resumed
by the next one). Prints one summary line, and with ``--dry-run`` what would
pass and what would still fail, grouped by error, without writing anything.

A replay writes to the pipeline's destinations, DLQ and state dir, so it holds
the state dir's driver lease (``hooks/backends/lease.py``) from before its
replay number is chosen to its end: beside a running pipeline or another
replay it is refused (exit 4, as ``airflow-conduit run``), and the pipeline
cannot start beside it. Spark's own log goes to
``STATE_DIR/runs/<replay run id>/driver.log``; a failure is one named line.

``--quarantine TABLE``: the spec is an SDP project (``spark-pipeline.yml``) and the records are those of
``TABLE_quarantine`` (``spark/sdp/replay.py``): they are staged, exactly once, for the pipeline's next run.

Exit codes: 0 done, 1 the replay failed (its Spark JVM killed too: the next replay resumes it), 2 the spec or
an option was refused, 4 another run holds the state dir's lease (nothing started).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2  # the spec or an option was refused (as `airflow-conduit run`)
EXIT_LEASE_HELD = 4  # another run holds the state dir's lease (as `airflow-conduit run`)


def run_replay(args: argparse.Namespace) -> int:
    if args.quarantine is not None:
        return run_quarantine_replay(args)
    from airflow_conduit.pipeline import SpecError, load_pipeline
    from airflow_conduit.pipeline.state_dir_check import StateDirError, usable_state_dir

    try:
        spec = load_pipeline(args.spec)
    except SpecError as exc:
        print(f"FAILED: {args.spec}: the spec is not valid", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        args.state_dir = usable_state_dir(args.state_dir, create=False)
    except StateDirError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return EXIT_REFUSED

    from airflow_conduit.spark import faults as faults_mod
    from airflow_conduit.pipeline.replay_request import ReplayFilter, ReplayRequestError
    from airflow_conduit.spark.replay import replay
    from airflow_conduit.spark.connector_jars import connectors_of
    from airflow_conduit.spark.session import build_session

    try:
        faults = faults_mod.parse_faults(args.faults)
    except ValueError as exc:
        print(f"FAILED: --faults: {exc}", file=sys.stderr)
        return EXIT_REFUSED

    try:  # checked before Spark starts: a bad filter is refused naming the option
        filters = ReplayFilter.from_mapping({
            "stages": args.stage, "components": args.component, "exception_classes": args.error_class,
            "rules": args.rule, "batch_min": args.batch_min, "batch_max": args.batch_max, "since": args.since,
            "until": args.until,
        }, where="dlq replay")
    except ReplayRequestError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    from airflow_conduit.spark.runner import lost_jvm_or

    held = _hold_lease(args.state_dir, "dlq replay", "dlq-replay-")
    if held is None:
        return EXIT_LEASE_HELD
    run_id, log_path = held
    result = _in_spark(
        f"replay of pipeline {spec.id}", log_path,
        lambda: build_session(f"airflow-conduit-dlq-replay-{spec.id}", master=args.master, connectors=connectors_of(spec)),
        lambda spark: replay(spark, spec, state_dir=args.state_dir, filters=filters, dry_run=args.dry_run,
                             faults=faults, run_id=run_id, force=args.force),
        cause=lost_jvm_or)
    if result is None:
        return EXIT_FAILED
    print(_summary(result))
    if args.dry_run:
        for error, count in sorted(result.errors.items(), key=lambda item: -item[1]):
            print(f"  would still fail: {count}  {error}")
    for processor, rules in sorted(result.expectations.items()):
        for name, c in rules.items():
            print(f"  expectation {processor}/{name} ({c['action']}): passed={c['passed']} failed={c['failed']}")
    if args.json:
        print(json.dumps(result.to_dict(), sort_keys=True))
    return EXIT_OK


PIPELINE_ONLY = ("stage", "component", "error_class", "rule", "batch_min", "batch_max", "since", "until", "faults")


def run_quarantine_replay(args: argparse.Namespace) -> int:
    """Replay the quarantine table of an SDP project's ``quarantined_table`` (``spark/sdp/replay.py``)."""
    from airflow_conduit.pipeline.state_dir_check import StateDirError, usable_state_dir
    from airflow_conduit.spark.sdp.replay import QuarantineReplayError, locate, replay_quarantine, summary, to_json

    given = [f"--{name.replace('_', '-')}" for name in PIPELINE_ONLY if getattr(args, name) not in (None, [], False)]
    if given:
        print(f"FAILED: {', '.join(given)}: not an option of a quarantine replay (--quarantine takes --dry-run, "
              "--force, --master, --json)", file=sys.stderr)
        return EXIT_REFUSED
    if not args.quarantine.strip() or args.quarantine.endswith("_quarantine"):
        print(f"FAILED: --quarantine {args.quarantine!r}: give the table quarantined_table declared (orders, not "
              "orders_quarantine)", file=sys.stderr)
        return EXIT_REFUSED
    try:
        args.state_dir = usable_state_dir(args.state_dir, create=False)
        locate(args.spec, args.quarantine)
    except (StateDirError, QuarantineReplayError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    from airflow_conduit.spark.session import build_session

    held = _hold_lease(args.state_dir, "quarantine replay", "quarantine-replay-")  # the pipeline's runs hold it too
    if held is None:
        return EXIT_LEASE_HELD
    _, log_path = held
    result = _in_spark(
        f"replay of {args.quarantine}_quarantine", log_path,
        lambda: build_session(f"airflow-conduit-quarantine-replay-{args.quarantine}", master=args.master),
        lambda spark: replay_quarantine(spark, args.spec, args.quarantine, state_dir=args.state_dir,
                                        dry_run=args.dry_run, force=args.force))
    if result is None:
        return EXIT_FAILED
    print(summary(result))
    if args.json:
        print(to_json(result))
    return EXIT_OK


def _hold_lease(state_dir: str, kind: str, prefix: str) -> tuple[str, Path] | None:
    """A run id and driver log for this replay, with the state dir's lease held until this process ends (the kernel
    lets go of it however it ends); None, said on stderr, when another driver holds it."""
    from airflow_conduit.hooks.backends import lease
    from airflow_conduit.runs.report import utc_now_iso
    from airflow_conduit.runs.supervisor import unique_run_prefix

    run_id = unique_run_prefix(prefix + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S"))
    try:
        lease.acquire(lease.lease_path(state_dir), {"kind": kind, "run_id": run_id, "pid": os.getpid(), "since": utc_now_iso()})
    except lease.LeaseHeld as exc:
        print(f"FAILED: dlq replay not started: {exc}", file=sys.stderr)
        return None
    log_path = Path(state_dir) / "runs" / run_id / "driver.log"
    _python_log_to(log_path)
    return run_id, log_path


def _in_spark(what: str, log_path: Path, start, work, cause=lambda exc, spark: exc):
    """``work(spark)`` on the session ``start()`` makes, its output in ``log_path``, the session stopped after; a
    failure is one named line on stderr (``cause`` picks the error to name) and None."""
    try:
        with _spark_output_to(log_path):  # the JVM keeps the stderr it was started with
            spark = start()
    except Exception as exc:  # noqa: BLE001 - a named error, never a traceback
        print(f"FAILED: {what}: Spark did not start: {_named(exc)}; Spark's log: {log_path}", file=sys.stderr)
        return None
    try:
        return work(spark)
    except Exception as exc:  # noqa: BLE001 - a named error, never a traceback
        _keep_traceback(log_path, exc)
        print(f"FAILED: {what}: {_named(cause(exc, spark))}; run the replay again to resume it; Spark's log: "
              f"{log_path}", file=sys.stderr)
        return None
    finally:
        _stop(spark, log_path)


def _named(exc: BaseException) -> str:
    """One line for a failed replay: its root cause (a Java error's class and message, not its stack) and code."""
    from airflow_conduit.recovery.classify import structured_error_from_exception

    error = structured_error_from_exception(exc, stage="runner")
    name = type(exc).__name__
    message = error.message if name == "Py4JJavaError" or error.message.startswith(name) else f"{name}: {error.message}"
    return f"{message} (error {error.code}, {'fatal' if error.fatal else 'transient'})"


def _stop(spark, log_path: Path) -> None:
    """Stop the session; a JVM already gone (killed) cannot be stopped, and that is no new failure."""
    try:
        spark.stop()
    except Exception as exc:  # noqa: BLE001 - the replay's outcome is already said
        _keep_traceback(log_path, exc)


def _python_log_to(log_path: Path) -> None:
    """Python's log into the replay's log, beside Spark's, not on the terminal: py4j logs a traceback on the root
    logger when the JVM stops answering (``logging.exception``, which would otherwise print it on stderr)."""
    import logging

    log_path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)


def _keep_traceback(log_path: Path, exc: BaseException) -> None:
    """The whole error (a Java error's stack trace included) at the end of the replay's log, for whoever digs."""
    import traceback

    with open(log_path, "a", encoding="utf-8") as log:
        log.write("".join(traceback.format_exception(exc)))


@contextmanager
def _spark_output_to(log_path: Path):
    """Start Spark with its stderr (the JVM's log4j output, Java stack traces) in ``log_path``, not on the terminal.

    The JVM and the Python workers it forks inherit file descriptor 2 when the session starts; this
    process gets its own stderr back as soon as the session exists.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log_path, "ab") as log:
            os.dup2(log.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _summary(result) -> str:
    skipped = ", ".join(f"{reason}: {n}" for reason, n in sorted(result.skipped.items())) or "none"
    if result.dry_run:
        return (f"DRY RUN: {result.selected} record(s) would be replayed: {result.passed} would pass, "
                f"{result.filtered} filtered, {result.still_failing} would still fail; not taken: {skipped}")
    if result.replay is None:
        return f"nothing to replay; not taken: {skipped}"
    written = ", ".join(f"{d}={n}" for d, n in sorted(result.written.items())) or "0"
    return (f"replay {result.replay} (batch {result.batch_id}{', resumed' if result.resumed else ''}): "
            f"{result.selected} record(s): written[{written}] filtered={result.filtered} "
            f"back to the DLQ={result.still_failing}; not taken: {skipped}")


def register(subparsers: argparse._SubParsersAction) -> None:
    dlq = subparsers.add_parser("dlq", help="dead letter queue tools (replay)", description="Dead letter queue tools.")
    commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="DLQ_COMMAND")
    parser = commands.add_parser(
        "replay",
        help="replay dead-lettered records through the pipeline's current spec",
        description="Run the DLQ records of a pipeline through its current spec (after a fix): records that now pass "
        "are written to the destinations exactly once, records that still fail go back to the DLQ with their new "
        "error and a replay count; replayed records are never replayed twice. File, JDBC, Kafka and Delta DLQs; with --quarantine TABLE, the quarantine table of an SDP project. A replay holds the "
        "state dir's driver lease: it does not run beside the pipeline or another replay. Exit codes: 0 done, "
        "1 the replay failed, 2 spec or option refused, 4 another run holds the state dir.",
    )
    parser.add_argument("spec", metavar="PIPELINE.yaml", help="the pipeline spec (its current, fixed version)")
    parser.add_argument("--state-dir", required=True, help="the pipeline's state directory")
    parser.add_argument("--dry-run", action="store_true", help="print what would pass / still fail, grouped by error; write nothing")
    parser.add_argument("--force", action="store_true", help="also take records whose spec is unchanged since they "
                        "failed (by default a replay takes only what a spec change may now let pass)")
    parser.add_argument("--stage", action="append", help="only records failed at this stage (source, processor, ...); repeatable")
    parser.add_argument("--component", action="append", help="only records failed by this component id; repeatable")
    parser.add_argument("--error-class", action="append", help="only records with this exception_class; repeatable")
    parser.add_argument("--rule", action="append", help="only records an expectation rule of this name dropped; repeatable")
    parser.add_argument("--batch-min", type=int, help="only records of pipeline batches >= this id")
    parser.add_argument("--batch-max", type=int, help="only records of pipeline batches <= this id")
    parser.add_argument("--since", help="only records dead-lettered at or after this UTC time (ISO-8601)")
    parser.add_argument("--until", help="only records dead-lettered before this UTC time (ISO-8601)")
    parser.add_argument("--quarantine", metavar="TABLE", help="replay TABLE_quarantine of an SDP project (the spec is its "
                        "spark-pipeline.yml): stage its records for the pipeline's next run")
    parser.add_argument("--master", default="local[2]", help="Spark master of the local session (default local[2])")
    parser.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    parser.add_argument("--faults", help="fault injection for tests and demos (JSON, as for the Spark job; \"batch\": K names replay K)")
    parser.set_defaults(func=run_replay)
