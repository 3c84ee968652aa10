"""``airflow-conduit dlq replay PIPELINE.yaml --state-dir DIR [filters] [--dry-run]``.

Replays the pipeline's dead-lettered records through its current spec on a
local SparkSession in this process (``spark/replay.py`` says how: exactly
once per destination, replayed records marked, an interrupted replay resumed
by the next one). Prints one summary line, and with ``--dry-run`` what would
pass and what would still fail, grouped by error, without writing anything.
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2  # the spec or an option was refused (as `airflow-conduit run`)


def run_replay(args: argparse.Namespace) -> int:
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
    spark = build_session(f"airflow-conduit-dlq-replay-{spec.id}", master=args.master, connectors=connectors_of(spec))
    try:
        result = replay(spark, spec, state_dir=args.state_dir, filters=filters, dry_run=args.dry_run, faults=faults,
                        force=args.force)
    except Exception as exc:  # noqa: BLE001 - a named error, never a traceback
        print(f"FAILED: replay of pipeline {spec.id}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        spark.stop()
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
        "error and a replay count; replayed records are never replayed twice. File and JDBC DLQs.",
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
    parser.add_argument("--master", default="local[2]", help="Spark master of the local session (default local[2])")
    parser.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    parser.add_argument("--faults", help="fault injection for tests and demos (JSON, as for the Spark job; \"batch\": K names replay K)")
    parser.set_defaults(func=run_replay)
