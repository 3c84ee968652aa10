"""The simulator, through its Python API and through ``airflow-conduit recovery simulate``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
from recovery_helpers import at

from airflow_conduit.cli import recovery_cmd
from airflow_conduit.recovery import RecoveryOptions
from airflow_conduit.recovery.simulate import FAILURE, RECORD, SIMULATION_DATE, SimEvent, parse_time, simulate


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="airflow-conduit")
    recovery_cmd.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["recovery", "simulate", *argv])


def run_json(capsys, *argv: str) -> dict:
    args = cli(*argv, "--json")
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def decisions(data: dict) -> list[tuple[str, str, float]]:
    return [(d["decided_at"][11:19], d["action"], d["delay_seconds"]) for d in data["decisions"]]


SCENARIO_1_FLAGS = ("--max-retries", "2", "--max-retries-window", "10m", "--start", "15:00", "--failures", "15:10", "15:11", "15:15")
SCENARIO_2_FLAGS = ("--max-retries", "2", "--max-retries-window", "10m", "--start", "15:00", "--failures", "15:10", "15:11", "15:35")


# --- the Python API ----------------------------------------------------------------------------------------------


def test_simulate_api_scenario_1():
    options = RecoveryOptions.from_mapping({"max-retries": 2, "max-retries-window": "10m"})
    result = simulate(options, start=at("15:00"), events=[SimEvent(at(t), FAILURE) for t in ("15:10", "15:11", "15:15")])
    assert [d.action for d in result.decisions] == ["restart", "restart", "degrade"]
    assert result.final_state.value == "degraded"


def test_simulate_api_reports_failures_while_waiting_for_a_restart_as_ignored():
    options = RecoveryOptions(min_delay="1m", max_delay="1m")
    result = simulate(options, start=at("15:00"), events=[SimEvent(at(t), FAILURE) for t in ("15:10", "15:10:30")])
    assert len(result.decisions) == 1
    ignored = [row for row in result.rows if row.event == "ignored"]
    assert len(ignored) == 1 and "restart scheduled at 15:11:00" in ignored[0].detail


def test_simulate_api_first_record_resets():
    result = simulate(
        RecoveryOptions(),
        start=at("15:00"),
        events=[SimEvent(at("15:10"), FAILURE), SimEvent(at("15:10:05"), FAILURE), SimEvent(at("15:10:20"), RECORD), SimEvent(at("15:10:30"), FAILURE)],
    )
    assert [d.delay_seconds for d in result.decisions] == [1, 2, 1]


def test_parse_time():
    start = parse_time("15:00", SIMULATION_DATE)
    assert start == at("15:00")
    assert parse_time("+10m", start) == at("15:10")
    assert parse_time("15:11:30", start) == at("15:11:30")
    assert parse_time("2024-01-01T15:12:00+00:00", start) == at("15:12")
    with pytest.raises(ValueError, match="HH:MM"):
        parse_time("quarter past three", start)


# --- the command ---------------------------------------------------------------------------------------------------


def test_cli_scenario_1_table(capsys):
    args = cli(*SCENARIO_1_FLAGS)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.startswith("15:15:00  degraded") for line in lines)
    assert "max-retries reached: 2 restarts within max-retries-window 10m (at 15:10:01, 15:11:02)" in out
    assert "final state: degraded; restart delays: 1s, 2s" in out


def test_cli_scenario_1_json(capsys):
    data = run_json(capsys, *SCENARIO_1_FLAGS)
    assert decisions(data) == [("15:10:00", "restart", 1.0), ("15:11:00", "restart", 2.0), ("15:15:00", "degrade", 0.0)]
    assert data["final_state"] == "degraded"
    assert data["options"]["max-retries"] == 2 and data["options"]["max-retries-window"] == "10m"


def test_cli_scenario_2_json(capsys):
    data = run_json(capsys, *SCENARIO_2_FLAGS)
    assert decisions(data) == [("15:10:00", "restart", 1.0), ("15:11:00", "restart", 2.0), ("15:35:00", "restart", 1.0)]
    freed = [row["at"][11:19] for row in data["timeline"] if row["event"] == "window-slot-freed"]
    assert freed == ["15:20:01", "15:21:02"]  # "15:20 ... 10 minutes since the first retry have passed"
    assert data["final_state"] == "recovering"


@pytest.mark.parametrize("scenario, flags", [("conduit-1", SCENARIO_1_FLAGS), ("conduit-2", SCENARIO_2_FLAGS)])
def test_scenario_shortcuts_equal_the_explicit_flags(capsys, scenario, flags):
    shortcut = run_json(capsys, "--scenario", scenario)
    explicit = run_json(capsys, *flags)
    assert shortcut.pop("scenario").startswith("Conduit recovery doc")
    assert shortcut == explicit


def test_cli_delay_sequences(capsys):
    conduit = run_json(capsys, "--scenario", "conduit-example-1")
    assert conduit["delays_seconds"] == [1, 2, 4, 8, 10, 10, 10]
    strimzi = run_json(capsys, "--scenario", "strimzi")
    assert [d / 60 for d in strimzi["delays_seconds"]] == [0, 2, 6, 12, 20, 30, 42, 56, 60, 60]
    fixed = run_json(capsys, "--policy", "fixed", "--min-delay", "5s", "--consecutive", "3")
    assert fixed["delays_seconds"] == [5, 5, 5]


def test_cli_flags_override_a_scenario(capsys):
    data = run_json(capsys, "--scenario", "conduit-1", "--max-retries", "3")
    assert [d["action"] for d in data["decisions"]] == ["restart", "restart", "restart"]


def test_cli_fatal_marker_and_records(capsys):
    data = run_json(capsys, "--start", "15:00", "--failures", "+10m", "--records", "+10m30s", "--failures", "+12m", "--fatal", "+13m")
    assert [(d["action"], d["delay_seconds"], d["classification"]["fatal"]) for d in data["decisions"]] == [
        ("restart", 1.0, False),
        ("restart", 1.0, False),  # the record at 15:10:30 reset the backoff
        ("degrade", 0.0, True),
    ]
    events = [row["event"] for row in data["timeline"]]
    assert events.index("recovered") < events.index("degraded")


def test_cli_error_text_is_classified_like_a_real_error(capsys):
    data = run_json(capsys, "--failures", "10:00", "--error", "[UNRESOLVED_COLUMN.WITH_SUGGESTION] x SQLSTATE: 42703")
    assert data["decisions"][0]["action"] == "degrade"
    assert data["decisions"][0]["classification"]["code"] == 2400


def test_cli_error_rules(capsys):
    rules = json.dumps([{"message": "unavailable", "as": "fatal"}])
    data = run_json(capsys, "--failures", "10:00", "--error-rules", rules)
    assert data["decisions"][0]["action"] == "degrade"
    assert data["decisions"][0]["classification"]["rule"] == "user-rule"


def test_cli_until_shows_the_healthy_reset(capsys):
    data = run_json(capsys, "--failures", "10:00", "--until", "10:30")
    assert [row["event"] for row in data["timeline"]][-2:] == ["recovered", "backoff-reset"]
    assert data["final_state"] == "running"


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--min-delay", "20m", "--failures", "10:00"), "min-delay='20m'"),
        (("--max-retries", "-5", "--failures", "10:00"), "max-retries=-5"),
        (("--failures", "25:00"), "not a clock time"),
        ((), "nothing to simulate"),
        (("--error-rules", "[{", "--failures", "10:00"), "--error-rules: not JSON"),
    ],
)
def test_cli_refuses_bad_input_with_exit_code_2(capsys, argv, message):
    args = cli(*argv)
    assert args.func(args) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_cli_through_main():
    pytest.importorskip("airflow_conduit.cli.run_cmd")  # main() registers every command module
    from airflow_conduit.cli.main import main

    assert main(["recovery", "simulate", "--scenario", "conduit-1"]) == 0


def test_console_script_runs_the_simulator():
    pytest.importorskip("airflow_conduit.cli.run_cmd")
    completed = subprocess.run(
        [sys.executable, "-m", "airflow_conduit.cli.main", "recovery", "simulate", "--scenario", "conduit-2", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["final_state"] == "recovering"
