"""Valid specs load into the typed model with defaults filled in (pure Python, no Spark)."""

from __future__ import annotations

import os

import pytest

from airflow_conduit.pipeline import (
    DeadLetterQueueSpec,
    PipelineSpec,
    SpecError,
    load_pipeline,
    load_pipeline_from_string,
    validate_file,
)
from airflow_conduit.pipeline import model

from pipeline_spec_samples import MINIMAL

FULL = """\
version: 1
pipeline:
  id: everything
  description: every plugin once
  mode: continuous
  trigger-interval: 1m30s
  sources:
    - id: files
      plugin: file
      settings: {path: s3a://bucket/in, format: csv, header: false, schema: "a INT, b STRING", max-files-per-trigger: 2}
      processors:
        - {id: set-c, plugin: field.set, settings: {field: c, value: 1}}
        - {id: set-flag, plugin: field.set, settings: {field: flag, value: true}}
    - id: gen
      plugin: builtin:generator
      settings: {records: 50, rate: 10, fields: {a: int, b: "decimal(10, 2)"}, bad-record-ratio: 0.1, seed: 7}
  processors:
    - {id: rename, plugin: field.rename, settings: {mapping: {a: id}}}
    - {id: drop, plugin: field.exclude, settings: {fields: b}}
    - {id: keep-positive, plugin: filter, settings: {condition: "id > 0"}}
    - {id: compute, plugin: sql, settings: {expression: "*, concat(c, ',', id) AS k, id * 2 AS twice"}}
    - {id: decode, plugin: json.decode, settings: {field: c, schema: "x INT"}}
    - {id: mine, plugin: custom, settings: {function: "my_pkg.transforms:clean_record"}}
  destinations:
    - id: db
      plugin: jdbc
      settings: {url: "jdbc:postgresql://localhost:5432/db", table: public.t, user: u, key: id}
      processors:
        - {id: only-db, plugin: field.exclude, settings: {fields: [flag]}}
    - id: console
      plugin: log
    - id: csv-out
      plugin: file
      settings: {path: /abs/out, format: csv}
  dead-letter-queue:
    plugin: builtin:file
    settings: {path: dlq, format: json}
    window-size: 100
    window-nack-threshold: 10
    include-messages: false
    include-configs: true
  errors:
    retry:
      timeout: 30s
      delay.max: 500ms
"""


def test_minimal_spec_gets_conduit_and_kip298_defaults(tmp_path):
    spec = load_pipeline_from_string(MINIMAL, "mem.yaml", base_dir=str(tmp_path))
    assert isinstance(spec, PipelineSpec)
    assert spec.id == "orders" and spec.version == "1" and spec.mode == "available-now"
    assert spec.trigger_interval_seconds == 5.0
    assert spec.source_file == "mem.yaml"
    (source,) = spec.sources
    assert source.plugin == "file"  # "builtin:" prefix stripped
    assert source.settings == {
        "path": str(tmp_path / "data" / "in"), "format": "json", "schema": "id INT, customer STRING",
        "max-string-length": 20_000_000,  # Spark's JSON maxStringLen default, made visible
    }
    assert "header" not in source.settings  # header applies to csv only: no default filled for json
    # Conduit's DLQ defaults: builtin:log at warn, window 1, threshold 0 (the first nack stops the pipeline).
    dlq = spec.dead_letter_queue
    assert (dlq.plugin, dlq.window_size, dlq.window_nack_threshold) == ("log", 1, 0)
    assert dlq.settings == {"level": "warn", "message": "record delivery failed"}
    assert (dlq.include_messages, dlq.include_configs) == (True, False)
    assert (dlq.window_size, dlq.window_nack_threshold) == (DeadLetterQueueSpec().window_size, DeadLetterQueueSpec().window_nack_threshold)
    # KIP-298: no retry by default, at most 60 s between retries.
    assert spec.errors.retry.timeout_seconds == 0.0 and spec.errors.retry.delay_max_seconds == 60.0
    assert spec.secret_keys == frozenset() and spec.secret_paths == ()


def test_every_plugin_loads_with_normalized_settings(tmp_path):
    spec = load_pipeline_from_string(FULL, "full.yaml", base_dir=str(tmp_path))
    assert spec.mode == "continuous" and spec.trigger_interval_seconds == 90.0
    files, gen = spec.sources
    assert files.settings["path"] == "s3a://bucket/in"  # URIs are not touched
    assert files.settings["header"] is False and files.settings["max-files-per-trigger"] == 2
    assert [p.settings["value"] for p in files.processors] == ["1", "true"]  # YAML scalars become SQL literals
    assert gen.plugin == "generator"
    assert gen.settings == {"records": 50, "rate": 10, "fields": {"a": "INT", "b": "DECIMAL(10,2)"}, "bad-record-ratio": 0.1, "seed": 7}
    by_id = {p.id: p for p in spec.processors}
    assert by_id["drop"].settings["fields"] == ["b"]  # a lone string is a one-item list
    assert by_id["compute"].settings["select"] == ["*", "concat(c, ',', id) AS k", "id * 2 AS twice"]
    assert by_id["decode"].settings == {"field": "c", "schema": "x INT"}
    assert by_id["mine"].settings == {"function": "my_pkg.transforms:clean_record"}
    db, console, csv_out = spec.destinations
    assert db.settings["key"] == ["id"] and db.settings["driver"] == "org.postgresql.Driver"
    assert [p.id for p in db.processors] == ["only-db"]
    assert console.settings == {"level": "warn", "message": "record delivery failed"}
    assert csv_out.settings == {"path": "/abs/out", "format": "csv", "header": True}
    dlq = spec.dead_letter_queue
    assert dlq.plugin == "file" and dlq.settings == {"path": str(tmp_path / "dlq"), "format": "json"}
    assert (dlq.window_size, dlq.window_nack_threshold, dlq.include_messages, dlq.include_configs) == (100, 10, False, True)
    assert spec.errors.retry.timeout_seconds == 30.0 and spec.errors.retry.delay_max_seconds == 0.5


def test_components_in_pipeline_order_and_lookup_by_id(tmp_path):
    spec = load_pipeline_from_string(FULL, "full.yaml", base_dir=str(tmp_path))
    assert [c.id for c in spec.components()] == [
        "files", "set-c", "set-flag", "gen",
        "rename", "drop", "keep-positive", "compute", "decode", "mine",
        "only-db", "db", "console", "csv-out",
    ]
    assert spec.component("decode").plugin == "json.decode"
    with pytest.raises(KeyError):
        spec.component("nope")


def test_relative_paths_resolve_against_the_spec_files_folder(write_spec, tmp_path, monkeypatch):
    path = write_spec(MINIMAL)
    monkeypatch.chdir("/")
    spec = load_pipeline(path)
    assert spec.sources[0].settings["path"] == str(tmp_path / "data" / "in")
    assert spec.destinations[0].settings["path"] == str(tmp_path / "out" / "lake")
    assert spec.source_file == str(path)


def test_env_references_in_settings_are_resolved_and_typed():
    text = MINIMAL.replace("path: data/in", "path: ${IN_DIR}/${SUB}\n        max-files-per-trigger: ${MAX_FILES}")
    spec = load_pipeline_from_string(text, "env.yaml", env={"IN_DIR": "/data", "SUB": "orders", "MAX_FILES": "3"})
    assert spec.sources[0].settings["path"] == "/data/orders"
    assert spec.sources[0].settings["max-files-per-trigger"] == 3  # a number read from the environment


def test_double_dollar_escapes_a_literal_reference():
    text = MINIMAL.replace("path: data/in", "path: /x/$${NOT_A_VAR}")
    spec = load_pipeline_from_string(text, "esc.yaml", env={})
    assert spec.sources[0].settings["path"] == "/x/${NOT_A_VAR}"


def test_os_environ_is_the_default_environment(monkeypatch):
    monkeypatch.setenv("CONDUIT_TEST_IN", "/from/env")
    spec = load_pipeline_from_string(MINIMAL.replace("path: data/in", "path: ${CONDUIT_TEST_IN}"), "e.yaml")
    assert spec.sources[0].settings["path"] == "/from/env"


@pytest.mark.parametrize("version", ['"1"', "1", "1.0"])
def test_version_forms(version):
    spec = load_pipeline_from_string(MINIMAL.replace('version: "1"', f"version: {version}"), "v.yaml")
    assert spec.version == "1"


def test_version_may_be_omitted():
    assert load_pipeline_from_string(MINIMAL.replace('version: "1"\n', ""), "v.yaml").version == "1"


def test_durations_accept_numbers_of_seconds_and_units():
    text = MINIMAL.replace("  sources:", "  trigger-interval: 2\n  errors: {retry: {timeout: 90s, delay.max: 1h}}\n  sources:")
    spec = load_pipeline_from_string(text, "d.yaml")
    assert spec.trigger_interval_seconds == 2.0
    assert spec.errors.retry.timeout_seconds == 90.0 and spec.errors.retry.delay_max_seconds == 3600.0


@pytest.mark.parametrize("timeout, delay_max, seconds", [
    ("300000", "60000", (300.0, 60.0)),  # a Kafka Connect config copied as is: errors.retry.timeout=300000
    ("100", "'250'", (0.1, 0.25)),
    ("1.5", "1e3", (0.0015, 1.0)),
    ("0", "5s", (0.0, 5.0)),
])
def test_bare_numbers_under_errors_retry_are_milliseconds_as_in_kafka_connect(timeout, delay_max, seconds):
    text = MINIMAL.replace("  sources:", f"  errors: {{retry: {{timeout: {timeout}, delay.max: {delay_max}}}}}\n  sources:")
    retry = load_pipeline_from_string(text, "d.yaml").errors.retry
    assert (retry.timeout_seconds, retry.delay_max_seconds) == pytest.approx(seconds)


def test_a_negative_bare_number_under_errors_retry_is_refused_saying_it_reads_milliseconds():
    text = MINIMAL.replace("  sources:", "  errors: {retry: {timeout: -100}}\n  sources:")
    with pytest.raises(SpecError) as refused:
        load_pipeline_from_string(text, "d.yaml")
    message = str(refused.value)
    assert "d.yaml" in message and "pipeline.errors.retry.timeout" in message
    assert "a number without a unit is milliseconds here, as in Kafka Connect" in message


def test_validate_file_is_empty_for_a_valid_spec(write_spec):
    assert validate_file(write_spec(MINIMAL)) == []


def test_spec_is_immutable_and_comparable():
    a = load_pipeline_from_string(MINIMAL, "a.yaml", base_dir="/x")
    b = load_pipeline_from_string(MINIMAL, "a.yaml", base_dir="/x")
    assert a == b
    with pytest.raises(Exception):
        a.id = "other"  # frozen dataclass


def test_plugin_tables_match_the_model():
    from airflow_conduit.pipeline.settings_schema import DESTINATION_SCHEMAS, PROCESSOR_SCHEMAS, SOURCE_SCHEMAS

    assert tuple(SOURCE_SCHEMAS) == model.SOURCE_PLUGINS
    assert tuple(DESTINATION_SCHEMAS) == model.DESTINATION_PLUGINS
    assert tuple(PROCESSOR_SCHEMAS) == model.PROCESSOR_PLUGINS


def test_load_pipeline_raises_spec_error_for_missing_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_pipeline(tmp_path / "absent.yaml")
    assert str(info.value) == f"{tmp_path / 'absent.yaml'}: file not found"
    assert os.fspath(tmp_path / "absent.yaml") == info.value.file


@pytest.mark.parametrize("value", ["abc", "5x", "''", "true", "[1]"])
def test_an_unreadable_duration_under_errors_retry_says_a_bare_number_is_milliseconds(value):
    text = MINIMAL.replace("  sources:", f"  errors: {{retry: {{timeout: {value}}}}}\n  sources:")
    with pytest.raises(SpecError) as refused:
        load_pipeline_from_string(text, "d.yaml")
    message = str(refused.value)
    assert "pipeline.errors.retry.timeout" in message and "a number of milliseconds" in message
    assert "a number of seconds" not in message
