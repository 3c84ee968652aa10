"""A real single-node Kafka broker (KRaft, combined broker + controller) for tests and benchmarks.

Started from the jars ``make install`` puts in ``jars/broker/lib`` (never Spark's: Spark 4.2's Kafka client
is 3.9.x, the broker 4.x), on loopback, free ports, a small heap, its own log folder; stopped at the end.
``auto.create.topics.enable`` is off, so a test creates its topics and an unknown topic is an error, as
on a production cluster. The clients here are confluent-kafka's (librdkafka), independent of Spark's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from postgres_server import free_port

ROOT = Path(__file__).resolve().parents[1]
BROKER_LIB = ROOT / "jars" / "broker" / "lib"
READY_LINE = "Kafka Server started"
START_DEADLINE_SECONDS = 180.0
HEAP = "-Xms128m -Xmx512m"


def installed() -> bool:
    return any(BROKER_LIB.glob("kafka_2.13-*.jar"))


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java") or "java"


@dataclass
class KafkaBroker:
    """One broker process. ``bootstrap`` is ``127.0.0.1:<port>``; ``stop``/``start`` keep its data (an outage)."""

    workdir: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    cluster_id: str = field(default_factory=lambda: uuid.uuid4().hex[:22])
    process: subprocess.Popen | None = None
    extra_properties: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    def _properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.extra_properties,
        }
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        return [_java(), *HEAP.split(), "-cp", f"{BROKER_LIB}/*", main_class, *args]

    def format(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.properties"
        config.write_text(self._properties())
        subprocess.run(
            self._java_command("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config)),
            check=True, capture_output=True, timeout=START_DEADLINE_SECONDS,
        )

    def start(self, deadline_seconds: float = START_DEADLINE_SECONDS) -> None:
        """Start the process and wait until it logs that it started (or fail with the log's tail)."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self._java_command("kafka.Kafka", str(self.workdir / "server.properties")),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + deadline_seconds
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as handle:
                handle.seek(offset)
                if READY_LINE.encode() in handle.read():
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.5)
        tail = self.log_path.read_text(errors="replace")[-4000:]
        self.stop()
        raise RuntimeError(f"the Kafka broker did not start (exit {self.process and self.process.returncode}):\n{tail}")

    def stop(self, *, kill: bool = False) -> None:
        """Stop the broker (SIGTERM, a controlled shutdown; SIGKILL with ``kill`` or after a minute)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)

    # -- clients (confluent-kafka) -----------------------------------------------------------------

    def admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str | None = None, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        """Create a topic (a fresh unique name by default) and wait until it exists."""
        from confluent_kafka.admin import NewTopic

        name = name or f"t-{uuid.uuid4().hex[:10]}"
        admin = self.admin()  # kept referenced until the future resolves: a collected client cancels it
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=120)
        return name

    def produce(self, topic: str, values, *, keys=None, headers=None, partition: int | None = None) -> None:
        """Produce ``values`` (bytes or str) in order and wait until every one is acknowledged."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        errors: list = []
        for index, value in enumerate(values):
            kwargs = {}
            if partition is not None:
                kwargs["partition"] = partition
            producer.produce(
                topic, value=value, key=None if keys is None else keys[index],
                headers=None if headers is None else headers[index],
                on_delivery=lambda err, _msg: err and errors.append(err), **kwargs,
            )
            producer.poll(0)
        remaining = producer.flush(120)
        if remaining or errors:
            raise RuntimeError(f"produce to {topic}: {remaining} not delivered, errors {errors[:3]}")

    def read_all(self, topic: str, timeout_seconds: float = 120.0) -> list:
        """Every message of ``topic`` from the start to the end offsets at call time (confluent Message objects)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        })
        try:
            metadata = consumer.list_topics(topic, timeout=60).topics[topic]
            ends = {}
            for partition in metadata.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=60)
                ends[partition] = (low, high)
            consumer.assign([TopicPartition(topic, p, low) for p, (low, _high) in ends.items()])
            want = sum(high - low for low, high in ends.values())
            messages: list = []
            deadline = time.monotonic() + timeout_seconds
            while len(messages) < want and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None or message.error():
                    continue
                if message.offset() < ends[message.partition()][1]:
                    messages.append(message)
            if len(messages) < want:
                raise RuntimeError(f"read {len(messages)} of {want} messages of {topic}")
            return sorted(messages, key=lambda m: (m.partition(), m.offset()))
        finally:
            consumer.close()


@contextlib.contextmanager
def kafka_broker(**extra_properties: str) -> Iterator[KafkaBroker]:
    """A formatted, started broker in a temp folder; stopped (and the folder removed) at the end."""
    workdir = Path(tempfile.mkdtemp(prefix="conduit-kafka-"))
    broker = KafkaBroker(workdir=workdir, extra_properties=dict(extra_properties))
    try:
        broker.format()
        broker.start()
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
