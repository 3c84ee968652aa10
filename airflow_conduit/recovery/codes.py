"""Error codes shared by the Spark job (which writes them) and the recovery engine (which reads them).

Ranges work like HTTP status classes (Conduit design doc, phase 2): the range
alone tells whether an error is transient (restart with backoff) or fatal
(degrade at once), so an engine that does not know a specific code still
classifies it correctly. docs/error-codes.md documents every code.
"""

from __future__ import annotations

# 1000-1999: transient, the pipeline is restarted with backoff.
TRANSIENT = 1000  # transient, no more detail
CONNECTION = 1100  # network / connection refused / SQLSTATE 08xxx
KAFKA_UNREACHABLE = 1110  # no Kafka broker answers (wrong address, brokers down, network)
TIMEOUT = 1200  # timeouts
KAFKA_TIMEOUT = 1210  # a Kafka request timed out (a broker is slow or overloaded)
BATCH_DEADLINE = 1220  # a micro-batch (or a wait on Spark inside it) outlasted pipeline.batch-deadline
RESOURCE_UNAVAILABLE = 1300  # throttled, out of resources, service unavailable
KAFKA_NOT_READY = 1310  # a Kafka partition has no leader yet / too few in-sync replicas / a coordinator is loading
KAFKA_TOPIC_CHANGED = 1320  # a source topic was recreated while the run read it; the restart reads it from its start
INFRASTRUCTURE = 1400  # executor lost, driver lost, JVM crash: the platform, not the data
KILLED_BY_SIGNAL = 1410  # a process of the run died by a signal: the driver's JVM, the Python driver or the driver wrapper
INJECTED_TRANSIENT = 1500  # fault injected on purpose (tests, demo)

# 2000-2999: fatal, the pipeline is degraded without restart.
FATAL = 2000  # fatal, no more detail
INVALID_SPEC = 2100  # the pipeline spec or configuration is wrong
SPEC_CHANGED_MID_BATCH = 2150  # a half-committed batch would be finished under a spec other than the one it started with
PROCESSOR = 2200  # a processor failed (fatal by default, Conduit recovery doc)
DLQ_NACK_THRESHOLD = 2300  # window-nack-threshold exceeded (fatal by default, Conduit recovery doc)
DLQ_WRITE = 2310  # a DLQ refuses a record for good (a Kafka DLQ record over the topic's size limit)
ANALYSIS = 2400  # Spark analysis / schema errors, SQLSTATE 42xxx
KAFKA_UNKNOWN_TOPIC = 2410  # a Kafka topic does not exist (and the brokers do not create topics on use)
PERMISSION = 2500  # authentication / authorization, SQLSTATE 28xxx
KAFKA_AUTHENTICATION = 2510  # the Kafka brokers refused the client's credentials (SASL / SSL)
KAFKA_AUTHORIZATION = 2520  # the Kafka principal lacks an ACL (topic, group, cluster)
DATA_INTEGRITY = 2600  # constraint violations on a destination, SQLSTATE 23xxx
KAFKA_DATA_LOSS = 2610  # Kafka records the checkpoint expects are gone (retention, deleted records or topic), fail-on-data-loss
KAFKA_TOPIC_RECREATED = 2620  # a source topic was deleted and created again: the checkpoint's offsets are the old topic's
CHECKPOINT_MOVED = 2630  # the checkpoint names input paths that are not the spec's (the pipeline's folder was moved)
NO_SPACE_LEFT = 2640  # a file system the run writes to (the state dir, an output) is full
OUTPUT_OWNED_ELSEWHERE = 2650  # a destination or DLQ path holds another pipeline's output (or data no pipeline of ours wrote)
SPARK_STARTUP = 2700  # Spark itself could not start (JavaSparkContext failed) and nothing says a retry could help
OUT_OF_MEMORY = 2800  # a JVM (or the Python driver) ran out of memory: the same input would do it again
INJECTED_FATAL = 2900  # fault injected on purpose (tests, demo)

TRANSIENT_RANGE = range(1000, 2000)
FATAL_RANGE = range(2000, 3000)


def is_fatal_code(code: int) -> bool | None:
    """True for a fatal code, False for a transient one, None when the code is outside both ranges."""
    if code in FATAL_RANGE:
        return True
    if code in TRANSIENT_RANGE:
        return False
    return None


# Process exit codes of the Spark job (sysexits.h where one fits).
EXIT_OK = 0
EXIT_FATAL = 70  # EX_SOFTWARE: do not restart
EXIT_TRANSIENT = 75  # EX_TEMPFAIL: restart with backoff
EXIT_INVALID_SPEC = 78  # EX_CONFIG: the spec was refused before Spark started (fatal)
SPARK_EXIT_OOM = 52  # Spark's own exit code of a JVM ended by an OutOfMemoryError (SparkExitCode.OOM)

# Marker line the Spark job prints on stderr before exiting with an error, followed by the JSON error.
ERROR_LINE_PREFIX = "AIRFLOW_CONDUIT_ERROR "
