"""Entry point of the ``airflow-conduit`` command.

Each sub-command lives in its own module exposing ``register(subparsers)``;
the module sets ``func`` on its parser, which returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module name -> sub-command(s) it registers
COMMAND_MODULES = (
    "airflow_conduit.cli.validate_cmd",  # validate PIPELINE.yaml
    "airflow_conduit.cli.run_cmd",  # run PIPELINE.yaml --state-dir DIR
    "airflow_conduit.cli.recovery_cmd",  # recovery simulate ...
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
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
