"""Fatal or transient? The classifier behind every recovery decision.

Rules are tried in this order; the first that gives an answer wins:

1. user rules (``error-rules`` option), in the order written;
2. ``FatalError`` / ``TransientError`` raised by user code, anywhere in the cause chain (outermost wins);
3. the structured error's code (``AIRFLOW_CONDUIT_ERROR {json}``, run report, dict): 1xxx transient, 2xxx fatal;
4. the Spark job's exit code (70 fatal, 75 transient, 78 invalid spec, killed by a signal: 1410);
4b. Kafka's own failures, by the Kafka client's exception classes and Spark's Kafka messages (``KAFKA_FAILURES``),
    with what the user can do;
5. Spark error conditions (``[UNRESOLVED_COLUMN.WITH_SUGGESTION]``);
6. SQLSTATE classes (42 analysis: fatal, 08 connection: transient, ...);
7. exception classes in the chain, and Java class names in the text;
8. the stage that failed (a processor: fatal, Conduit recovery doc);
9. message patterns ("connection refused", "permission denied", ...);
10. Spark failed to start (JavaSparkContext, or spark-submit itself) and nothing above found a passing cause: fatal;
11. otherwise transient (design doc: by default all errors are transient).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import ErrorKind, StructuredError
from airflow_conduit.recovery.facts import ErrorFacts, gather_facts
from airflow_conduit.recovery.java_errors import is_spark_start_failure
from airflow_conduit.recovery.kills import signal_label, signal_of_exit_code
from airflow_conduit.recovery.rules import ClassificationRule, parse_rules


@dataclass(frozen=True)
class Classification:
    """The verdict: ``fatal`` (degrade) or not (restart), the error code, and which rule decided and why."""

    code: int
    fatal: bool
    reason: str  # "<rule>: <why>", for humans and the audit log
    rule: str  # machine name of the deciding rule: user-rule, marker, code, exit-code, condition, sqlstate, class, stage, message, default
    message: str = ""  # one-line summary of the error
    advice: str | None = None  # what the user can do (Kafka failures)
    exception_class: str | None = None
    error_condition: str | None = None
    sqlstate: str | None = None
    stage: str | None = None

    @property
    def transient(self) -> bool:
        return not self.fatal

    @property
    def kind(self) -> ErrorKind:
        return ErrorKind.of(self.fatal)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Classification":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})


# --- built-in tables ---------------------------------------------------------------------------------

# Spark error conditions (top level; "A" also matches "A.SUB"). Checked before SQLSTATE because a
# condition is more specific: CONCURRENT_QUERY has SQLSTATE 0A000 (not supported) but is passing.
SPARK_CONDITIONS: dict[str, int] = {
    "UNRESOLVED_COLUMN": codes.ANALYSIS,
    "UNRESOLVED_FIELD": codes.ANALYSIS,
    "UNRESOLVED_ROUTINE": codes.ANALYSIS,
    "TABLE_OR_VIEW_NOT_FOUND": codes.ANALYSIS,
    "SCHEMA_NOT_FOUND": codes.ANALYSIS,
    "PATH_NOT_FOUND": codes.ANALYSIS,
    "DATATYPE_MISMATCH": codes.ANALYSIS,
    "PARSE_SYNTAX_ERROR": codes.ANALYSIS,
    "AMBIGUOUS_REFERENCE": codes.ANALYSIS,
    "INCOMPATIBLE_DATA_FOR_TABLE": codes.ANALYSIS,
    "CAST_INVALID_INPUT": codes.FATAL,
    "DIVIDE_BY_ZERO": codes.FATAL,
    "ARITHMETIC_OVERFLOW": codes.FATAL,
    "MALFORMED_RECORD_IN_PARSING": codes.FATAL,  # FAILFAST on a bad record: the same record fails again
    "CANNOT_MODIFY_CONFIG": codes.INVALID_SPEC,  # SQLSTATE 46110: a config the session refuses to change
    "CANNOT_MODIFY_STATIC_CONFIG": codes.INVALID_SPEC,
    "CONCURRENT_QUERY": codes.RESOURCE_UNAVAILABLE,  # the previous driver still holds the checkpoint
    "CONCURRENT_STREAM_LOG_UPDATE": codes.RESOURCE_UNAVAILABLE,
    "UNABLE_TO_ACQUIRE_MEMORY": codes.RESOURCE_UNAVAILABLE,
}

# SQLSTATE classes (first two characters; "HYT" for ODBC timeouts).
SQLSTATE_CLASSES: dict[str, tuple[int, str]] = {
    "08": (codes.CONNECTION, "connection exception"),
    "HYT": (codes.TIMEOUT, "timeout expired"),
    "40": (codes.TRANSIENT, "transaction rollback (serialization failure, deadlock)"),
    "53": (codes.RESOURCE_UNAVAILABLE, "insufficient resources"),
    "57": (codes.TRANSIENT, "operator intervention (shutdown, cancel)"),
    "42": (codes.ANALYSIS, "syntax error or access rule violation (analysis)"),
    "28": (codes.PERMISSION, "invalid authorization specification"),
    "23": (codes.DATA_INTEGRITY, "integrity constraint violation"),
    "22": (codes.FATAL, "data exception"),
    "0A": (codes.FATAL, "feature not supported"),
    "3D": (codes.ANALYSIS, "invalid catalog name"),
    "3F": (codes.ANALYSIS, "invalid schema name"),
    "46": (codes.INVALID_SPEC, "configuration refused (46110: a Spark config that cannot be modified)"),
}

# Exception classes. A name without a dot matches that short name in any package
# ("AnalysisException" matches pyspark's and org.apache.spark.sql's).
EXCEPTION_CLASSES: dict[str, int] = {
    # transient
    "ConnectionError": codes.CONNECTION,  # Python: refused, reset, aborted, broken pipe
    "TimeoutError": codes.TIMEOUT,
    "java.net.ConnectException": codes.CONNECTION,
    "java.net.NoRouteToHostException": codes.CONNECTION,
    "java.net.UnknownHostException": codes.CONNECTION,
    "java.net.SocketException": codes.CONNECTION,
    "java.sql.SQLTransientConnectionException": codes.CONNECTION,
    "psycopg2.OperationalError": codes.CONNECTION,
    "psycopg2.InterfaceError": codes.CONNECTION,
    "java.net.SocketTimeoutException": codes.TIMEOUT,
    "java.util.concurrent.TimeoutException": codes.TIMEOUT,
    "java.sql.SQLTimeoutException": codes.TIMEOUT,
    "org.apache.spark.rpc.RpcTimeoutException": codes.TIMEOUT,
    "java.sql.SQLTransientException": codes.TRANSIENT,
    "java.sql.SQLRecoverableException": codes.TRANSIENT,
    "org.apache.spark.shuffle.FetchFailedException": codes.INFRASTRUCTURE,
    "org.apache.spark.ExecutorDeadException": codes.INFRASTRUCTURE,
    "py4j.protocol.Py4JNetworkError": codes.INFRASTRUCTURE,
    # fatal
    "java.lang.OutOfMemoryError": codes.OUT_OF_MEMORY,  # the same input runs out of memory again: no endless restarts
    "MemoryError": codes.OUT_OF_MEMORY,
    "AnalysisException": codes.ANALYSIS,
    "ParseException": codes.ANALYSIS,
    "java.sql.SQLSyntaxErrorException": codes.ANALYSIS,
    "psycopg2.ProgrammingError": codes.ANALYSIS,
    "java.sql.SQLIntegrityConstraintViolationException": codes.DATA_INTEGRITY,
    "psycopg2.IntegrityError": codes.DATA_INTEGRITY,
    "psycopg2.DataError": codes.FATAL,
    "java.sql.SQLInvalidAuthorizationSpecException": codes.PERMISSION,
    "PermissionError": codes.PERMISSION,
    "java.nio.file.AccessDeniedException": codes.PERMISSION,
    "java.lang.SecurityException": codes.PERMISSION,
    "org.apache.hadoop.security.AccessControlException": codes.PERMISSION,
    "java.lang.ClassNotFoundException": codes.FATAL,  # a missing jar: retrying does not add it
    "java.lang.NoClassDefFoundError": codes.FATAL,
    "java.lang.NoSuchMethodError": codes.FATAL,
    "ImportError": codes.FATAL,  # broken user code or environment
    "SyntaxError": codes.FATAL,
    "NameError": codes.FATAL,
    "airflow_conduit.pipeline.problems.SpecError": codes.INVALID_SPEC,
    "airflow_conduit.pipeline.kafka_settings.KafkaClientConfigError": codes.INVALID_SPEC,
    "airflow_conduit.pipeline.yaml_source.YamlSyntaxError": codes.INVALID_SPEC,
}

# Kafka's failures, first match wins (fatal ones first: a data loss or an ACL refusal may also time out):
# (name, what matches in the class names or text (regex, case-sensitive), code, what the user can do).
_KAFKA_ERRORS = r"org\.apache\.kafka\.common\.errors\."
KAFKA_FAILURES: tuple[tuple[str, str, int, str], ...] = (
    (
        "data loss",
        r"Some data may have been lost because they are not available in Kafka|\[KAFKA_DATA_LOSS"
        r"|org\.apache\.kafka\.clients\.consumer\.OffsetOutOfRangeException",
        codes.KAFKA_DATA_LOSS,
        "Kafka no longer holds records the pipeline's checkpoint expects (aged out by retention, deleted records or a "
        "deleted topic); with fail-on-data-loss: true the pipeline stops instead of skipping them. Recover them into "
        "the topic if you can, or accept the loss: run once with the source setting fail-on-data-loss: false (the "
        "missing offsets are skipped), then set it back",
    ),
    (
        "authentication",
        _KAFKA_ERRORS + r"(?:Sasl|Ssl)?AuthenticationException|" + _KAFKA_ERRORS + r"IllegalSaslStateException"
        r"|Authentication failed during authentication due to invalid credentials",
        codes.KAFKA_AUTHENTICATION,
        "the Kafka brokers refused the client's credentials: check sasl-username / sasl-password (or the Airflow "
        "connection's extra), sasl-mechanism and security-protocol, and the truststore for SSL",
    ),
    (
        "authorization",
        _KAFKA_ERRORS + r"(?:Topic|Group|Cluster|TransactionalId)AuthorizationException",
        codes.KAFKA_AUTHORIZATION,
        "the Kafka principal is not allowed to use the topic: grant it ACLs (READ and DESCRIBE on the source's topics "
        "and consumer groups, WRITE and DESCRIBE on the topics written to)",
    ),
    (
        "unknown topic",
        _KAFKA_ERRORS + r"(?:UnknownTopicOrPartitionException|InvalidTopicException|UnknownTopicIdException)",
        codes.KAFKA_UNKNOWN_TOPIC,
        "the Kafka topic does not exist and the brokers do not create topics on use: create it (kafka-topics.sh "
        "--create) or correct the topic names in the spec",
    ),
    (
        "brokers unreachable",
        r"Timed out waiting for a node assignment|" + _KAFKA_ERRORS + r"(?:NetworkException|DisconnectException)"
        r"|Connection to node -?\d+ .* could not be established|Bootstrap broker .* disconnected"
        r"|No resolvable bootstrap urls given in bootstrap\.servers",
        codes.KAFKA_UNREACHABLE,
        "no Kafka broker answered: check the servers (bootstrap.servers: host names and ports) and that the brokers "
        "run; the pipeline is restarted with backoff",
    ),
    (
        "not ready",
        _KAFKA_ERRORS + r"(?:LeaderNotAvailableException|NotLeaderOrFollowerException|NotLeaderForPartitionException"
        r"|NotEnoughReplicas(?:AfterAppend)?Exception|CoordinatorNotAvailableException|CoordinatorLoadInProgressException"
        r"|NotCoordinatorException|BrokerNotAvailableException|KafkaStorageException|FencedLeaderEpochException)",
        codes.KAFKA_NOT_READY,
        "a Kafka partition has no leader or too few in-sync replicas yet (a broker restarting or being moved); "
        "the pipeline is restarted with backoff",
    ),
    (
        "request timeout",
        _KAFKA_ERRORS + r"TimeoutException",
        codes.KAFKA_TIMEOUT,
        "a Kafka request timed out (a slow or overloaded broker); the pipeline is restarted with backoff; raise "
        "options request.timeout.ms / default.api.timeout.ms if it persists",
    ),
)

# Stages whose failures are fatal by default (Conduit recovery doc: processors are deterministic).
FATAL_STAGES: dict[str, int] = {"processor": codes.PROCESSOR}

# Message patterns, case-insensitive, first match wins: fatal ones first because they are more specific
# ("password authentication failed for user" must not read as a connection problem).
MESSAGE_PATTERNS: tuple[tuple[str, int], ...] = (
    (r"no space left on device", codes.NO_SPACE_LEFT),
    (r"wrong basepath", codes.CHECKPOINT_MOVED),  # Spark: a checkpoint's file paths are not under the source's path
    (r"window-nack-threshold|nack threshold (?:was )?exceeded", codes.DLQ_NACK_THRESHOLD),
    (r"CONDUIT_EXPECTATION_FAILED", codes.EXPECTATION_FAILED),  # a declarative flow's `fail` rule (spark/sdp/expectations.py)
    (r"password authentication failed|authentication failed|permission denied|access denied|not authori[sz]ed", codes.PERMISSION),
    (r"duplicate key value violates unique constraint|violates (?:foreign key|not-null|check|unique) constraint"
     r"|integrity constraint violation", codes.DATA_INTEGRITY),
    (r"cannot resolve|unresolved column|table or view not found|relation \"[^\"]*\" does not exist"
     r"|column \"[^\"]*\" does not exist|syntax error at or near", codes.ANALYSIS),
    (r"executorlostfailure|executor lost|lost executor|worker lost|killed by signal|sigkill|container killed"
     r"|exit code 137|exit code 143|heartbeat timed out|address already in use|could not bind on|failed to bind to", codes.INFRASTRUCTURE),
    (r"connection refused|connection reset|connection closed|broken pipe|no route to host|network is unreachable"
     r"|all masters are unresponsive|failed to connect to master"
     r"|could not connect to server|connection to server .* failed|name or service not known"
     r"|temporary failure in name resolution", codes.CONNECTION),
    (r"timed out|timeout expired|timeout exceeded|deadline exceeded", codes.TIMEOUT),
    (r"\bunavailable\b|too many requests|throttl|rate limit|too many connections"
     r"|insufficient resources|out of memory", codes.RESOURCE_UNAVAILABLE),
)

OUT_OF_MEMORY_ADVICE = (
    "a JVM ran out of memory (java.lang.OutOfMemoryError); the same input would do it again, so the pipeline is "
    "degraded, not restarted: give the driver and executors more memory (spark.driver.memory, "
    "spark.executor.memory) or make batches smaller (max-files-per-trigger); a record over a source's line bound "
    "goes to the DLQ without being read")
_KILLED_EXIT_CODES = (137, 143)  # 128 + SIGKILL / SIGTERM as shells and YARN report them


# --- the classifier -----------------------------------------------------------------------------------


def classify(
    error: Any,
    rules: Iterable[ClassificationRule | dict] | None = None,
    *,
    exit_code: int | None = None,
) -> Classification:
    """Classify an exception, ``StructuredError``, dict, JSON text or stderr text (or only an exit code).

    ``rules`` are user rules (mappings or ``ClassificationRule``) tried before the built-in ones.
    """
    return classify_facts(gather_facts(error, exit_code=exit_code), rules)


def classify_facts(facts: ErrorFacts, rules: Iterable[ClassificationRule | dict] | None = None) -> Classification:
    """The rule chain over already gathered facts."""
    user_rules = parse_rules(rules)  # parsed rules pass through unchanged
    for step in (
        lambda f: _user_rules(f, user_rules),
        _by_marker,
        _by_code,
        _by_exit_code,
        _by_kafka,
        _by_condition,
        _by_sqlstate,
        _by_class,
        _by_stage,
        _by_message,
        _by_startup,
    ):
        result = step(facts)
        if result is not None:
            return result
    return _verdict(facts, codes.TRANSIENT, "default", "default rule: errors are transient unless something says fatal")


def structured_error_from_exception(
    error: BaseException,
    *,
    stage: str | None = None,
    component_id: str | None = None,
    component_type: str | None = None,
    rules: Iterable[ClassificationRule | dict] | None = None,
    extra: dict[str, Any] | None = None,
) -> StructuredError:
    """The ``StructuredError`` a job reports for ``error``, classified here so both sides agree on the code."""
    facts = gather_facts(error)
    facts.stage = stage or facts.stage
    facts.component_id = component_id or facts.component_id
    facts.component_type = component_type or facts.component_type
    verdict = classify_facts(facts, rules)
    return StructuredError(
        code=verdict.code,
        fatal=verdict.fatal,
        message=f"{verdict.advice} ({facts.summary})" if verdict.advice else facts.summary,
        exception_class=facts.exception_class,
        error_condition=verdict.error_condition,
        sqlstate=verdict.sqlstate,
        stage=facts.stage,
        component_id=facts.component_id,
        component_type=facts.component_type,
        extra={"classified_by": verdict.reason, **(extra or {})},
    )


# --- steps ---------------------------------------------------------------------------------------------


def _user_rules(facts: ErrorFacts, rules: tuple[ClassificationRule, ...]) -> Classification | None:
    for index, rule in enumerate(rules):
        if rule.matches(facts):
            return _verdict(facts, rule.reported_code, "user-rule", f"user rule {rule.label(index)}", fatal=rule.fatal)
    return None


def _by_marker(facts: ErrorFacts) -> Classification | None:
    if not facts.markers:
        return None
    marker = facts.markers[0]
    return _verdict(
        facts, marker.code, "marker", f"{marker.class_name} in the exception chain", fatal=marker.fatal
    )


def _by_code(facts: ErrorFacts) -> Classification | None:
    if facts.code is None:
        return None
    fatal = codes.is_fatal_code(facts.code)
    if fatal is None:
        if facts.fatal_flag is None:
            return None
        return _verdict(
            facts, facts.code, "code",
            f"structured error code {facts.code} is outside the known ranges; its fatal flag says {facts.fatal_flag}",
            fatal=facts.fatal_flag,
        )
    span = "2000-2999 fatal" if fatal else "1000-1999 transient"
    return _verdict(facts, facts.code, "code", f"structured error code {facts.code} ({span})", fatal=fatal)


def _by_exit_code(facts: ErrorFacts) -> Classification | None:
    exit_code = facts.exit_code
    if exit_code is None or exit_code == codes.EXIT_OK:
        return None
    if exit_code == codes.EXIT_FATAL:
        return _verdict(facts, codes.FATAL, "exit-code", f"exit code {exit_code} (EXIT_FATAL)")
    if exit_code == codes.EXIT_TRANSIENT:
        return _verdict(facts, codes.TRANSIENT, "exit-code", f"exit code {exit_code} (EXIT_TRANSIENT)")
    if exit_code == codes.EXIT_INVALID_SPEC:
        return _verdict(facts, codes.INVALID_SPEC, "exit-code", f"exit code {exit_code} (EXIT_INVALID_SPEC)")
    if exit_code == codes.SPARK_EXIT_OOM:
        return _verdict(facts, codes.OUT_OF_MEMORY, "exit-code",
                        f"exit code {exit_code}: the driver's JVM ended with an OutOfMemoryError", advice=OUT_OF_MEMORY_ADVICE)
    if exit_code < 0 or exit_code in _KILLED_EXIT_CODES:
        signum = signal_of_exit_code(exit_code)
        return _verdict(facts, codes.KILLED_BY_SIGNAL, "exit-code", f"exit code {exit_code}: killed by signal {signal_label(signum)}")
    return None


def _by_kafka(facts: ErrorFacts) -> Classification | None:
    """Kafka's failures (``KAFKA_FAILURES``), found in the chain's class names or the text."""
    haystack = "\n".join([*facts.class_names, facts.text])
    if "kafka" not in haystack.lower():
        return None
    for name, pattern, code, advice in KAFKA_FAILURES:
        match = re.search(pattern, haystack)
        if match:
            return _verdict(facts, code, "kafka", f"Kafka {name}: {match.group(0)}", advice=advice)
    return None


def _by_condition(facts: ErrorFacts) -> Classification | None:
    for condition in facts.conditions:
        top = condition.split(".", 1)[0].upper()
        if top in SPARK_CONDITIONS:
            return _verdict(facts, SPARK_CONDITIONS[top], "condition", f"Spark error condition {condition}", condition=condition)
    return None


def _by_sqlstate(facts: ErrorFacts) -> Classification | None:
    for sqlstate in facts.sqlstates:
        for prefix, (code, meaning) in SQLSTATE_CLASSES.items():
            if sqlstate.upper().startswith(prefix):
                return _verdict(facts, code, "sqlstate", f"SQLSTATE {sqlstate} (class {prefix}: {meaning})", sqlstate=sqlstate)
    return None


def _by_class(facts: ErrorFacts) -> Classification | None:
    for name in facts.class_names:
        code = EXCEPTION_CLASSES.get(name)
        if code is None:
            short = name.rsplit(".", 1)[-1]
            if short in EXCEPTION_CLASSES and "." not in short:
                code = EXCEPTION_CLASSES[short]
        if code is not None:
            advice = OUT_OF_MEMORY_ADVICE if code == codes.OUT_OF_MEMORY else None
            return _verdict(facts, code, "class", f"exception class {name}", exception_class=name, advice=advice)
    return None


def _by_stage(facts: ErrorFacts) -> Classification | None:
    if facts.stage in FATAL_STAGES:
        where = f" {facts.component_id}" if facts.component_id else ""
        return _verdict(facts, FATAL_STAGES[facts.stage], "stage", f"stage: {facts.stage}{where} failed (processor errors are fatal by default)")
    return None


def _by_message(facts: ErrorFacts) -> Classification | None:
    for pattern, code in MESSAGE_PATTERNS:
        match = re.search(pattern, facts.text, re.IGNORECASE)
        if match:
            return _verdict(facts, code, "message", f"message pattern {match.group(0)!r}")
    return None


def _by_startup(facts: ErrorFacts) -> Classification | None:
    """Spark could not start and no rule above saw a passing cause (network, bind, timeout, resources).

    What is left is local and deterministic: a missing file or jar, a bad option or path, a broken
    installation. A restart starts Spark the same way, so restarting forever would only loop.
    """
    if not is_spark_start_failure(facts.text):
        return None
    return _verdict(facts, codes.SPARK_STARTUP, "startup", "Spark could not start and no cause a retry could change was found")


def _verdict(
    facts: ErrorFacts,
    code: int,
    rule: str,
    why: str,
    *,
    fatal: bool | None = None,
    exception_class: str | None = None,
    condition: str | None = None,
    sqlstate: str | None = None,
    advice: str | None = None,
) -> Classification:
    is_fatal = bool(codes.is_fatal_code(code)) if fatal is None else fatal
    return Classification(
        code=code,
        fatal=is_fatal,
        reason=f"{ErrorKind.of(is_fatal)} {code}, {why}",
        rule=rule,
        message=facts.summary,
        advice=advice,
        exception_class=exception_class or facts.exception_class,
        error_condition=condition or (facts.conditions[0] if facts.conditions else None),
        sqlstate=sqlstate or (facts.sqlstates[0] if facts.sqlstates else None),
        stage=facts.stage,
    )
