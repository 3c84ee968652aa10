"""``airflow-conduit recovery simulate``: preview a recovery policy before putting it in production.

Example (Conduit recovery doc, scenario 1)::

    airflow-conduit recovery simulate --max-retries 2 --max-retries-window 10m \\
        --start 15:00 --failures 15:10 15:11 15:15
    airflow-conduit recovery simulate --scenario conduit-2 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from airflow_conduit.pipeline.json_nesting import MAX_JSON_DEPTH, too_deep
from airflow_conduit.recovery.durations import parse_duration
from airflow_conduit.recovery.errors import RecoveryConfigError
from airflow_conduit.recovery.options import POLICIES, RecoveryOptions
from airflow_conduit.recovery.simulate import (
    CHECK,
    DEFAULT_ERROR,
    FAILURE,
    RECORD,
    SCENARIOS,
    SIMULATION_DATE,
    SimEvent,
    parse_time,
    simulate,
)

PAST_LAST_DATE = (
    "the timeline reaches past 9999-12-31 23:59:59 UTC, the last moment a simulation can show "
    "(a restart, a healthy-period reset or a +DURATION lands after it): give an earlier --start or "
    "shorter times (--failures, --until, --run-for, fewer --consecutive failures)"
)
MAX_CONSECUTIVE = 10_000  # a timeline nobody reads beyond; also keeps the simulation finite

# CLI flag -> option name; every flag defaults to None so a scenario preset can fill it.
_OPTION_FLAGS = (
    ("--min-delay", "min-delay", "minimum delay before a restart (default 1s)"),
    ("--max-delay", "max-delay", "maximum delay before a restart (default 10m)"),
    ("--backoff-factor", "backoff-factor", "factor applied to the last delay (default 2)"),
    ("--max-retries", "max-retries", "restarts allowed within any max-retries-window; -1 infinite, 0 disabled (default -1)"),
    ("--max-retries-window", "max-retries-window", "window over which max-retries is counted (default 5m)"),
    ("--policy", "policy", f"backoff policy: {', '.join(POLICIES)} (default exponential)"),
    ("--backoff-reset-after", "backoff-reset-after", "healthy period that resets the backoff (default 5m)"),
    ("--reset-on-first-record", "reset-on-first-record", "true/false: the first record end to end resets the backoff (default true)"),
    ("--jitter", "jitter", "random +/- fraction of each delay, 0-1 (default 0)"),
    ("--jitter-seed", "jitter-seed", "seed that makes the jitter reproducible"),
    ("--crash-loop-limit", "crash-loop-limit", "degrade when the same error ends N runs in a row with no record processed; -1 off (default)"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    recovery = subparsers.add_parser("recovery", help="recovery policy tools", description="Recovery policy tools.")
    commands = recovery.add_subparsers(dest="recovery_command", required=True, metavar="SUBCOMMAND")
    parser = commands.add_parser(
        "simulate",
        help="print the timeline of recovery decisions for given failure times",
        description="Feed failure times to the recovery engine on a fake clock and print its decisions. "
        "Times: HH:MM[:SS], +DURATION after --start (e.g. +10m), or ISO datetimes.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), help="a seed document example (explicit flags override it)")
    for flag, _, help_text in _OPTION_FLAGS:
        parser.add_argument(flag, default=None, help=help_text)
    parser.add_argument("--error-rules", default=None, metavar="JSON", help='user classification rules, e.g. \'[{"message": "quota", "as": "fatal"}]\'')
    parser.add_argument("--start", default=None, help="when the pipeline starts (default 00:00, scenarios 15:00)")
    parser.add_argument("--failures", nargs="+", action="extend", default=None, metavar="TIME", help="times the job fails")
    parser.add_argument("--fatal", nargs="+", action="extend", default=None, metavar="TIME", help="times the job fails with a FatalError (message: 'simulated fatal error')")
    parser.add_argument("--error", default=None, help=f"error text of the failures, classified like a real one (default {DEFAULT_ERROR!r})")
    parser.add_argument("--records", nargs="+", action="extend", default=None, metavar="TIME", help="times a record is processed end to end")
    parser.add_argument("--checks", nargs="+", action="extend", default=None, metavar="TIME", help="times the healthy-period rule is checked")
    parser.add_argument("--consecutive", type=int, default=None, metavar="N", help="instead of --failures: N failures, each --run-for after the previous restart")
    parser.add_argument("--run-for", default=None, metavar="DURATION", help="with --consecutive: how long the job runs before failing (default 0s)")
    parser.add_argument("--until", default=None, metavar="TIME", help="continue the timeline until this time (restarts, healthy resets)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    try:
        result, title = simulate_from_args(args)
    except OverflowError:  # datetime's "date value out of range": a moment after 9999-12-31 23:59:59
        print(f"airflow-conduit recovery simulate: error: {PAST_LAST_DATE}", file=sys.stderr)
        return 2
    except (RecoveryConfigError, ValueError) as exc:
        print(f"airflow-conduit recovery simulate: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        data = result.to_dict()
        if title:
            data["scenario"] = title
        print(json.dumps(data, indent=2))
    else:
        if title:
            print(f"# {title}")
        print(f"# options: {json.dumps(_shown_options(result.options))}")
        print(result.table())
    return 0


def simulate_from_args(args: argparse.Namespace):
    preset: dict[str, Any] = SCENARIOS[args.scenario] if args.scenario else {}
    mapping = dict(preset.get("options", {}))
    for flag, name, _ in _OPTION_FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            mapping[name] = value
    if args.error_rules is not None:
        if too_deep(args.error_rules):
            raise ValueError(f"--error-rules: nested too deeply to read (limit {MAX_JSON_DEPTH} levels)")
        try:
            mapping["error-rules"] = json.loads(args.error_rules)
        except ValueError as exc:
            raise ValueError(f"--error-rules: not JSON ({exc})") from None
        except RecursionError:
            raise ValueError("--error-rules: nested too deeply to read") from None
    options = RecoveryOptions.from_mapping(mapping)

    start = parse_time(args.start or preset.get("start", "00:00"), SIMULATION_DATE)
    failures = args.failures if args.failures is not None else ([] if args.consecutive else preset.get("failures", []))
    events = [SimEvent(parse_time(t, start), FAILURE) for t in failures]
    events += [SimEvent(parse_time(t, start), FAILURE, fatal=True) for t in args.fatal or []]
    events += [SimEvent(parse_time(t, start), RECORD) for t in args.records or []]
    events += [SimEvent(parse_time(t, start), CHECK) for t in args.checks or []]
    consecutive = args.consecutive if args.consecutive is not None else (0 if args.failures or args.fatal else preset.get("consecutive", 0))
    if not 0 <= consecutive <= MAX_CONSECUTIVE:
        raise ValueError(f"--consecutive: must be between 0 and {MAX_CONSECUTIVE}, got {consecutive}")
    run_for = parse_duration(args.run_for if args.run_for is not None else preset.get("run_for", 0), option="--run-for")
    if run_for < 0:
        raise ValueError(f"--run-for: must not be negative, got {args.run_for}")
    if not events and not consecutive:
        raise ValueError("nothing to simulate: give --failures/--fatal TIMES, --consecutive N or --scenario")
    until = parse_time(args.until, start) if args.until else None
    result = simulate(
        options, start=start, events=events, consecutive=consecutive, run_for=run_for, until=until,
        error=args.error or DEFAULT_ERROR,
    )
    return result, preset.get("title")


def _shown_options(options: RecoveryOptions) -> dict[str, Any]:
    shown = options.to_dict()
    if not shown["error-rules"]:
        del shown["error-rules"]
    if not options.jitter:
        shown.pop("jitter-seed")
    if options.crash_loop_limit < 0:
        shown.pop("crash-loop-limit")
    return shown
