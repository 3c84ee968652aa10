"""Fatal or transient: every input shape and every rule of the classifier, in order."""

from __future__ import annotations

import json

import psycopg2
import pytest
from pyspark.errors import AnalysisException

from airflow_conduit.recovery import (
    FatalError,
    StructuredError,
    TransientError,
    classify,
    codes,
    structured_error_from_exception,
)
from airflow_conduit.recovery.errors import NackThresholdExceeded, ProcessorError


def raise_chain(outer: BaseException, inner: BaseException, *, explicit: bool = True) -> BaseException:
    """``outer`` raised while handling ``inner`` (``raise outer from inner`` when explicit)."""
    try:
        try:
            raise inner
        except BaseException as caught:
            if explicit:
                raise outer from caught
            raise outer
    except BaseException as final:
        return final


# --- defaults -----------------------------------------------------------------------------------------------


def test_unknown_errors_are_transient_by_default():
    result = classify(RuntimeError("something odd happened"))
    assert (result.code, result.fatal, result.rule) == (codes.TRANSIENT, False, "default")
    assert "default" in result.reason
    assert result.message == "RuntimeError: something odd happened"
    assert result.exception_class == "RuntimeError"


def test_processor_errors_and_nack_threshold_are_fatal_by_default():
    assert classify(ProcessorError("field.set: no such field")).code == codes.PROCESSOR
    assert classify(NackThresholdExceeded("3 of 10 nacked")).code == codes.DLQ_NACK_THRESHOLD
    # The same two through what a job writes: a structured error without code but with a stage...
    assert classify({"message": "boom", "stage": "processor"}).code == codes.PROCESSOR
    # ...and plain text from an older job.
    assert classify("dead letter queue: window-nack-threshold exceeded (1 of 1)").code == codes.DLQ_NACK_THRESHOLD


# --- structured errors (design doc phase 2) ---------------------------------------------------------------------


def structured(code: int, **fields) -> StructuredError:
    return StructuredError(code=code, fatal=bool(codes.is_fatal_code(code)), message=fields.pop("message", "boom"), **fields)


@pytest.mark.parametrize("code, fatal", [(1000, False), (1100, False), (1500, False), (2000, True), (2100, True), (2310, True), (2900, True), (1999, False), (2999, True)])
def test_code_ranges_decide(code, fatal):
    for shape in (structured(code), structured(code).to_dict(), structured(code).to_json()):
        result = classify(shape)
        assert (result.code, result.fatal, result.rule) == (code, fatal, "code")


def test_stderr_line_is_found_among_log_noise():
    error = structured(codes.ANALYSIS, message="[UNRESOLVED_COLUMN] `amount` cannot be resolved", stage="processor", component_id="p1")
    stderr = "\n".join(
        [
            "26/11/22 01:00:00 INFO SparkContext: Running Spark version 4.2.0",
            "26/11/22 01:00:03 WARN Something: connection refused, retrying",  # noise that must not decide
            error.to_error_line(),
            "26/11/22 01:00:04 INFO ShutdownHookManager: Shutdown hook called",
        ]
    )
    result = classify(stderr)
    assert (result.code, result.fatal, result.rule) == (codes.ANALYSIS, True, "code")
    assert result.message == "[UNRESOLVED_COLUMN] `amount` cannot be resolved"
    assert result.stage == "processor"


def test_last_error_line_wins_and_broken_lines_are_skipped():
    stderr = "\n".join(
        [
            structured(codes.CONNECTION).to_error_line(),
            structured(codes.PERMISSION).to_error_line(),
            codes.ERROR_LINE_PREFIX + '{"code": 21',  # truncated log
        ]
    )
    assert classify(stderr).code == codes.PERMISSION
    assert StructuredError.from_stderr("no marker here") is None


def test_code_outside_the_ranges_falls_back_to_the_fatal_flag():
    result = classify({"code": 4040, "fatal": True, "message": "custom"})
    assert (result.code, result.fatal) == (4040, True)
    assert classify({"code": 4040, "fatal": False, "message": "custom"}).fatal is False


def test_plain_text_errors_from_older_jobs_keep_working():
    assert classify("java.net.ConnectException: Connection refused (Connection refused)").code == codes.CONNECTION
    assert classify("ERROR: permission denied for table orders").code == codes.PERMISSION
    assert classify("Traceback ...\nValueError: bad thing").fatal is False


def test_json_text_without_marker_is_read():
    assert classify(json.dumps({"code": 2100, "fatal": True, "message": "spec refused"})).code == codes.INVALID_SPEC


# --- FatalError / TransientError through wrapping ------------------------------------------------------------------


def test_fatal_error_as_cause_is_recognised():
    error = raise_chain(RuntimeError("write failed"), FatalError("schema mismatch"))
    result = classify(error)
    assert result.fatal and result.rule == "marker" and "FatalError" in result.reason


def test_fatal_error_wrapping_a_transient_looking_cause():
    error = raise_chain(FatalError("give up"), ConnectionRefusedError("connection refused"))
    assert classify(error).fatal


def test_transient_error_wrapping_a_processor_error_wins():
    # Design doc: processors that talk to a flaky service may return transient errors.
    error = raise_chain(TransientError("webhook 503"), ProcessorError("webhook.http failed"))
    result = classify(error)
    assert not result.fatal and result.code == codes.TRANSIENT


def test_marker_found_through_implicit_context():
    error = raise_chain(KeyError("lookup"), FatalError("unrecoverable"), explicit=False)
    assert classify(error).fatal


def test_marker_with_a_specific_code():
    assert classify(TransientError("db", code=codes.CONNECTION)).code == codes.CONNECTION
    # A code from the wrong range cannot turn a FatalError transient.
    assert classify(FatalError("x", code=codes.CONNECTION)).code == codes.FATAL


# --- exception classes, Spark conditions, SQLSTATE ------------------------------------------------------------------


def test_python_exception_classes_in_the_chain():
    assert classify(ConnectionRefusedError("nope")).code == codes.CONNECTION  # a ConnectionError subclass
    assert classify(raise_chain(RuntimeError("wrapper"), TimeoutError("slow"))).code == codes.TIMEOUT
    assert classify(PermissionError("denied")).code == codes.PERMISSION
    assert classify(ModuleNotFoundError("No module named 'acme'")).fatal


def test_real_psycopg2_connection_refused_is_transient():
    with pytest.raises(psycopg2.OperationalError) as caught:
        psycopg2.connect(host="127.0.0.1", port=1, dbname="x", user="x", connect_timeout=2)
    result = classify(caught.value)
    assert (result.code, result.fatal) == (codes.CONNECTION, False)


def test_real_psycopg2_integrity_error_is_fatal():
    error = psycopg2.errors.UniqueViolation('duplicate key value violates unique constraint "orders_pkey"')
    assert classify(error).code == codes.DATA_INTEGRITY


def test_real_pyspark_analysis_exception_is_fatal():
    error = AnalysisException(
        message="[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column with name `amout` cannot be resolved. "
        "Did you mean one of the following? [`amount`]. SQLSTATE: 42703",
        errorClass="UNRESOLVED_COLUMN.WITH_SUGGESTION",
        messageParameters={},
    )
    result = classify(raise_chain(RuntimeError("query failed"), error))
    assert (result.code, result.fatal, result.rule) == (codes.ANALYSIS, True, "condition")
    assert result.error_condition == "UNRESOLVED_COLUMN.WITH_SUGGESTION"


PY4J_TEXT = """An error occurred while calling o87.save.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)
Caused by: java.net.SocketTimeoutException: Read timed out
\tat java.base/sun.nio.ch.NioSocketImpl.timedRead(NioSocketImpl.java:278)
"""


def test_java_class_names_in_text():
    result = classify(PY4J_TEXT)
    assert (result.code, result.rule) == (codes.TIMEOUT, "class")
    assert result.exception_class == "java.net.SocketTimeoutException"


@pytest.mark.parametrize(
    "text, code",
    [
        ("[TABLE_OR_VIEW_NOT_FOUND] The table or view `x` cannot be found. SQLSTATE: 42P01", codes.ANALYSIS),
        ("[CAST_INVALID_INPUT] The value 'abc' cannot be cast. SQLSTATE: 22018", codes.FATAL),
        # CONCURRENT_QUERY's SQLSTATE is 0A000 (not supported: fatal), but the condition says the
        # previous driver still holds the checkpoint: passing. Conditions come before SQLSTATE.
        ("[CONCURRENT_QUERY] Another instance of this query was just started. SQLSTATE: 0A000", codes.RESOURCE_UNAVAILABLE),
    ],
)
def test_spark_error_conditions(text, code):
    assert classify(text).code == code


@pytest.mark.parametrize(
    "sqlstate, code, fatal",
    [
        ("08001", codes.CONNECTION, False),
        ("08006", codes.CONNECTION, False),
        ("40001", codes.TRANSIENT, False),
        ("40P01", codes.TRANSIENT, False),
        ("53300", codes.RESOURCE_UNAVAILABLE, False),
        ("57P01", codes.TRANSIENT, False),
        ("HYT00", codes.TIMEOUT, False),
        ("42703", codes.ANALYSIS, True),
        ("42P01", codes.ANALYSIS, True),
        ("28P01", codes.PERMISSION, True),
        ("23505", codes.DATA_INTEGRITY, True),
        ("22018", codes.FATAL, True),
        ("0A000", codes.FATAL, True),
    ],
)
def test_sqlstate_classes(sqlstate, code, fatal):
    for shape in (
        {"code": None, "message": "db error", "sqlstate": sqlstate},
        f"org.postgresql.util.PSQLException: boom (SQLState: {sqlstate})",
        f"[SOME_SPARK_ERROR] boom SQLSTATE: {sqlstate}",
    ):
        if isinstance(shape, dict):
            shape = {k: v for k, v in shape.items() if v is not None}
        result = classify(shape)
        assert (result.code, result.fatal) == (code, fatal), shape
        assert result.sqlstate == sqlstate


# --- exit codes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exit_code, code",
    [(codes.EXIT_FATAL, codes.FATAL), (codes.EXIT_TRANSIENT, codes.TRANSIENT), (codes.EXIT_INVALID_SPEC, codes.INVALID_SPEC),
     (137, codes.KILLED_BY_SIGNAL), (143, codes.KILLED_BY_SIGNAL), (-9, codes.KILLED_BY_SIGNAL)],
)
def test_exit_codes(exit_code, code):
    assert classify(None, exit_code=exit_code).code == code
    assert classify("driver log without any error line", exit_code=exit_code).code == code


@pytest.mark.parametrize("exit_code, signal", [(137, "9 (SIGKILL)"), (143, "15 (SIGTERM)"), (-9, "9 (SIGKILL)")])
def test_an_exit_code_of_a_signal_names_the_signal(exit_code, signal):
    verdict = classify(None, exit_code=exit_code)
    assert verdict.transient and verdict.reason.endswith(f"killed by signal {signal}")


def test_structured_code_wins_over_exit_code():
    assert classify(structured(codes.CONNECTION).to_error_line(), exit_code=codes.EXIT_FATAL).code == codes.CONNECTION


# --- message patterns -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, code",
    [
        ('FATAL:  password authentication failed for user "etl" (connection to server at db)', codes.PERMISSION),
        ("could not connect to server: Connection refused", codes.CONNECTION),
        ("Lost executor 1 on 10.0.0.3: Container killed by YARN for exceeding memory limits", codes.INFRASTRUCTURE),
        ("operation timed out after 30s", codes.TIMEOUT),
        ("HTTP 429 Too Many Requests", codes.RESOURCE_UNAVAILABLE),
        ('ERROR: relation "public.orders" does not exist', codes.ANALYSIS),
    ],
)
def test_message_patterns(text, code):
    result = classify(text)
    assert result.code == code and result.rule == "message"


# --- user rules -------------------------------------------------------------------------------------------------


def test_user_rules_are_evaluated_first_and_named_in_the_reason():
    rules = [
        {"class": "java.net.ConnectException", "as": "fatal", "name": "firewall closed for good"},
        {"message": "quota", "as": "transient", "error-code": 1300},
    ]
    result = classify("java.net.ConnectException: Connection refused", rules)
    assert result.fatal and result.rule == "user-rule"
    assert "error-rules[0] (firewall closed for good)" in result.reason
    quota = classify(FatalError("daily quota exceeded"), rules)  # a rule even beats a FatalError
    assert (quota.fatal, quota.code) == (False, 1300)
    assert classify("something else", rules).rule == "default"


@pytest.mark.parametrize(
    "rule, error",
    [
        ({"code": [2600], "as": "transient"}, {"code": 2600, "fatal": True, "message": "dup"}),
        ({"class": "*Timeout*", "as": "fatal"}, "java.net.SocketTimeoutException: Read timed out"),
        ({"class": "OperationalError", "as": "fatal"}, psycopg2.OperationalError("x")),
        ({"condition": "UNRESOLVED_COLUMN", "as": "transient"}, "[UNRESOLVED_COLUMN.WITH_SUGGESTION] x SQLSTATE: 42703"),
        ({"sqlstate": "42P", "as": "transient"}, "boom SQLSTATE: 42P01"),
        ({"stage": "destination", "message": "disk", "as": "fatal"}, {"message": "disk full", "stage": "destination"}),
    ],
)
def test_each_user_rule_matcher(rule, error):
    default = classify(error)
    result = classify(error, [rule])
    assert result.rule == "user-rule"
    assert result.fatal == (rule["as"] == "fatal")
    assert result.fatal != default.fatal  # each example rule overturns the built-in verdict


def test_user_rule_matchers_are_anded():
    rule = {"stage": "source", "message": "disk", "as": "fatal"}
    assert classify({"message": "disk full", "stage": "destination"}, [rule]).rule != "user-rule"


def test_rules_from_options_reach_the_engine(clock):
    from airflow_conduit.recovery import RecoveryEngine, RecoveryOptions

    options = RecoveryOptions.from_mapping({"error-rules": [{"message": "quota", "as": "fatal"}]})
    engine = RecoveryEngine(options, clock=clock)
    engine.start()
    assert engine.on_failure("API quota exhausted").action == "degrade"


# --- the job side: structured errors from exceptions ----------------------------------------------------------------


def test_structured_error_from_exception_agrees_with_the_airflow_side():
    error = raise_chain(RuntimeError("batch 3 failed"), psycopg2.errors.UniqueViolation("duplicate key value violates unique constraint"))
    reported = structured_error_from_exception(error, stage="destination", component_id="pg", component_type="jdbc")
    assert (reported.code, reported.fatal, reported.stage, reported.component_id) == (codes.DATA_INTEGRITY, True, "destination", "pg")
    assert reported.exception_class == "RuntimeError"
    # What the Airflow side reads back from stderr classifies the same.
    assert classify(reported.to_error_line()).code == reported.code


def test_structured_error_for_a_processor_failure_is_fatal():
    reported = structured_error_from_exception(ValueError("cannot parse 'abc'"), stage="processor", component_id="parse")
    assert (reported.code, reported.fatal) == (codes.PROCESSOR, True)


def test_classification_round_trips():
    from airflow_conduit.recovery import Classification

    result = classify(PY4J_TEXT)
    assert Classification.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_unsupported_input_type_is_refused():
    with pytest.raises(TypeError, match="cannot classify"):
        classify(42)


# --- out of memory: fatal, never an endless restart ---------------------------------------------------------


@pytest.mark.parametrize(
    "error, exit_code",
    [
        ("org.apache.spark.SparkException: Job aborted due to stage failure: Lost task 0.0 in stage 0.0: "
         "java.lang.OutOfMemoryError: Java heap space", None),
        (MemoryError(), None),
        ("26/12/07 ERROR SparkUncaughtExceptionHandler: Uncaught exception in thread Executor task launch worker", 52),
    ],
)
def test_out_of_memory_is_fatal_with_its_cause(error, exit_code):
    result = classify(error, exit_code=exit_code)
    assert result.code == codes.OUT_OF_MEMORY and result.fatal
    assert result.advice and "spark.driver.memory" in result.advice
