"""The `airflow-conduit` command refuses bad input with a named error and exit code 2, never a traceback or a hang."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "airflow_conduit.cli.main"]
DEADLINE = 240  # seconds; generous for a loaded machine: a refusal takes about one second

SPEC = """\
version: "1"
pipeline:
  id: orders
  sources:
    - id: orders-in
      plugin: builtin:file
      settings:
        path: data/in
        schema: "id INT, customer STRING"
  destinations:
    - id: lake
      plugin: builtin:file
      settings:
        path: out/lake
        format: parquet
"""
LAUGHS = 'version: "1"\na: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi")
)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=DEADLINE)


def refused(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "good.yaml").write_text(SPEC)
    (tmp_path / "laughs.yaml").write_text(LAUGHS)
    (tmp_path / "deep.yaml").write_text('version: "1"\npipeline:\n  id: x\n  description: ' + "[" * 900 + "]" * 900 + "\n")
    return tmp_path


@pytest.mark.parametrize("command", ["validate", "run"])
def test_billion_laughs_and_deep_nesting_are_refused_naming_the_file(folder, command):
    extra = ["--state-dir", "state"] if command == "run" else []
    refused(cli(command, "laughs.yaml", *extra, cwd=folder), "laughs.yaml:10: i[0]: YAML aliases expand")
    refused(cli(command, "deep.yaml", *extra, cwd=folder), "deep.yaml:4: pipeline.description[0]", "levels deep")
    assert not (folder / "state").exists()  # nothing was started


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--state-dir", ""], ["--state-dir: empty path"]),
        (["--state-dir", "good.yaml"], ["--state-dir:", "good.yaml exists and is not a directory"]),
        (["--state-dir", "/proc/conduit"], ["--state-dir: /proc/conduit is under /proc"]),
        (["--state-dir", "s", "--min-delay", ""], ["min-delay", "empty duration"]),
        (["--state-dir", "s", "--max-retries-window", "99999999999h"], ["max-retries-window", "longer than the maximum 8784h"]),
        (["--state-dir", "s", "--faults", json.dumps({"transient_first_runs": "abc"})], ["--faults: key 'transient_first_runs'"]),
        (["--state-dir", "s", "--policy", "strimzy"], ["policy", "must be one of exponential, strimzi, fixed"]),
    ],
)
def test_run_refuses_bad_options_before_starting_anything(folder, flags, fragments):
    refused(cli("run", "good.yaml", *flags, cwd=folder), *fragments, "nothing was started")
    assert not (folder / "s").exists()


def test_simulate_refuses_bad_input_by_name(folder):
    refused(cli("recovery", "simulate", "--min-delay", "", "--failures", "15:10", cwd=folder), "min-delay")
    refused(cli("recovery", "simulate", "--consecutive", "100000000", cwd=folder), "--consecutive")
    refused(cli("recovery", "simulate", "--failures", "15:10", "--error-rules", "[" * 100_000, cwd=folder), "--error-rules")
    refused(cli("recovery", "simulate", "--start", "9999-12-31T23:00:00+00:00", "--failures", "+8784h", cwd=folder),
            "past 9999-12-31 23:59:59 UTC", "--start")


def test_simulate_past_year_9999_says_so_instead_of_date_value_out_of_range(folder):
    for args in (["--start", "9999-12-31T23:50:00", "--failures", "+1m", "--until", "+1h"],  # a +DURATION past it
                 ["--start", "9999-12-31T23:59:00", "--consecutive", "20", "--max-delay", "1h"]):  # a restart past it
        result = cli("recovery", "simulate", *args, cwd=folder)
        refused(result, "the timeline reaches past 9999-12-31 23:59:59 UTC", "give an earlier --start")
        assert "out of range" not in result.stderr


def test_an_unforeseen_error_is_one_line_not_a_traceback(monkeypatch, capsys):
    import argparse

    from airflow_conduit.cli import main as cli_main

    def parser_with_a_bug() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="airflow-conduit")
        parser.add_subparsers(dest="command").add_parser("boom").set_defaults(func=lambda args: 1 / 0)
        return parser

    monkeypatch.setattr(cli_main, "build_parser", parser_with_a_bug)
    monkeypatch.delenv(cli_main.DEBUG_ENV, raising=False)
    assert cli_main.main(["boom"]) == cli_main.EXIT_INTERNAL_ERROR == 70
    err = capsys.readouterr().err
    assert "airflow-conduit boom: internal error: ZeroDivisionError: division by zero" in err
    assert "Traceback" not in err
    monkeypatch.setenv(cli_main.DEBUG_ENV, "1")
    with pytest.raises(ZeroDivisionError):
        cli_main.main(["boom"])


def test_dlq_replay_refuses_a_bad_filter_by_name_before_spark_starts(folder):
    (folder / "s").mkdir()
    refused(cli("dlq", "replay", "good.yaml", "--state-dir", "s", "--since", "yesterday", cwd=folder),
            "dlq replay: since: expected an ISO-8601 time")
    refused(cli("dlq", "replay", "good.yaml", "--state-dir", "s", "--batch-min", "5", "--batch-max", "2", cwd=folder),
            "batch_min 5 is greater than batch_max 2")
    assert list((folder / "s").iterdir()) == []  # nothing was replayed, nothing marked


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """`airflow-conduit schema | head` must not report the closed pipe as an internal error."""
    proc = subprocess.Popen([*CLI, "schema"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # the reader leaves while the schema (over 100 KB, beyond a pipe's buffer) is written
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=DEADLINE) == 141, stderr
    assert stderr == ""
