"""A real single-node Kafka broker (KRaft, combined broker + controller) for tests and benchmarks.

The broker is the examples' (``examples/local_kafka.py``, which ``make kafka-up`` runs for users): the jars
``make install`` puts in ``jars/broker/lib`` (never Spark's: Spark 4.2's Kafka client is 3.9.x, the broker
4.x), on loopback, free ports, a small heap, its own log folder; stopped at the end. ``auto.create.topics.enable``
is off, so a test creates its topics and an unknown topic is an error, as on a production cluster. The clients
there are confluent-kafka's (librdkafka), independent of Spark's. Its ports are the test process's own
(tests/ports.py), so that two xdist workers' brokers never ask for the same one.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port

_EXAMPLES = str(Path(__file__).resolve().parents[1] / "examples")
if _EXAMPLES not in sys.path:
    sys.path.append(_EXAMPLES)

from local_kafka import (  # noqa: E402 - the examples' folder is not a package
    BROKER_LIB,
    HEAP,
    READY_LINE,
    START_DEADLINE_SECONDS,
    installed,
)
from local_kafka import kafka_broker as _example_kafka_broker  # noqa: E402
from local_kafka import KafkaBroker as _ExampleBroker  # noqa: E402


@dataclass
class KafkaBroker(_ExampleBroker):
    """The examples' broker on ports of this test process's own block (tests/ports.py)."""

    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)


def kafka_broker(**extra_properties: str) -> contextlib.AbstractContextManager[KafkaBroker]:
    """The examples' broker context on this test process's ports."""
    return _example_kafka_broker(KafkaBroker, **extra_properties)


__all__ = ["BROKER_LIB", "HEAP", "READY_LINE", "START_DEADLINE_SECONDS", "KafkaBroker", "installed", "kafka_broker"]
