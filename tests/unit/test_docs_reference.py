"""The reference tables of docs/ say what the code does: every key, setting, option, argument, flag and code the
code knows is documented with the code's default, and nothing the code does not know is."""

from __future__ import annotations

import argparse
import inspect
import json
import re
import shlex
import sys

import pytest

from docs_pages import DOCS, cells, rows, section

from airflow_conduit.cli import recovery_cmd
from airflow_conduit.get_provider_info import RECOVERY_CONFIG_OPTIONS, WORKER_CONFIG_OPTIONS
from airflow_conduit.recovery import codes
from airflow_conduit.recovery.classify import classify_facts  # noqa: F401 - loads the classifier's module
from airflow_conduit.recovery.options import POLICIES, RecoveryOptions

from airflow_conduit.pipeline import loader, model
from airflow_conduit.pipeline.settings_schema import DESTINATION_SCHEMAS, PROCESSOR_SCHEMAS, SOURCE_SCHEMAS
from airflow_conduit.recovery.durations import format_duration, parse_duration


def doc_default(value) -> str:
    return "`true`" if value is True else "`false`" if value is False else f"`{value}`"


def default_cell(row: str, column: int) -> str:
    """The text of a row's default cell, without its backticks."""
    return cells(row)[column].strip("`")


def page_text(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def seconds(text: str) -> float:
    return parse_duration(text, option="docs")


# --- the spec (spec.md, sources.md, processors.md, destinations.md, kafka.md, delta.md) ---------------------

PLUGIN_SECTIONS = (
    [(f"Source `{name}`", schema) for name, schema in SOURCE_SCHEMAS.items()]
    + [(f"Destination `{name}`", schema) for name, schema in DESTINATION_SCHEMAS.items()]
    + [(f"`{name}`", schema) for name, schema in PROCESSOR_SCHEMAS.items()]
)


@pytest.mark.parametrize("heading,schema", PLUGIN_SECTIONS, ids=[h for h, _ in PLUGIN_SECTIONS])
def test_every_setting_is_documented_with_its_default(heading, schema):
    documented = rows(section(heading).text)
    assert set(documented) == set(schema.settings), f"{heading}: docs and settings_schema.py disagree"
    for key, setting in schema.settings.items():
        if setting.has_default:
            assert doc_default(setting.default) in documented[key], f"{heading} {key}: default {setting.default!r}"


@pytest.mark.parametrize(
    "heading,keys",
    [
        ("Top level", loader.TOP_KEYS),
        ("`pipeline`", loader.PIPELINE_KEYS),
        ("Sources and destinations", loader.CONNECTOR_KEYS),
        ("Processors", loader.PROCESSOR_KEYS),
        ("`pipeline.dead-letter-queue`", loader.DLQ_KEYS),
        ("`pipeline.errors`", tuple(f"retry.{k}" for k in loader.RETRY_KEYS)),
    ],
)
def test_every_structural_key_is_documented(heading, keys):
    assert set(rows(section(heading, "spec.md").text)) == set(keys)


def test_the_pipeline_defaults_in_the_docs_are_the_models():
    documented = rows(section("`pipeline`", "spec.md").text)
    spec = model.PipelineSpec
    assert doc_default(spec.mode) in documented["mode"]
    assert f"`{spec.description}`" in documented["description"] or '`""`' in documented["description"]
    assert seconds(default_cell(documented["batch-deadline"], 3)) == spec.batch_deadline_seconds
    assert seconds(default_cell(documented["trigger-interval"], 3)) == spec.trigger_interval_seconds
    for mode in model.MODES:
        assert f"`{mode}`" in documented["mode"]
    assert doc_default(model.PipelineSpec.version) in rows(section("Top level", "spec.md").text)["version"].replace('"', "")


def test_the_retry_defaults_in_the_docs_are_the_models():
    documented = rows(section("`pipeline.errors`", "spec.md").text)
    defaults = model.RetrySpec()
    assert seconds(default_cell(documented["retry.timeout"], 2)) == defaults.timeout_seconds
    assert seconds(default_cell(documented["retry.delay.max"], 2)) == defaults.delay_max_seconds


def test_dlq_defaults_in_the_docs_are_the_models():
    documented = rows(section("`pipeline.dead-letter-queue`", "spec.md").text)
    defaults = model.DeadLetterQueueSpec()
    assert f"`builtin:{defaults.plugin}`" in documented["plugin"]
    assert doc_default(defaults.window_size) in documented["window-size"]
    assert doc_default(defaults.window_nack_threshold) in documented["window-nack-threshold"]
    assert doc_default(defaults.include_messages) in documented["include-messages"]
    assert doc_default(defaults.include_configs) in documented["include-configs"]


def test_the_plugin_lists_name_every_plugin():
    plugin_row = cells(rows(section("Sources and destinations", "spec.md").text)["plugin"])[-1]
    for name in [*SOURCE_SCHEMAS, *DESTINATION_SCHEMAS]:
        assert f"`{name}`" in plugin_row, name
    processor_row = cells(rows(section("Processors", "spec.md").text)["plugin"])[-1]
    assert {p.strip("` ") for p in processor_row.split(",")} == set(PROCESSOR_SCHEMAS)


# --- recovery (recovery.md, error-codes.md, simulator.md, configuration.md) ----------------------------------

EXAMPLE = re.compile(r"```console\n\$ (airflow-conduit recovery simulate[^\n]*)\n(.*?)```", re.DOTALL)


def simulator_examples() -> list[tuple[str, str]]:
    return [found for page in ("recovery.md", "simulator.md") for found in EXAMPLE.findall(page_text(page))]


def test_the_simulator_page_has_the_seed_scenarios():
    commands = [command for command, _ in EXAMPLE.findall(page_text("simulator.md"))]
    assert any("--failures 15:10 15:11 15:15" in c for c in commands)  # Conduit's scenario 1
    assert any("conduit-2" in c for c in commands)
    assert any("conduit-example-1" in c for c in commands)
    assert any("strimzi" in c for c in commands)


@pytest.mark.parametrize("command, printed", simulator_examples(), ids=[c for c, _ in simulator_examples()])
def test_simulator_output_in_the_docs_is_current(capsys, command, printed):
    parser = argparse.ArgumentParser(prog="airflow-conduit")
    recovery_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(shlex.split(command)[1:])
    assert args.func(args) == 0
    assert capsys.readouterr().out == printed


def test_every_error_code_is_documented_under_its_name_and_class():
    documented = {}
    for row in re.findall(r"^\| (\d+) \| `([A-Z_]+)` \|.*$", section("Error codes and exit codes", "error-codes.md").text, re.M):
        documented[row[1]] = int(row[0])
    known = {name: value for name, value in vars(codes).items()
             if name.isupper() and isinstance(value, int) and not name.endswith("_RANGE")}
    assert documented == known
    for line in section("Error codes and exit codes", "error-codes.md").text.splitlines():
        m = re.match(r"^\| (\d{4}) \| `([A-Z_]+)` \| (transient|fatal) \|", line)
        if m:
            assert (m.group(3) == "fatal") == codes.is_fatal_code(int(m.group(1))), line


def test_troubleshooting_names_each_code_by_its_name():
    text = section("Common causes by error code", "troubleshooting.md").text
    for value, name in re.findall(r"^\| (\d{4}) `([A-Z_]+)` \|", text, re.M):
        assert getattr(codes, name) == int(value), f"troubleshooting.md: {value} is not {name}"


def test_the_classification_rules_are_the_classifiers():
    """Every rule name the classifier can answer with is in the table, in the order the chain tries them."""
    table = [cells(line)[1].strip("`") for line in section("Fatal or transient?", "error-codes.md").text.splitlines()
             if re.match(r"^\| \d+ \| `", line)]
    source = inspect.getsource(sys.modules["airflow_conduit.recovery.classify"])
    chain = re.search(r"for step in \((.*?)\):", source, re.S).group(1)
    steps = re.findall(r"_by_(\w+)|(_user_rules)", chain)
    expected = ["user-rule" if user else {"exit_code": "exit-code"}.get(name, name) for name, user in steps] + ["default"]
    assert table == expected


def test_the_recovery_options_table_is_the_engines():
    documented = rows(section("Options", "recovery.md").text)
    defaults = RecoveryOptions().to_dict()
    assert set(documented) == set(defaults)
    for name, value in defaults.items():
        row = cells(documented[name])
        assert row[1] == f"`{name.replace('-', '_')}`", name
        shown = row[3].strip("`")
        if name == "policy":
            assert shown == value, name
        elif isinstance(value, str):
            assert seconds(shown) == seconds(value), name
        elif value is None:
            assert shown == "null", name
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            assert float(shown) == value, name
        else:
            assert shown == json.dumps(value), name
    for policy in POLICIES:
        assert f"`{policy}`" in documented["policy"]


def test_the_conduit_config_section_is_the_providers():
    documented = {}
    for title in ("Recovery options and their precedence", "Worker defaults"):
        documented.update(rows(section(title, "configuration.md").text))
    declared = {**RECOVERY_CONFIG_OPTIONS, **WORKER_CONFIG_OPTIONS}
    assert set(documented) == set(declared)
    for name, (_, default) in declared.items():
        assert cells(documented[name])[1] == f"`{default}`", name
