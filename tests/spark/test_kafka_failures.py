"""Kafka's own failures, produced by real brokers, are classified by their cause and tell the user what to do.

The shared test broker gives an unknown topic (auto-create is off), a closed port and a data loss
(records deleted under the checkpoint with the admin client). A second broker with a SASL/PLAIN listener
and ACLs gives an authentication and an authorization failure, and reads through an Airflow connection.
"""

from __future__ import annotations

import json
import uuid

import pytest

from kafka_sasl import ALICE, granted_and_closed_topics, sasl_broker
from airflow_conduit.pipeline.kafka_settings import CONNECTIONS_ENV
from airflow_conduit.pipeline.model import SourceSpec
from airflow_conduit.recovery import codes
from airflow_conduit.spark.runner import execute
from postgres_server import free_port
from spark_helpers import dlq_file, file_dest, pipeline, read_json_rows

FAST_FAILURE = {"default.api.timeout.ms": "10000", "request.timeout.ms": "5000"}


def raw_source(servers: str, topic: str, **settings) -> SourceSpec:
    values = {"servers": servers, "topics": [topic], "format": "raw", "starting-offsets": "earliest",
              "fail-on-data-loss": True, **settings}
    return SourceSpec(id="in", plugin="kafka", settings=values)


def run(spark, tmp_path, source, name="kafka-fail", run_id="r1"):
    spec = pipeline(name, [source], [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    return execute(spark, spec, state_dir=tmp_path / "state", run_id=run_id)


def test_an_unknown_topic_is_fatal_and_says_to_create_it(spark, kafka, tmp_path):
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, f"missing-{uuid.uuid4().hex[:8]}", options=FAST_FAILURE))
    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.KAFKA_UNKNOWN_TOPIC and report.error["fatal"] is True
    assert report.error["message"].startswith("the Kafka topic does not exist")


def test_a_broker_that_does_not_answer_is_transient(spark, tmp_path):
    closed = f"127.0.0.1:{free_port()}"
    code, report = run(spark, tmp_path, raw_source(closed, "any", options=FAST_FAILURE))
    assert code == codes.EXIT_TRANSIENT
    assert report.error["code"] == codes.KAFKA_UNREACHABLE and report.error["fatal"] is False
    assert "no Kafka broker answered" in report.error["message"]


def test_records_gone_under_the_checkpoint_are_a_fatal_data_loss_unless_allowed(spark, kafka, tmp_path):
    from confluent_kafka import TopicPartition

    topic = kafka.create_topic()
    kafka.produce(topic, [b"a", b"b", b"c"])
    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic))
    assert code == 0, report.error
    kafka.produce(topic, [b"d", b"e", b"f"])
    admin = kafka.admin()
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(120)  # d (3) and e (4) are gone before the pipeline read them

    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic), run_id="r2")
    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.KAFKA_DATA_LOSS and report.error["fatal"] is True
    assert "fail-on-data-loss: false" in report.error["message"]

    code, report = run(spark, tmp_path, raw_source(kafka.bootstrap, topic, **{"fail-on-data-loss": False}), run_id="r3")
    assert code == 0, report.error
    values = sorted(row["value"] for row in read_json_rows(spark, tmp_path / "out"))
    assert values == ["a", "b", "c", "f"]


# -- a broker with SASL/PLAIN and ACLs (tests/kafka_sasl.py) ------------------------------------------------


@pytest.fixture(scope="module")
def secured():
    """The SASL broker and two topics: ``granted`` (alice may read it) and ``closed`` (no ACL for alice)."""
    with sasl_broker() as broker:
        yield broker, granted_and_closed_topics(broker)


def test_wrong_credentials_are_a_fatal_authentication_failure(spark, secured, tmp_path):
    broker, topics = secured
    source = raw_source(broker.bootstrap, topics["granted"], options=FAST_FAILURE, **{
        "security-protocol": "sasl_plaintext", "sasl-mechanism": "plain", "sasl-username": ALICE[0],
        "sasl-password": "not-her-password"})
    code, report = run(spark, tmp_path, source)
    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.KAFKA_AUTHENTICATION, report.error
    assert "sasl-username / sasl-password" in report.error["message"]
    assert "not-her-password" not in json.dumps(report.to_dict())


def test_a_topic_without_an_acl_is_a_fatal_authorization_failure(spark, secured, tmp_path):
    broker, topics = secured
    source = raw_source(broker.bootstrap, topics["closed"], options=FAST_FAILURE, **{
        "security-protocol": "sasl_plaintext", "sasl-mechanism": "plain", "sasl-username": ALICE[0],
        "sasl-password": ALICE[1]})
    code, report = run(spark, tmp_path, source)
    assert code == codes.EXIT_FATAL
    assert report.error["code"] == codes.KAFKA_AUTHORIZATION, report.error
    assert "grant it ACLs" in report.error["message"]


def test_an_airflow_kafka_connection_gives_the_client_settings(spark, secured, tmp_path, monkeypatch):
    """A real Airflow connection (AIRFLOW_CONN_*) of type kafka, resolved by the hook's module, handed over in the
    driver's environment: the SASL user and password become Java's sasl.jaas.config."""
    from airflow_conduit.hooks.kafka_connections import driver_environment

    broker, topics = secured
    extra = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": ALICE[0], "sasl.password": ALICE[1], "group.id": "airflow-provider-default"}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECURED", json.dumps({"conn_type": "kafka", "extra": extra}))
    spec_file = tmp_path / "pipeline.yaml"
    spec_file.write_text(
        "version: '1'\npipeline:\n  id: kafka-conn\n  sources:\n    - id: in\n      plugin: kafka\n      settings:\n"
        f"        connection: kafka_secured\n        topics: [{topics['granted']}]\n        format: raw\n"
        "  destinations:\n    - id: out\n      plugin: file\n      settings: {path: out}\n"
    )
    env = driver_environment(spec_file)
    assert set(env) == {CONNECTIONS_ENV}
    monkeypatch.setenv(CONNECTIONS_ENV, env[CONNECTIONS_ENV])
    from airflow_conduit.pipeline import load_pipeline

    spec = load_pipeline(spec_file)
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0, report.error
    values = sorted(json.loads(row["value"])["id"] for row in read_json_rows(spark, tmp_path / "out"))
    assert values == [0, 1, 2]
    assert ALICE[1] not in json.dumps(report.to_dict())
