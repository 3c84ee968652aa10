"""Destination kafka and the Kafka DLQ: their settings as the loader checks them, and the crash point faults."""

from __future__ import annotations

import pytest

from airflow_conduit.pipeline.locations import dlq_location
from airflow_conduit.pipeline import SpecError, load_pipeline_from_string
from airflow_conduit.pipeline.faults_option import FaultsError, parse_faults

SPEC = """\
version: "1"
pipeline:
  id: k
  sources:
    - id: in
      plugin: file
      settings: {{path: /tmp/in, schema: "id BIGINT, region STRING"}}
  destinations:
    - id: out
      plugin: kafka
      settings: {dest}
  dead-letter-queue:
    plugin: kafka
    settings: {dlq}
"""


def load(dest: str, dlq: str = "{servers: 'b:9092', topic: dlq}"):
    return load_pipeline_from_string(SPEC.format(dest=dest, dlq=dlq), "k.yaml", env={})


def problems(dest: str, dlq: str = "{servers: 'b:9092', topic: dlq}") -> list[str]:
    with pytest.raises(SpecError) as info:
        load(dest, dlq)
    return [str(p) for p in info.value.problems]


def test_a_kafka_destination_and_dlq_load_with_their_record_settings():
    spec = load("{servers: 'b1:9092,b2:9092', topic: orders, key: id, value: 'to_json(struct(*))', "
                "headers: {producer: conduit}, header-fields: region}")
    settings = spec.destinations[0].settings
    assert (settings["topic"], settings["key"], settings["header-fields"]) == ("orders", "id", ["region"])
    assert spec.dead_letter_queue.plugin == "kafka" and spec.dead_letter_queue.settings["topic"] == "dlq"
    assert dlq_location(spec) == "kafka://b:9092/dlq"


def test_bad_kafka_destination_settings_are_named():
    assert any("missing required setting 'topic'" in p for p in problems("{servers: 'b:9092'}"))
    found = problems("{servers: 'b:9092', topic: t, headers: {conduit.batch.id: '7'}}")
    assert any("settings.headers" in p and "the runner's own" in p for p in found)
    found = problems("{servers: 'b:9092', topic: t, headers: {region: x}, header-fields: [region]}")
    assert any("both in headers and header-fields" in p for p in found)
    assert any("needs one of the settings servers, connection" in p for p in problems("{topic: t}"))


def test_a_kafka_dlq_refuses_the_record_settings_of_a_destination():
    found = problems("{servers: 'b:9092', topic: t}", dlq="{servers: 'b:9092', topic: dlq, key: id, headers: {a: b}}")
    assert any("dead-letter-queue.settings.key" in p and "original record" in p for p in found)
    assert any("dead-letter-queue.settings.headers" in p for p in found)


def test_the_crash_before_commit_fault_is_checked_like_crash_after_destination():
    point = {"destination": "out", "batch": 2}
    assert parse_faults({"crash_before_commit": point}) == {"crash_before_commit": point}
    with pytest.raises(FaultsError, match="crash_before_commit.*missing: batch"):
        parse_faults('{"crash_before_commit": {"destination": "out"}}')
