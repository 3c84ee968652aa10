"""Settings every test layer shares."""

import os

# Spark binds to loopback on these machines (no resolvable external interface needed).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every Spark JVM the tests start (in-process sessions, spark-submit drivers, SDP runs, the Airflow processes'
# runs: spark-class hands SPARK_SUBMIT_OPTS to each) compiles with HotSpot's first tier only and collects with the
# serial collector. A test's JVM lives seconds on a few records: the second tier's compiling took about half of its
# CPU on two cores, and G1's concurrent threads buy nothing on a heap that small. Behaviour is the same; only the
# benchmarks (bench/, which does not load this file) measure the product's speed.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


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


# The longest test files of each layer (pytest --durations on the 2-core machine), longest first. Under xdist
# (`make test`: a file to a worker) they are handed out first, so that no worker is left alone with a long file
# at the end of a layer while the other is done; the other files follow in their usual order. A file missing
# here only runs later; a name here that no longer exists is ignored.
LONGEST_FIRST = (
    "spark/test_delta.py",
    "spark/test_sdp_replay.py",
    "spark/test_sdp_quarantine.py",
    "spark/test_kafka_delta.py",
    "spark/test_half_committed.py",
    "spark/test_jobs_per_batch.py",
    "spark/test_replay.py",
    "spark/test_kafka_sigkill.py",
    "spark/test_class_archive.py",
    "spark/test_entrypoint.py",
    "spark/test_kafka_topic_identity.py",
    "integration/test_ordinary_changes.py",
    "integration/test_ui_plugin.py",
    "integration/test_ui_actions.py",
    "integration/test_kafka_cli.py",
    "integration/test_sdp_operator.py",
    "integration/test_one_writer.py",
    "integration/test_cli_run.py",
    "integration/test_standalone.py",
    "integration/test_replay_operator.py",
    "integration/test_lineage.py",
    "integration/test_kafka_delta_dag.py",
    "integration/test_reference_dags.py",
)


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    tests_dir = os.path.dirname(os.path.abspath(__file__))

    def module_rank(item) -> int:
        return rank.get(os.path.relpath(str(item.path), tests_dir), len(rank))

    items.sort(key=module_rank)  # stable: each file's own order kept
