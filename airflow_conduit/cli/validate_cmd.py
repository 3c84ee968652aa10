"""``airflow-conduit validate PIPELINE.yaml [...]``: check specs without starting Spark.

Prints ``OK: <file>: pipeline <id> (N sources, M destinations)`` for a valid
file and every problem of an invalid one (file:line: key path: message); exits
2 when any file has a problem, so CI can refuse a wrong spec before deploy.
"""

from __future__ import annotations

import argparse
import json
import sys

from airflow_conduit.pipeline import SpecError, load_pipeline, redacted_dict

EXIT_PROBLEMS = 2


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def run_validate(args: argparse.Namespace) -> int:
    exit_code = 0
    for path in args.files:
        try:
            spec = load_pipeline(path)
        except SpecError as exc:
            exit_code = EXIT_PROBLEMS
            print(f"FAILED: {path}: {_plural(len(exc.problems), 'problem')}", file=sys.stderr)
            for problem in exc.problems:
                print(f"  {problem}", file=sys.stderr)
            continue
        print(
            f"OK: {path}: pipeline {spec.id} "
            f"({_plural(len(spec.sources), 'source')}, {_plural(len(spec.destinations), 'destination')})"
        )
        if args.print_spec:
            print(json.dumps(redacted_dict(spec), indent=2))
    return exit_code


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate pipeline spec files (no Spark needed)",
        description="Validate pipeline spec files: every problem is printed with its file, line and key path. "
        "Exit code 0 when all files are valid, 2 otherwise.",
    )
    parser.add_argument("files", nargs="+", metavar="PIPELINE.yaml", help="pipeline spec file(s)")
    parser.add_argument(
        "--print-spec",
        action="store_true",
        help="also print each valid spec as JSON with defaults filled in and secrets redacted",
    )
    parser.set_defaults(func=run_validate)
