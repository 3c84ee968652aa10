"""The reference tables of docs/ say what the code does: every key, setting, option, argument, flag and code the
code knows is documented with the code's default, and nothing the code does not know is."""

from __future__ import annotations

import pytest

from docs_pages import cells, rows, section

from airflow_conduit.pipeline import loader, model
from airflow_conduit.pipeline.settings_schema import DESTINATION_SCHEMAS, PROCESSOR_SCHEMAS, SOURCE_SCHEMAS
from airflow_conduit.recovery.durations import format_duration, parse_duration


def doc_default(value) -> str:
    return "`true`" if value is True else "`false`" if value is False else f"`{value}`"


def default_cell(row: str, column: int) -> str:
    """The text of a row's default cell, without its backticks."""
    return cells(row)[column].strip("`")


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
