"""Kafka's own failures are classified by their real cause, with what to do (real Java exception texts).

The unknown-topic, unreachable and data-loss texts are what Spark 4.2's Kafka source printed against the
test broker (tests/spark/test_kafka_failures.py runs them for real); the others are the Kafka 3.9 client's
exception messages.
"""

from __future__ import annotations

import pytest

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.classify import classify, structured_error_from_exception

UNKNOWN_TOPIC = (
    "[STREAM_FAILED] Query [id = 9cd9e046-a3de-497b-b945-7244eb5644c8, runId = a3651bc3-05d0-4ec2-a3dc-207af32fd82f] "
    "terminated with exception: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does "
    "not host this topic-partition. SQLSTATE: XXKST\n"
    "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
    "This server does not host this topic-partition.\n"
)
UNREACHABLE = (
    "[STREAM_FAILED] Query [id = c91fd838-4561-422c-8c09-6eb6be5c8898, runId = f9ff6b35-ead8-4fde-9a6a-601789c0de0b] "
    "terminated with exception: org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node "
    "assignment. Call: listNodes SQLSTATE: XXKST\n"
    "Caused by: org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment. Call: listNodes\n"
)
DATA_LOSS = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o1609.save.\n"
    ": org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have been lost because they are not "
    "available in Kafka any more;\neither the data was aged out by Kafka or the topic may have been deleted before all "
    "the data in the\ntopic was processed.\nIf you don't want your streaming query to fail on such cases, set the "
    "source option failOnDataLoss to false.\nReason: Could not read records in offset [3, 4) for topic partition "
    "t-f757189802-0\nCaused by: org.apache.kafka.clients.consumer.OffsetOutOfRangeException: Fetch position "
    "FetchPosition{offset=3, offsetEpoch=Optional.empty} is out of range for partition t-f757189802-0\n SQLSTATE: 39000\n"
)
AUTHENTICATION = (
    "org.apache.spark.SparkException: Job aborted due to stage failure\n"
    "Caused by: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism PLAIN\n"
)
AUTHORIZATION = "Caused by: org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: [orders]\n"
LEADER = (
    "Caused by: org.apache.kafka.common.errors.LeaderNotAvailableException: There is no leader for this "
    "topic-partition as we are in the middle of a leadership election.\n"
)
UNRESOLVABLE = (
    "Caused by: org.apache.kafka.common.KafkaException: Failed to create new KafkaAdminClient\n"
    "Caused by: org.apache.kafka.common.config.ConfigException: No resolvable bootstrap urls given in bootstrap.servers\n"
)
REQUEST_TIMEOUT = (
    "Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before the position "
    "for partition orders-0 could be determined\n"
)


@pytest.mark.parametrize(
    "text,code,fatal,advice",
    [
        (UNKNOWN_TOPIC, codes.KAFKA_UNKNOWN_TOPIC, True, "create it"),
        (UNREACHABLE, codes.KAFKA_UNREACHABLE, False, "check the servers"),
        (DATA_LOSS, codes.KAFKA_DATA_LOSS, True, "fail-on-data-loss: false"),
        (AUTHENTICATION, codes.KAFKA_AUTHENTICATION, True, "sasl-username / sasl-password"),
        (AUTHORIZATION, codes.KAFKA_AUTHORIZATION, True, "grant it ACLs"),
        (UNRESOLVABLE, codes.KAFKA_UNREACHABLE, False, "host names"),
        (LEADER, codes.KAFKA_NOT_READY, False, "no leader"),
        (REQUEST_TIMEOUT, codes.KAFKA_TIMEOUT, False, "request.timeout.ms"),
    ],
    ids=["unknown-topic", "unreachable", "data-loss", "authentication", "authorization", "unresolvable", "leader",
         "request-timeout"],
)
def test_kafka_failures_are_classified_by_their_cause(text, code, fatal, advice):
    verdict = classify(text)
    assert (verdict.code, verdict.fatal, verdict.rule) == (code, fatal, "kafka")
    assert advice in verdict.advice


def test_the_job_reports_what_to_do_in_its_error_message():
    error = structured_error_from_exception(RuntimeError(UNKNOWN_TOPIC), stage="runner")
    assert error.code == codes.KAFKA_UNKNOWN_TOPIC and error.fatal
    assert error.message.startswith("the Kafka topic does not exist")
    assert "UnknownTopicOrPartitionException" in error.message


def test_a_non_kafka_timeout_is_not_read_as_kafka():
    verdict = classify("java.net.SocketTimeoutException: Read timed out")
    assert verdict.rule != "kafka" and verdict.code == codes.TIMEOUT
