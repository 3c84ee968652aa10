"""Entry point of the ``airflow-conduit`` command.

Each sub-command lives in its own module exposing ``register(subparsers)``;
the module sets ``func`` on its parser, which returns the exit code.

No traceback reaches a user: sub-commands refuse bad input with a message naming
the option or the file and key (exit 2); anything they did not foresee is printed
as one line and exits 70 (``AIRFLOW_CONDUIT_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

EXIT_INTERRUPTED = 130
EXIT_INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug, not the user's input
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left
DEBUG_ENV = "AIRFLOW_CONDUIT_DEBUG"

# module name -> sub-command(s) it registers
COMMAND_MODULES = (
    "airflow_conduit.cli.validate_cmd",  # validate PIPELINE.yaml
    "airflow_conduit.cli.run_cmd",  # run PIPELINE.yaml --state-dir DIR
    "airflow_conduit.cli.recovery_cmd",  # recovery simulate ...
    "airflow_conduit.cli.dlq_cmd",  # dlq replay PIPELINE.yaml --state-dir DIR
    "airflow_conduit.cli.schema_cmd",  # schema (the spec's JSON Schema)
    "airflow_conduit.cli.jars_cmd",  # jars fetch DIR (connector jars for machines without internet)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-conduit",
        description="Validate pipeline specs, run pipelines locally and simulate recovery policies.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"airflow-conduit {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_left()
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"airflow-conduit {args.command}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"  this is a bug in airflow-conduit; {DEBUG_ENV}=1 shows the traceback", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


def _reader_left() -> int:
    """The output's reader closed the pipe (``| head``): stop quietly, as Unix tools do.

    stdout is pointed at /dev/null so the interpreter's final flush cannot raise again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
