"""Contract test of recovery/java_errors.py against real py4j: a JDBC failure's structured error names the Java root cause.

PySpark raises a Py4JJavaError ("An error occurred while calling o763.jdbc.") for a JDBC failure;
the reader walks ``java_exception`` through py4j. If a py4j or PySpark upgrade changes that shape,
these tests fail (the fakes in tests/unit/recovery/test_recovery_java_errors.py cannot notice).
"""

from __future__ import annotations

import pytest

from airflow_conduit.recovery.classify import structured_error_from_exception

from conftest import free_port


def jdbc_failure(spark, url: str, user: str) -> BaseException:
    frame = spark.createDataFrame([(1,)], "id INT")
    with pytest.raises(Exception) as info:
        frame.write.jdbc(url, "conduit_probe", mode="append",
                         properties={"user": user, "password": "wrong", "driver": "org.postgresql.Driver"})
    return info.value


def test_server_down_reports_the_psql_message_and_sqlstate(spark):
    port = free_port()  # nothing listens there
    error = structured_error_from_exception(jdbc_failure(spark, f"jdbc:postgresql://127.0.0.1:{port}/x", "u"), stage="destination")
    assert error.message.startswith(f"org.postgresql.util.PSQLException: Connection to 127.0.0.1:{port} refused")
    assert error.sqlstate == "08001"
    assert (error.code, error.fatal) == (1100, False)


def test_an_unknown_role_is_fatal_with_the_server_message(spark, postgres):
    exc = jdbc_failure(spark, postgres["url"], "no_such_role")
    error = structured_error_from_exception(exc, stage="destination")
    assert error.message == 'org.postgresql.util.PSQLException: FATAL: role "no_such_role" does not exist'
    assert error.sqlstate == "28000"
    assert (error.code, error.fatal) == (2500, True)
    assert "while calling" not in error.message
