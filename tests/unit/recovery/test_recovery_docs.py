"""docs/recovery.md: its simulator outputs are what the simulator prints today, and it documents every code."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from airflow_conduit.cli import recovery_cmd
from airflow_conduit.recovery import codes

DOC = Path(__file__).resolve().parents[3] / "docs" / "recovery.md"
EXAMPLE = re.compile(r"```console\n\$ (airflow-conduit recovery simulate[^\n]*)\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    return EXAMPLE.findall(DOC.read_text(encoding="utf-8"))


def test_doc_has_the_seed_scenarios():
    commands = [command for command, _ in examples()]
    assert any("--failures 15:10 15:11 15:15" in c for c in commands)  # scenario 1
    assert any("conduit-2" in c for c in commands)
    assert any("conduit-example-1" in c for c in commands)
    assert any("strimzi" in c for c in commands)


@pytest.mark.parametrize("command, printed", examples(), ids=[c for c, _ in examples()])
def test_doc_example_output_is_current(capsys, command, printed):
    parser = argparse.ArgumentParser(prog="airflow-conduit")
    recovery_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(shlex.split(command)[1:])
    assert args.func(args) == 0
    assert capsys.readouterr().out == printed


def test_doc_lists_every_error_code_and_exit_code():
    text = DOC.read_text(encoding="utf-8")
    for name, value in vars(codes).items():
        if name.isupper() and isinstance(value, int):
            assert f"| {value} | `{name}` |" in text or f"| {value} | `{name}` " in text, name
