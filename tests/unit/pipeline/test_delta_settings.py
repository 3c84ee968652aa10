"""The `delta` destination's settings are checked when the spec is loaded: names the file, the key and what to do."""

from __future__ import annotations

import pytest

from airflow_conduit.pipeline import SpecError, load_pipeline, validate_file

SPEC = """\
version: "1"
pipeline:
  id: lakehouse
  sources:
    - id: in
      plugin: file
      settings: {{path: in, schema: "id BIGINT NOT NULL"}}
  destinations:
    - id: lake
      plugin: delta
      settings: {settings}
  dead-letter-queue:
    plugin: delta
    settings: {{path: dlq}}
"""


def _write(tmp_path, settings: str):
    path = tmp_path / "pipeline.yaml"
    path.write_text(SPEC.format(settings=settings))
    return path


def _problems(tmp_path, settings: str) -> list[str]:
    return [str(p) for p in validate_file(_write(tmp_path, settings))]


def test_a_valid_delta_destination_and_dlq_get_their_defaults(tmp_path):
    spec = load_pipeline(_write(tmp_path, "{path: lake}"))
    assert spec.destinations[0].settings == {"path": str(tmp_path / "lake"), "mode": "append", "merge-schema": False}
    assert spec.dead_letter_queue.plugin == "delta" and spec.dead_letter_queue.settings["path"] == str(tmp_path / "dlq")
    merge = load_pipeline(_write(tmp_path, "{table: lake.orders, mode: merge, key: id}"))
    assert merge.destinations[0].settings["key"] == ["id"]


def test_a_folder_of_parquet_or_json_files_is_not_taken_for_a_delta_table(tmp_path):
    (tmp_path / "lake").mkdir()
    (tmp_path / "lake" / "part-0.parquet").write_bytes(b"PAR1")
    problems = _problems(tmp_path, "{path: lake}")
    assert len(problems) == 1
    assert "pipeline.yaml:11: pipeline.destinations[0].settings.path:" in problems[0]
    assert "holds files but is not a Delta table (no _delta_log)" in problems[0] and "CONVERT TO DELTA" in problems[0]
    (tmp_path / "lake" / "_delta_log").mkdir()  # a Delta table's folder holds Parquet files too
    assert _problems(tmp_path, "{path: lake}") == []


@pytest.mark.parametrize(
    "settings,fragment",
    [
        ("{mode: merge, path: lake}", "settings: missing required setting 'key'"),
        ("{path: lake, key: id}", "settings.key: applies only when mode is merge"),
        ("{path: lake, table: t}", "give only one of the settings path, table"),
        ("{mode: append}", "needs one of the settings path, table"),
        ("{path: lake, mode: upsert}", "settings.mode:"),
    ],
)
def test_wrong_delta_settings_are_named(tmp_path, settings, fragment):
    problems = _problems(tmp_path, settings)
    assert any(fragment in p for p in problems), problems
    with pytest.raises(SpecError):
        load_pipeline(_write(tmp_path, settings))
