"""docs/pipelines.md documents every key and setting the loader knows, with the loader's defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_conduit.pipeline import loader, model
from airflow_conduit.pipeline.settings_schema import DESTINATION_SCHEMAS, PROCESSOR_SCHEMAS, SOURCE_SCHEMAS

DOC = (Path(__file__).resolve().parents[3] / "docs" / "pipelines.md").read_text()


def section(heading: str) -> str:
    start = DOC.index(heading + "\n")
    end = DOC.find("\n#", start + len(heading))
    return DOC[start:end if end != -1 else None]


def rows(text: str) -> dict[str, str]:
    """First-column key -> the whole table row, for rows like '| `key` | ...'."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", text, re.MULTILINE)}


def doc_default(value) -> str:
    return "`true`" if value is True else "`false`" if value is False else f"`{value}`"


PLUGIN_SECTIONS = (
    [(f"### Source `{name}`", schema) for name, schema in SOURCE_SCHEMAS.items()]
    + [(f"### Destination `{name}`", schema) for name, schema in DESTINATION_SCHEMAS.items()]
    + [(f"### `{name}`", schema) for name, schema in PROCESSOR_SCHEMAS.items()]
)


@pytest.mark.parametrize("heading,schema", PLUGIN_SECTIONS, ids=[h for h, _ in PLUGIN_SECTIONS])
def test_every_setting_is_documented_with_its_default(heading, schema):
    documented = rows(section(heading))
    assert set(documented) == set(schema.settings), f"{heading}: docs and settings_schema.py disagree"
    for key, setting in schema.settings.items():
        if setting.has_default:
            assert doc_default(setting.default) in documented[key], f"{heading} {key}: default {setting.default!r}"


@pytest.mark.parametrize(
    "heading,keys",
    [
        ("### Top level", loader.TOP_KEYS),
        ("### `pipeline`", loader.PIPELINE_KEYS),
        ("### Sources and destinations", loader.CONNECTOR_KEYS),
        ("### Processors", loader.PROCESSOR_KEYS),
        ("### `pipeline.dead-letter-queue`", loader.DLQ_KEYS),
        ("### `pipeline.errors`", tuple(f"retry.{k}" for k in loader.RETRY_KEYS)),
    ],
)
def test_every_structural_key_is_documented(heading, keys):
    assert set(rows(section(heading))) == set(keys)


def test_dlq_defaults_in_the_docs_are_the_models():
    documented = rows(section("### `pipeline.dead-letter-queue`"))
    defaults = model.DeadLetterQueueSpec()
    assert doc_default(defaults.window_size) in documented["window-size"]
    assert doc_default(defaults.window_nack_threshold) in documented["window-nack-threshold"]
    assert doc_default(defaults.include_messages) in documented["include-messages"]
    assert doc_default(defaults.include_configs) in documented["include-configs"]


def test_sections_left_for_the_runner_exist():
    for heading in ("## Dead letter queue record format", "## Run report format", "## Exactly once"):
        assert heading + "\n" in DOC
