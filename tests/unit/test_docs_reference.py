"""The reference tables of docs/ say what the code does: every key, setting, option, argument, flag and code the
code knows is documented with the code's default, and nothing the code does not know is."""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
import shlex
import sys

import pytest

from docs_pages import DOCS, cells, rows, section

import airflow_conduit.pipeline as pipeline_package
from airflow_conduit.cli import dlq_cmd, recovery_cmd, run_cmd
from airflow_conduit.cli import main as cli_main
from airflow_conduit.cli.main import build_parser
from airflow_conduit.get_provider_info import RECOVERY_CONFIG_OPTIONS, WORKER_CONFIG_OPTIONS
from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator
from airflow_conduit.operators.replay import DeadLetterQueueReplayOperator
from airflow_conduit.pipeline import faults_option, kafka_headers, loader, model, yaml_source
from airflow_conduit.pipeline.kafka_settings import METADATA_NAMES
from airflow_conduit.pipeline.settings_schema import DESTINATION_SCHEMAS, PROCESSOR_SCHEMAS, SOURCE_SCHEMAS
from airflow_conduit.recovery import codes, durations
from airflow_conduit.recovery.classify import EXCEPTION_CLASSES, MESSAGE_PATTERNS, SPARK_CONDITIONS, SQLSTATE_CLASSES
from airflow_conduit.recovery.durations import parse_duration
from airflow_conduit.recovery.options import POLICIES, RecoveryOptions
from airflow_conduit.recovery.state import AuditEventType, PipelineState
from airflow_conduit.runs.report import RunReport
from airflow_conduit.runs.status import RunStatus
from airflow_conduit.sensors.pipeline import DeadLetterQueueSensor, PipelineStateSensor
from airflow_conduit.triggers.pipeline import SparkPipelineTrigger


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


# --- the Airflow layer (operators.md, sensors.md) and the command line (cli.md) -----------------------------

def argument_rows(text: str) -> dict[str, list[str]]:
    """Argument name -> its row's cells, for tables whose first cell names one or more arguments in backticks."""
    found = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        row = cells(line)
        for name in re.findall(r"`([^`]+)`", row[0]):
            found[name] = row
    return found


def documented_default(row: list[str], position: int) -> object:
    """The default a row shows for its ``position``-th argument: 'required', or the Python value in backticks."""
    cell = row[1]
    if cell == "required":
        return inspect.Parameter.empty
    values = re.findall(r"`([^`]+)`", cell)
    return ast.literal_eval(values[position] if len(values) > 1 else values[0])


ARGUMENT_TABLES = [
    ("RecoveringSparkPipelineOperator", "operators.md", RecoveringSparkPipelineOperator, {"launcher", "launcher_options"}),
    ("DeadLetterQueueReplayOperator", "operators.md", DeadLetterQueueReplayOperator, set()),
    ("`PipelineStateSensor`", "sensors.md", PipelineStateSensor, set()),
    ("`DeadLetterQueueSensor`", "sensors.md", DeadLetterQueueSensor, set()),
    ("`SparkPipelineTrigger`", "sensors.md", SparkPipelineTrigger, set()),
]


@pytest.mark.parametrize("heading,page,cls,deprecated", ARGUMENT_TABLES, ids=[h for h, *_ in ARGUMENT_TABLES])
def test_every_argument_is_documented_with_its_default_and_whether_it_is_templated(heading, page, cls, deprecated):
    documented = argument_rows(section(heading, page).text)
    parameters = {name: p for name, p in inspect.signature(cls.__init__).parameters.items()
                  if name not in ("self", "kwargs") and name not in deprecated}
    extra = set(documented) - set(parameters) - {"retries"}  # retries: Airflow's own, set to 0 by the operator
    assert set(parameters) <= set(documented), f"{heading}: not documented: {sorted(set(parameters) - set(documented))}"
    assert not extra, f"{heading}: documented but not an argument: {sorted(extra)}"
    templated = set(getattr(cls, "template_fields", ()))
    for name, parameter in parameters.items():
        row = documented[name]
        names = re.findall(r"`([^`]+)`", row[0])
        assert documented_default(row, names.index(name)) == parameter.default, f"{heading} {name}"
        if hasattr(cls, "template_fields"):
            assert ("templated" in row[2].lower()) == (name in templated), f"{heading} {name}: templated?"


def cli_commands(parser: argparse.ArgumentParser, prefix: str = "airflow-conduit"):
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield prefix, parser
        return
    for name, child in subcommands[0].choices.items():
        yield from cli_commands(child, f"{prefix} {name}")


@pytest.mark.parametrize("command,parser", list(cli_commands(build_parser())), ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_line_flag_is_documented_with_its_default(command, parser):
    documented = argument_rows(section(f"`{command}`", "cli.md").text)
    flags = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.metavar
        flags[name] = action
    assert set(documented) == set(flags), f"{command}: docs and the parser disagree"
    for name, action in flags.items():
        cell = documented[name][1]
        if action.required or not action.option_strings:
            assert cell == "required", f"{command} {name}"
        elif action.default not in (None, False):
            assert f"`{action.default}`" in cell, f"{command} {name}: default {action.default!r}"
        if action.choices:
            for choice in action.choices:
                assert f"`{choice}`" in documented[name][2], f"{command} {name}: choice {choice}"


def test_every_fault_is_documented():
    documented = set(re.findall(r'^\| `\{"(\w+)"', section("Fault injection", "runs.md").text, re.M))
    assert documented == set(faults_option.KEYS)


def test_the_run_report_statuses_and_keys_are_the_reports():
    text = section("Run report format", "runs.md").text
    status = next(line for line in text.splitlines() if line.startswith("- `status`"))
    status += text.split(status, 1)[1].split("\n- ", 1)[0]
    assert set(re.findall(r"`([a-z]+)`\s+\(", status)) == {str(s) for s in RunStatus}
    report = RunReport("p", "r", replay={}, input_files_changed=[{}], destinations_added=[{}]).to_dict()
    for key in report:
        assert f'"{key}"' in text, key
    for counter in report["counters"]:
        assert f"`{counter}`" in text, counter


def built_in_table(header: str) -> list[list[str]]:
    """The rows of the built-in table whose header row starts with ``header`` (error-codes.md)."""
    text = section("Built-in tables", "error-codes.md").text
    start = text.index(f"| {header} |")
    table = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        table.append(cells(line))
    return table


def test_the_spark_conditions_table_is_the_classifiers():
    documented = {name: int(row[-1].split()[0]) for row in built_in_table("condition")
                  for name in re.findall(r"`([A-Z_]+)`", row[0])}
    assert documented == SPARK_CONDITIONS


def test_the_sqlstate_table_is_the_classifiers():
    documented = {name: int(row[-1]) for row in built_in_table("SQLSTATE class") for name in re.findall(r"`(\w+)`", row[0])}
    assert documented == {prefix: code for prefix, (code, _) in SQLSTATE_CLASSES.items()}


def test_the_message_patterns_table_is_the_classifiers_in_its_order():
    assert [int(row[-1]) for row in built_in_table("the message says")] == [code for _, code in MESSAGE_PATTERNS]


def test_every_exception_class_the_classifier_knows_is_named():
    text = section("Built-in tables", "error-codes.md").text
    for name in EXCEPTION_CLASSES:
        short = name.rsplit(".", 1)[-1]
        assert f"`{name}`" in text or short in text, name


# --- the DLQ and Kafka formats (dlq.md, kafka.md) ------------------------------------------------------------

def test_the_dlq_record_columns_are_the_writers():
    documented = rows(section("Dead letter queue record format", "dlq.md").text)
    assert set(documented) == {column for column, _, _ in kafka_headers.DLQ_COLUMNS_FROM_HEADERS} | {"record"}


def test_the_kafka_metadata_columns_are_the_sources():
    documented = rows(section("Example, metadata, values, positions", "kafka.md").text)
    assert set(documented) == set(METADATA_NAMES)


def test_the_kafka_dlq_headers_are_the_writers():
    text = section("Kafka DLQ", "kafka.md").text
    documented = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            documented |= set(re.findall(r"`((?:__connect|conduit)\.[a-z._]+)`", cells(line)[0]))
    expected = {kafka_headers.CONNECT + name for name, _ in kafka_headers.CONNECT_HEADERS}
    expected |= {kafka_headers.HEADER_PIPELINE, kafka_headers.HEADER_QUERY, kafka_headers.HEADER_BATCH, kafka_headers.HEADER_RECORD}
    expected |= {kafka_headers.DLQ_HEADER + column for column in kafka_headers.CONDUIT_DLQ_HEADERS}
    assert documented == expected


def test_the_pipeline_states_are_the_engines():
    engine_states = {str(state) for state in PipelineState}
    assert set(rows(section("Troubleshooting a degraded pipeline", "troubleshooting.md").text)) == engine_states
    transitions = section("Pipeline states and audit log", "recovery.md").text
    assert set(re.findall(r"`(running|recovering|degraded|stopped|[a-z]+)` \|", transitions)) >= engine_states
    audit = transitions[transitions.index("| event | when | details |"):]
    events = {cells(line)[0].strip("`") for line in audit.splitlines() if line.startswith("| `")}
    assert events == {str(event) for event in AuditEventType}


@pytest.mark.parametrize("command,module", [("airflow-conduit run", run_cmd), ("airflow-conduit dlq replay", dlq_cmd)])
def test_every_exit_code_of_a_command_is_documented(command, module):
    text = section(f"`{command}`", "cli.md").text
    listed = text[text.index("Exit codes:"):]
    listed = listed[:listed.index(".\n") if ".\n" in listed else None]
    values = {value for name, value in vars(module).items() if name.startswith("EXIT_") and isinstance(value, int)}
    if module is run_cmd:
        values.add(cli_main.EXIT_INTERNAL_ERROR)
    documented = {int(n) for n in re.findall(r"(?<![\w.-])(\d{1,3}) (?=[a-z])", " ".join(listed.split()))}
    assert documented == values, command


def test_the_spec_limits_are_the_readers():
    limits = {cells(line)[0]: cells(line)[1] for line in section("Limits", "spec.md").text.splitlines()
              if line.startswith("| ") and not line.startswith("| limit") and not line.startswith("| ---")}
    assert limits["file size"].startswith(f"{yaml_source.MAX_SPEC_CHARS:,} characters")
    assert limits["nesting"].startswith(f"{yaml_source.MAX_DEPTH} levels")
    assert limits["alias expansion"].startswith(f"{yaml_source.MAX_VALUES:,} values")
    assert seconds(limits["durations"].split()[0]) == durations.MAX_DURATION_SECONDS


def test_the_python_api_table_names_what_the_package_exports():
    for line in section("Validation", "spec.md").text.splitlines():
        if line.startswith("| `"):
            for call in re.findall(r"`(\w+)\(", cells(line)[0]):
                assert call in pipeline_package.__all__, call


def test_the_exactly_once_table_covers_every_destination_plugin():
    documented = rows(section("Exactly once", "exactly-once.md").text)
    assert set(documented) == set(DESTINATION_SCHEMAS)


def test_the_policy_tables_name_every_policy():
    for title in ("Backoff policies", "What max-retries counts"):
        documented = set()
        for line in section(title, "recovery.md").text.splitlines():
            if line.startswith("| `"):
                documented |= set(re.findall(r"`(\w+)`", cells(line)[0]))
        assert documented == set(POLICIES), title
