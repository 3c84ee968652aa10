"""A driver whose JVM was killed under it (a SIGKILLed spark-submit) is a killed JVM, not a failed processor nor a
network fault.

In its own Python process with its own local SparkSession (the shared one must live on): the JVM is
SIGKILLed, then the error the next plan-building call raises, and the Py4J error py4j raises when the socket
closes in the middle of an answer, are classified as the runner classifies them. Both must come out
transient, so the engine restarts the pipeline instead of stopping it as degraded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from airflow_conduit.recovery import codes

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import json, os, signal, time
    from py4j.protocol import Py4JError
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T
    from airflow_conduit.spark.runner import classify, jvm_answers, lost_jvm_or

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    alive = jvm_answers(spark)
    os.kill(spark._jvm.java.lang.ProcessHandle.current().pid(), signal.SIGKILL)
    time.sleep(2)
    try:
        T.StructType.fromDDL("id BIGINT")  # what a json.decode processor calls while planning a batch
        raise SystemExit("the call reached a killed JVM")
    except Exception as exc:
        raised = exc
    where = ("processor", "decode-payload", "json.decode")
    error = classify(lost_jvm_or(raised, spark), *where)
    # py4j raises this instead when the socket closes in the middle of its answer (seen in CI after a SIGKILL)
    mid_answer = Py4JError("org.apache.spark.sql.api.python.PythonSQLUtils.ddlToJson does not exist in the JVM")
    mid = classify(lost_jvm_or(mid_answer, spark), *where)
    alive_mid = classify(mid_answer, *where)  # the same error while the JVM answered: a processor's, fatal
    # the gateway's connection refused once the JVM is gone: a consequence of the kill, not a network fault
    refused = classify(lost_jvm_or(ConnectionRefusedError(111, "Connection refused"), spark), "runner", None, None)
    print(json.dumps({"alive_before": alive, "answers_after": jvm_answers(spark), "fatal": error.fatal,
                      "code": error.code, "message": error.message, "refused_code": refused.code,
                      "refused_message": refused.message, "mid_fatal": mid.fatal, "mid_class": mid.exception_class,
                      "alive_mid_fatal": alive_mid.fatal}))
    """
)


def test_a_py4j_error_after_the_jvm_was_killed_is_a_transient_lost_driver():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["alive_before"] is True and got["answers_after"] is False
    assert got["fatal"] is False  # what the next call raised after the kill
    # this process started the JVM: it knows the signal, and says so instead of the call's error
    assert got["code"] == codes.KILLED_BY_SIGNAL, got
    assert "the driver's JVM (spark-submit) was killed by signal 9 (SIGKILL)" in got["message"], got
    assert got["refused_code"] == codes.KILLED_BY_SIGNAL and "Connection refused" not in got["refused_message"], got
    assert got["mid_fatal"] is False and got["mid_class"] == "airflow_conduit.spark.runner.DriverJvmGone"
    assert got["alive_mid_fatal"] is True
