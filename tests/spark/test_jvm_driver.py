"""Contract of ``spark/jvm/driver.py`` against the real JVM: the driver's JVM answers, a running query's class names
its logger, and a Log4j logger is turned off and back."""

from __future__ import annotations

import pytest

from airflow_conduit.spark.jvm import driver

pytestmark = pytest.mark.spark


def test_the_driver_jvm_answers_and_a_local_session_has_no_exit_code_while_it_runs(spark):
    assert driver.answers(spark)
    assert driver.exit_code(spark, 0.1) is None  # still running (or not this process's child)


def test_a_logger_is_turned_off_and_put_back(spark):
    name = "airflow_conduit.contract.logger"
    before = driver.level_of(spark, name)
    restore = driver.logger_off(spark, name)
    assert driver.level_of(spark, name) == "OFF"
    restore()
    assert driver.level_of(spark, name) == before


def test_a_running_query_names_the_class_spark_logs_its_end_with(spark, tmp_path):
    query = spark.readStream.format("rate").load().writeStream.format("noop").option(
        "checkpointLocation", str(tmp_path / "cp")).start()
    try:
        name = driver.query_class_name(query)
    finally:
        query.stop()
    assert name.startswith("org.apache.spark.sql.execution.streaming.") and name.endswith("Execution"), name
