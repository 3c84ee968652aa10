"""Settings every test layer shares."""

import os

# Spark binds to loopback on these machines (no resolvable external interface needed).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


import pytest  # noqa: E402

# CONDUIT_JVM_CENSUS=<file>: count the JVMs each test starts (tests/jvm_census.py); off by default.
from jvm_census import pytest_configure, pytest_runtest_logstart, pytest_unconfigure  # noqa: E402, F401


@pytest.fixture(scope="session")
def kafka():
    """A real single-node Kafka broker (tests/kafka_broker.py) for the whole test session; a test makes its own topics."""
    import kafka_broker

    if not kafka_broker.installed():
        pytest.fail("the Kafka broker's jars are missing from jars/broker/lib: run `make install`")
    with kafka_broker.kafka_broker() as broker:
        yield broker
