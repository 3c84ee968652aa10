"""Kafka's Java admin client in the driver's JVM: end and earliest offsets, topic ids, a topic's size limit.

The runner asks a topic's end offsets before each batch a Kafka destination writes (its intent), and its sources'
topic ids at every batch; Spark's Kafka connector already puts Kafka's client on the class path, so the driver's
JVM answers those without another client library in Python.

Touches: PySpark's ``SparkContext._jvm``; Kafka's public ``Admin`` API (``Admin.create``, ``listOffsets``,
``describeTopics``, ``listTopics``, ``describeConfigs``, ``OffsetSpec``, ``TopicPartition``, ``ConfigResource``),
through Py4J. On a spark-sql-kafka upgrade (it brings its kafka-clients) check that those calls keep their
signatures (``describeTopics(...).allTopicNames()`` / ``topicNameValues()``, ``TopicDescription.topicId()``).
Pinned by tests/spark/test_jvm_contracts.py (``test_kafka_admin_...``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from airflow_conduit.spark.jvm.refs import jvm_ref


def create_admin(spark, properties: dict[str, str]):
    """Kafka's Java ``Admin`` client with ``properties`` (Kafka's own keys), its classes made loadable from
    ``spark.jars`` when needed. The caller closes it."""
    from airflow_conduit.spark.jvm.session import ensure_loadable

    ensure_loadable(spark, "org.apache.kafka.clients.admin.Admin",
                    lambda: [jar for jar in (spark.conf.get("spark.jars", "") or "").split(",") if jar])
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.Properties()
    for key, value in properties.items():
        props.setProperty(key, value)
    return jvm.org.apache.kafka.clients.admin.Admin.create(props)


def _client_properties(options: dict[str, str]) -> dict[str, str]:
    """Spark's Kafka options (``kafka.<key>``) as the Java client's properties."""
    return {key.removeprefix("kafka."): value for key, value in options.items()}


class KafkaAdmin:
    """Kafka's Java admin client in the driver (made loadable from ``spark.jars`` when needed), created at its first
    use and kept for the run (each batch asks for the topic's end offsets): ``close`` ends it."""

    def __init__(self, spark, options: dict[str, str], timeout_seconds: int):
        self.spark = spark
        self.options = options
        self.timeout_seconds = timeout_seconds
        self._admin = None
        self._requests: dict[str, Any] = {}  # topic -> (its partitions' offset request, TopicPartition -> partition)

    def client(self):
        if self._admin is None:
            self._admin = create_admin(self.spark, _client_properties(self.options))
        return self._admin

    def close(self) -> None:
        admin, self._admin = self._admin, None
        self._requests.clear()
        if admin is not None:
            with contextlib.suppress(Exception):  # the JVM may be gone (a lost driver): nothing left to release
                admin.close()

    @property
    def _seconds(self):
        return jvm_ref(self.spark, "TimeUnit.SECONDS", lambda jvm: jvm.java.util.concurrent.TimeUnit.SECONDS)

    def end_offsets(self, topic: str, *, partitions_now: bool = False) -> dict[int, int]:
        """Each partition's end offset (the next record's offset). The topic's partitions are listed once per run
        (``partitions_now``: listed again): a partition added since is missing from the answer, which every reader
        of the offsets takes as "from its start"."""
        try:
            if partitions_now or topic not in self._requests:
                self._requests[topic] = self._offset_request(topic)
            request, partitions = self._requests[topic]
            found = self.client().listOffsets(request).all().get(self.timeout_seconds, self._seconds)
            return {partition: int(found.get(tp).offset()) for tp, partition in partitions}
        except BaseException:
            self.close()  # a failed client is not reused: the retry (or the restart) makes a new one
            raise

    def _offset_request(self, topic: str):
        jvm = self.spark.sparkContext._jvm
        names = jvm.java.util.ArrayList()
        names.add(topic)
        description = self.client().describeTopics(names).allTopicNames().get(self.timeout_seconds, self._seconds).get(topic)
        request = jvm.java.util.HashMap()
        latest = jvm.org.apache.kafka.clients.admin.OffsetSpec.latest()
        partitions = []
        for info in description.partitions():
            partition = int(info.partition())
            tp = jvm.org.apache.kafka.common.TopicPartition(topic, partition)
            request.put(tp, latest)
            partitions.append((tp, partition))
        return request, partitions

    def max_message_bytes(self, topic: str) -> int:
        """The topic's ``max.message.bytes`` (its own, or the broker's default it inherits)."""
        jvm = self.spark.sparkContext._jvm
        kind = getattr(jvm.org.apache.kafka.common.config, "ConfigResource$Type").TOPIC
        resource = jvm.org.apache.kafka.common.config.ConfigResource(kind, topic)
        resources = jvm.java.util.ArrayList()
        resources.add(resource)
        config = self.client().describeConfigs(resources).all().get(self.timeout_seconds, self._seconds).get(resource)
        return int(config.get("max.message.bytes").value())


def topic_ids(spark, admin, *, names: list[str] | None, pattern: str | None, timeout_ms: int, wait_ms: int,
              unknown_topic: Callable[[BaseException], bool]) -> dict[str, str | None]:
    """Each topic's id now (None: it does not exist, as ``unknown_topic`` tells from the error): the topics ``names``,
    or those whose name matches ``pattern`` (Java's regular expressions, the whole name). ``timeout_ms``: the
    requests' own timeout; ``wait_ms``: the longest wait for their answers."""
    jvm = spark.sparkContext._jvm
    ms = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    if pattern is not None:
        options = jvm.org.apache.kafka.clients.admin.ListTopicsOptions().timeoutMs(timeout_ms)
        found = admin.listTopics(options).names().get(wait_ms, ms)
        regex = jvm.java.util.regex.Pattern.compile(pattern)
        names = sorted(str(n) for n in found if regex.matcher(n).matches())
    if not names:
        return {}
    java_names = jvm.java.util.ArrayList()
    for name in names:
        java_names.add(name)
    options = jvm.org.apache.kafka.clients.admin.DescribeTopicsOptions().timeoutMs(timeout_ms)
    futures = admin.describeTopics(java_names, options).topicNameValues()
    ids: dict[str, str | None] = {}
    for name in names:
        try:
            ids[name] = str(futures.get(name).get(wait_ms, ms).topicId().toString())
        except Exception as exc:  # noqa: BLE001 - an unknown topic is an answer; anything else is raised
            if not unknown_topic(exc):
                raise
            ids[name] = None
    return ids


def earliest_offsets(spark, admin, topic: str, wait_ms: int) -> dict[int, int]:
    """Each partition's earliest offset of ``topic`` now; ``wait_ms``: the longest wait for each answer."""
    jvm = spark.sparkContext._jvm
    ms = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    names = jvm.java.util.ArrayList()
    names.add(topic)
    description = admin.describeTopics(names).allTopicNames().get(wait_ms, ms).get(topic)
    request = jvm.java.util.HashMap()
    earliest = jvm.org.apache.kafka.clients.admin.OffsetSpec.earliest()
    partitions = []
    for info in description.partitions():
        tp = jvm.org.apache.kafka.common.TopicPartition(topic, int(info.partition()))
        request.put(tp, earliest)
        partitions.append((tp, int(info.partition())))
    found = admin.listOffsets(request).all().get(wait_ms, ms)
    return {partition: int(found.get(tp).offset()) for tp, partition in partitions}
