"""Kafka client settings: the spec's keys, their checks, and an Airflow `kafka` connection mapped to Java's names."""

from __future__ import annotations

import json

import pytest

from airflow_conduit.pipeline import Secret, SpecError, load_pipeline_from_string, redacted_dict
from airflow_conduit.pipeline.kafka_settings import KafkaClientConfigError, java_client_properties
from airflow_conduit.pipeline.secrets import secret_values

SPEC = """\
version: "1"
pipeline:
  id: k
  sources:
    - id: in
      plugin: kafka
      settings:
{settings}
  destinations:
    - id: out
      plugin: file
      settings: {{path: /tmp/out}}
"""


def load(settings: str, env: dict | None = None):
    indented = "\n".join("        " + line for line in settings.strip().splitlines())
    return load_pipeline_from_string(SPEC.format(settings=indented), "k.yaml", env=env or {})


def problems(settings: str, env: dict | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(settings, env)
    return [str(p) for p in info.value.problems]


def test_minimal_source_fills_defaults():
    spec = load("servers: 127.0.0.1:9092\ntopics: orders\nschema: 'id INT'")
    settings = spec.sources[0].settings
    assert settings["topics"] == ["orders"]
    assert settings["starting-offsets"] == "earliest"
    assert settings["fail-on-data-loss"] is True
    assert settings["format"] == "json"


@pytest.mark.parametrize(
    "settings,fragment",
    [
        ("topics: [a]\nschema: 'id INT'", "needs one of the settings servers, connection"),
        ("servers: h:1\nconnection: c\ntopics: [a]\nschema: 'id INT'", "give only one of the settings servers, connection"),
        ("servers: localhost\ntopics: [a]\nschema: 'id INT'", "settings.servers: expected host:port"),
        ("servers: h:1\nschema: 'id INT'", "needs one of the settings topics, topic-pattern"),
        ("servers: h:1\ntopics: [a]\ntopic-pattern: 'a.*'\nschema: 'id INT'", "give only one of the settings topics, topic-pattern"),
        ("servers: h:1\ntopics: [a]", "missing required setting 'schema'"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT'\nstarting-offsets: newest", "settings.starting-offsets: expected earliest, latest"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT'\nstarting-offsets: {b: {0: 5}}", "names topics the source does not read: b"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT'\nstarting-offsets: {a: {x: 5}}", "partition 'x' is not a partition number"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT'\noptions: {auto.offset.reset: earliest}", "use the setting starting-offsets"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT'\nsasl-username: u", "settings.sasl-password: missing"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT'\nsasl-username: u\nsasl-password: p", "settings.sasl-mechanism: missing"),
        ("servers: h:1\ntopics: [a]\nformat: raw\nraw-type: text", "settings.raw-type: expected one of string, binary"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT, _kafka_key STRING'", "settings.schema: field '_kafka_key' has the name of the Kafka metadata"),
        ("servers: h:1\ntopics: [a]\nschema: 'id INT'\nmax-records-per-batch: 0", "settings.max-records-per-batch: expected an integer >= 1"),
    ],
)
def test_bad_settings_name_the_file_and_key(settings, fragment):
    found = problems(settings)
    assert all(p.startswith("k.yaml") for p in found)
    assert any(fragment in p for p in found), found


def test_per_partition_offsets_become_spark_json():
    spec = load("servers: h:1\ntopics: [a]\nschema: 'id INT'\nstarting-offsets: {a: {0: 5, 1: -2}}")
    assert json.loads(spec.sources[0].settings["starting-offsets"]) == {"a": {"0": 5, "1": -2}}


def test_sasl_password_and_secret_options_never_show():
    spec = load(
        "servers: h:1\ntopics: [a]\nschema: 'id INT'\nsecurity-protocol: sasl_ssl\nsasl-mechanism: scram-sha-512\n"
        "sasl-username: alice\nsasl-password: ${KAFKA_PW}\noptions: {ssl.key.password: kp, client.id: c1}",
        env={"KAFKA_PW": "pw-123"},
    )
    settings = spec.sources[0].settings
    assert isinstance(settings["sasl-password"], Secret)
    assert isinstance(settings["options"]["ssl.key.password"], Secret)
    text = json.dumps(redacted_dict(spec))
    assert "pw-123" not in text and "kp" not in text and "c1" in text
    assert set(secret_values(spec)) >= {"pw-123", "kp"}
    props = java_client_properties(settings)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    jaas = props["sasl.jaas.config"]
    assert isinstance(jaas, Secret) and str(jaas) == "***"
    assert jaas.get_secret_value() == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="pw-123";'
    )


AIRFLOW_KAFKA_CONN = {
    "conn_type": "kafka",
    "extra": {
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "svc",
        "sasl.password": 'p"w\\1',
        "ssl.ca.location": "/etc/ca.pem",
        "group.id": "ignored-by-spark",
        "client.id": "conduit",
    },
}


def test_airflow_kafka_connection_maps_librdkafka_names_to_java():
    props = java_client_properties({"connection": "kafka_prod"}, {"kafka_prod": AIRFLOW_KAFKA_CONN})
    plain = {k: (v.get_secret_value() if isinstance(v, Secret) else v) for k, v in props.items()}
    assert plain["bootstrap.servers"] == "b1:9093,b2:9093"
    assert plain["security.protocol"] == "SASL_SSL" and plain["sasl.mechanism"] == "PLAIN"
    assert plain["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="svc" password="p\\"w\\\\1";'
    )
    assert plain["ssl.truststore.type"] == "PEM" and plain["ssl.truststore.location"] == "/etc/ca.pem"
    assert "sasl.username" not in plain and "sasl.password" not in plain


def test_spec_settings_override_the_connection():
    props = java_client_properties(
        {"connection": "kafka_prod", "servers": "local:1", "options": {"client.id": "mine"}}, {"kafka_prod": AIRFLOW_KAFKA_CONN}
    )
    assert props["bootstrap.servers"] == "local:1" and props["client.id"] == "mine"


@pytest.mark.parametrize(
    "connections,fragment",
    [
        ({}, "the Airflow connection 'kafka_prod' was not handed to the job"),
        ({"kafka_prod": {"conn_type": "postgres", "extra": {}}}, "has type 'postgres'"),
        ({"kafka_prod": {"conn_type": "kafka", "extra": {"ssl.key.location": "/k"}}}, "extra 'ssl.key.location' has no equivalent"),
        ({"kafka_prod": {"conn_type": "kafka", "extra": {"client.id": "x"}}}, "give no bootstrap servers"),
        ({"kafka_prod": {"conn_type": "kafka", "extra": {"bootstrap.servers": "h:1", "sasl.username": "u"}}}, "needs its password"),
    ],
)
def test_unusable_connection_is_a_named_error(connections, fragment):
    with pytest.raises(KafkaClientConfigError) as info:
        java_client_properties({"connection": "kafka_prod"}, connections)
    assert fragment in str(info.value)
    assert "p\"w" not in str(info.value)


def test_connection_host_and_login_fill_what_the_extra_leaves_out():
    conn = {"conn_type": "kafka", "host": "broker", "port": 9092, "login": "u", "password": "pw", "extra": {"sasl.mechanism": "SCRAM-SHA-256"}}
    props = java_client_properties({"connection": "c"}, {"c": conn})
    assert props["bootstrap.servers"] == "broker:9092"
    assert "ScramLoginModule" in props["sasl.jaas.config"].get_secret_value()
