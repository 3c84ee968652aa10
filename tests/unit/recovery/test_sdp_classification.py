"""Declarative pipelines' failures as the classifier sees them (the texts are Spark 4.2's own, measured)."""

from __future__ import annotations

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.classify import classify

FAILFAST = (
    "[STREAM_FAILED] Query [id = 9, runId = e] terminated with exception: [FAILED_READ_FILE.NO_HINT] Encountered "
    "error while reading file file:///tmp/in/1.json.  SQLSTATE: KD001 SQLSTATE: XXKST\n"
    "Caused by: org.apache.spark.SparkException: [MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION] Malformed records "
    "are detected in record parsing: [null,null].\nParse Mode: FAILFAST.  SQLSTATE: 22023")


def test_a_config_spark_refuses_to_change_is_fatal_not_transient():
    verdict = classify('[CANNOT_MODIFY_STATIC_CONFIG] Cannot modify the value of the static Spark config: '
                       '"spark.sql.warehouse.dir". SQLSTATE: 46110')
    assert verdict.fatal and verdict.code == codes.INVALID_SPEC


def test_sqlstate_class_46_alone_is_a_configuration_error():
    verdict = classify({"message": "config refused", "sqlstate": "46110"})
    assert verdict.fatal and verdict.code == codes.INVALID_SPEC and verdict.rule == "sqlstate"


def test_a_missing_source_path_is_fatal():
    verdict = classify("pyspark.errors.exceptions.connect.AnalysisException: [PATH_NOT_FOUND] Path does not exist: "
                       "/data/nope. SQLSTATE: 42K03")
    assert verdict.fatal and verdict.code == codes.ANALYSIS


def test_a_malformed_record_under_failfast_is_fatal():
    verdict = classify(FAILFAST)
    assert verdict.fatal and verdict.code == codes.FATAL
    assert verdict.error_condition.startswith("MALFORMED_RECORD_IN_PARSING")


def test_a_fail_expectation_is_fatal_with_its_own_code():
    verdict = classify("[STREAM_FAILED] Query terminated with exception: [USER_RAISED_EXCEPTION] "
                       "CONDUIT_EXPECTATION_FAILED: expectation 'amount_below_limit' (amount < 1000000) of flow orders "
                       "failed on a record from file:/in/2.json SQLSTATE: P0001 SQLSTATE: XXKST")
    assert verdict.fatal and verdict.code == codes.EXPECTATION_FAILED


def test_a_lost_connect_server_stays_transient():
    verdict = classify("pyspark.errors.exceptions.connect.SparkConnectGrpcException: <_MultiThreadedRendezvous of RPC "
                       "that terminated with: status = StatusCode.UNAVAILABLE details = \"failed to connect to all "
                       "addresses; last error: UNKNOWN: ipv4:127.0.0.1:15002: Failed to connect to remote host: "
                       "Connection refused\">")
    assert not verdict.fatal
