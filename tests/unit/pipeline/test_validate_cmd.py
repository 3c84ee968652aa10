"""``airflow-conduit validate``: OK lines for valid specs, every problem for the others, exit code 2."""

from __future__ import annotations

import argparse
import json

import pytest

from airflow_conduit.cli import main as cli_main
from airflow_conduit.cli import validate_cmd

from pipeline_spec_samples import MINIMAL


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="airflow-conduit")
    validate_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_registered_in_the_cli():
    assert "airflow_conduit.cli.validate_cmd" in cli_main.COMMAND_MODULES


def test_valid_spec_prints_ok_and_exits_0(write_spec, capsys):
    path = write_spec(MINIMAL)
    assert run(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"OK: {path}: pipeline orders (1 source, 1 destination)\n"
    assert err == ""


def test_plural_counts(write_spec, capsys):
    text = MINIMAL.replace(
        "  destinations:\n",
        "  destinations:\n    - {id: console, plugin: log}\n",
    )
    path = write_spec(text)
    assert run(["validate", str(path)]) == 0
    assert "(1 source, 2 destinations)" in capsys.readouterr().out


def test_problems_are_printed_with_file_line_and_key_path_and_exit_2(write_spec, capsys):
    path = write_spec(MINIMAL.replace("format: parquet", "format: avro").replace("id: lake", "id: orders-in"))
    assert run(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"FAILED: {path}: 2 problems",
        f"  {path}:11: pipeline.destinations[0].id: duplicate id 'orders-in': already used at pipeline.sources[0].id",
        f"  {path}:15: pipeline.destinations[0].settings.format: expected one of json, csv, parquet, got a string 'avro'",
    ]


def test_several_files_all_checked_exit_2_if_any_fails(write_spec, tmp_path, capsys):
    good = write_spec(MINIMAL, "good.yaml")
    missing = tmp_path / "missing.yaml"
    assert run(["validate", str(missing), str(good)]) == 2
    out, err = capsys.readouterr()
    assert f"OK: {good}" in out
    assert f"{missing}: file not found" in err


def test_print_spec_shows_defaults_and_hides_secrets(write_spec, capsys, monkeypatch):
    monkeypatch.setenv("TEST_DB_PASSWORD", "hunter2-xyz")
    text = MINIMAL.replace(
        "  destinations:\n",
        "  destinations:\n    - id: db\n      plugin: jdbc\n      settings: {url: 'jdbc:postgresql://h/db', table: t, password: '${TEST_DB_PASSWORD}'}\n",
    )
    path = write_spec(text)
    assert run(["validate", "--print-spec", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hunter2-xyz" not in out
    printed = json.loads(out.split("\n", 1)[1])
    assert printed["pipeline"]["destinations"][0]["settings"]["password"] == "***"
    assert printed["pipeline"]["dead-letter-queue"]["window-size"] == 1


def test_no_file_is_a_usage_error():
    with pytest.raises(SystemExit) as info:
        run(["validate"])
    assert info.value.code == 2


def test_print_spec_never_prints_a_password_written_inline_in_a_url(write_spec, capsys):
    """An inline password is refused (exit 2), and neither the problem nor --print-spec shows it."""
    text = MINIMAL.replace("  destinations:\n", (
        "  destinations:\n"
        "    - id: ora\n"
        "      plugin: jdbc\n"
        "      settings: {url: 'jdbc:oracle:thin:scott/Tiger-9x@db:1521/svc', table: t}\n"
    ))
    path = write_spec(text)
    assert run(["validate", "--print-spec", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Tiger" not in err
    assert "pipeline.destinations[0].settings.url: the URL contains a password" in err and str(path) in err
