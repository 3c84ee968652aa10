"""A local single-node Kafka broker (KRaft: broker and controller in one process) for the examples and the tests.

It runs the broker jars ``make install`` puts in ``jars/broker/lib`` (Kafka's own distribution, not Spark's
client), on loopback, with a small heap and its own data folder. ``auto.create.topics.enable`` is off: topics are
created explicitly, as on a production cluster. The commands, from the repository root::

    python examples/local_kafka.py up                      # start it in the background (make kafka-up)
    python examples/local_kafka.py create-topic orders --partitions 2
    python examples/local_kafka.py produce orders examples/kafka_delta/sample/orders.jsonl   # one record a line
    python examples/local_kafka.py read orders-dlq         # print a topic's records (value and error headers)
    python examples/local_kafka.py down                    # stop it and delete its data (make kafka-down)

The broker listens on ``localhost:$KAFKA_PORT`` (9092 by default) and keeps its data and log in
``$KAFKA_LOCAL_DIR`` (``.kafka-local`` under the repository root by default). ``up`` and ``down`` need only Python
and Java; the topic commands use the confluent-kafka client that ``make install`` installs. The tests start their
brokers with ``KafkaBroker`` (tests/kafka_broker.py) on free ports.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROKER_LIB = ROOT / "jars" / "broker" / "lib"
READY_LINE = "Kafka Server started"
START_DEADLINE_SECONDS = 180.0
HEAP = "-Xms128m -Xmx512m"
DEFAULT_PORT = 9092
CLIENT_LOG_LEVEL = 3  # librdkafka's syslog levels: errors only (its retries while a new broker settles are noise)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
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
        return admin_client(self.bootstrap)

    def create_topic(self, name: str | None = None, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        """Create a topic (a fresh unique name by default) and wait until it exists."""
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        create_topic(self.bootstrap, name, partitions, config)
        return name

    def produce(self, topic: str, values, *, keys=None, headers=None, partition: int | None = None) -> None:
        """Produce ``values`` (bytes or str) in order and wait until every one is acknowledged."""
        produce(self.bootstrap, topic, values, keys=keys, headers=headers, partition=partition)

    def read_all(self, topic: str, timeout_seconds: float = 120.0) -> list:
        """Every message of ``topic`` from the start to the end offsets at call time (confluent Message objects)."""
        return read_all(self.bootstrap, topic, timeout_seconds)


@contextlib.contextmanager
def kafka_broker(broker_class: type[KafkaBroker] | None = None, **extra_properties: str) -> Iterator[KafkaBroker]:
    """A formatted, started broker (``broker_class``, e.g. one with other ports) in a temp folder; stopped (and the
    folder removed) at the end."""
    workdir = Path(tempfile.mkdtemp(prefix="conduit-kafka-"))
    broker = (broker_class or KafkaBroker)(workdir=workdir, extra_properties=dict(extra_properties))
    try:
        broker.format()
        broker.start()
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# -- clients of any broker (confluent-kafka, independent of Spark's) ---------------------------------------------


def admin_client(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": CLIENT_LOG_LEVEL})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)  # kept referenced until the future resolves: a collected client cancels it
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])
    futures[name].result(timeout=120)


def produce(bootstrap: str, topic: str, values, *, keys=None, headers=None, partition: int | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "log_level": CLIENT_LOG_LEVEL})
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


def read_all(bootstrap: str, topic: str, timeout_seconds: float = 120.0) -> list:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "log_level": CLIENT_LOG_LEVEL,
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


# -- the command line: one background broker for the examples ---------------------------------------------------


def local_dir() -> Path:
    return Path(os.environ.get("KAFKA_LOCAL_DIR") or ROOT / ".kafka-local").resolve()


def local_port() -> int:
    return int(os.environ.get("KAFKA_PORT") or DEFAULT_PORT)


def local_bootstrap() -> str:
    return f"localhost:{local_port()}"


def _running_pid(folder: Path) -> int | None:
    try:
        pid = int((folder / "broker.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def up() -> int:
    folder = local_dir()
    if _running_pid(folder) is not None:
        print(f"the local Kafka broker already runs at {local_bootstrap()} (data in {folder})")
        return 0
    if not installed():
        print(f"the Kafka broker's jars are missing from {BROKER_LIB}: run `make install` first", file=sys.stderr)
        return 1
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", local_port())) == 0:
            print(f"port {local_port()} is in use by another program: stop it, or choose another port with "
                  f"KAFKA_PORT=<port>", file=sys.stderr)
            return 1
    shutil.rmtree(folder, ignore_errors=True)
    broker = KafkaBroker(workdir=folder, port=local_port())
    broker.format()
    try:
        broker.start()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    (folder / "broker.pid").write_text(str(broker.process.pid))
    print(f"a local Kafka broker runs at {local_bootstrap()} (data and broker.log in {folder}); "
          f"stop it with `make kafka-down`")
    return 0


def down() -> int:
    folder = local_dir()
    pid = _running_pid(folder)
    if pid is not None:
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while _running_pid(folder) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if _running_pid(folder) is not None:
            os.killpg(pid, signal.SIGKILL)
        print(f"the local Kafka broker at {local_bootstrap()} is stopped; its data is deleted")
    else:
        print("no local Kafka broker runs")
    shutil.rmtree(folder, ignore_errors=True)
    return 0


def _print_records(bootstrap: str, topic: str) -> None:
    for message in read_all(bootstrap, topic):
        headers = {k: (v or b"").decode(errors="replace") for k, v in (message.headers() or [])}
        value = (message.value() or b"").decode(errors="replace")
        reason = headers.get("__connect.errors.exception.message")
        print(f"{message.partition()}/{message.offset()} {value}" + (f"\n    error: {reason}" if reason else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="examples/local_kafka.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start the local broker in the background")
    commands.add_parser("down", help="stop the local broker and delete its data")
    create = commands.add_parser("create-topic", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1)
    send = commands.add_parser("produce", help="produce each line of a file as one record's value")
    send.add_argument("topic")
    send.add_argument("file", type=Path)
    show = commands.add_parser("read", help="print every record of a topic")
    show.add_argument("topic")
    for sub in (create, send, show):
        sub.add_argument("--servers", default=None, help="bootstrap servers (default: the local broker's)")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up()
    if args.command == "down":
        return down()
    servers = args.servers or local_bootstrap()
    try:
        if args.command == "create-topic":
            create_topic(servers, args.topic, args.partitions)
            print(f"topic {args.topic} created ({args.partitions} partition(s)) at {servers}")
        elif args.command == "produce":
            lines = args.file.read_bytes().splitlines()  # one record a line, as the file holds it
            produce(servers, args.topic, lines)
            print(f"{len(lines)} record(s) produced to {args.topic} at {servers}")
        else:
            _print_records(servers, args.topic)
    except Exception as exc:  # noqa: BLE001 - a command line: the reason, no traceback
        print(f"{args.command} {args.topic}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
