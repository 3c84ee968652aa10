"""``airflow-conduit schema``: print the pipeline spec's JSON Schema, for editors that validate and complete YAML.

The schema is generated from the loader's settings table (``pipeline/json_schema.py``), so it always
matches the installed version. Save it and point the file at it:
``# yaml-language-server: $schema=./pipeline.schema.json``.
"""

from __future__ import annotations

import argparse
import json

from airflow_conduit.pipeline.json_schema import pipeline_json_schema


def run_schema(args: argparse.Namespace) -> int:
    print(json.dumps(pipeline_json_schema(), indent=2, ensure_ascii=False))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="print the pipeline spec's JSON Schema (for editors)",
        description="Print the JSON Schema (draft 2020-12) of a pipeline spec file, generated from the "
        "settings the installed version accepts. Save it (airflow-conduit schema > pipeline.schema.json) and "
        "add '# yaml-language-server: $schema=./pipeline.schema.json' at the top of a pipeline YAML file.",
    )
    parser.set_defaults(func=run_schema)
