"""Py4J errors: the structured error names the Java root cause and its SQLSTATE; Spark start failures do not loop."""

from __future__ import annotations

from airflow_conduit.recovery import classify, structured_error_from_exception
from airflow_conduit.recovery.java_errors import JavaCause, java_causes, java_causes_from_text, root_cause


class _JavaClass:
    def __init__(self, name: str):
        self.name = name

    def getName(self) -> str:  # noqa: N802 - the Java method name, called through py4j
        return self.name


class JavaThrowable:
    """Stands in for a py4j JavaObject proxy of a java.lang.Throwable (only the methods the reader calls)."""

    def __init__(self, name: str, message: str | None, cause: "JavaThrowable | None" = None, sqlstate: str | None = None):
        self.name, self.message, self.cause, self.sqlstate = name, message, cause, sqlstate

    def getClass(self):  # noqa: N802
        return _JavaClass(self.name)

    def getMessage(self):  # noqa: N802
        return self.message

    def getCause(self):  # noqa: N802
        return self.cause

    def getSQLState(self):  # noqa: N802
        if self.sqlstate is None:  # py4j raises when the Java class has no such method
            raise AttributeError("Method getSQLState([]) does not exist")
        return self.sqlstate


def trace_text(throwable: JavaThrowable) -> str:
    """What the JVM prints for printStackTrace (py4j puts it after ': ')."""
    lines, current, first = [], throwable, True
    while current is not None and len(lines) < 60:
        head = f"{current.name}: {current.message}" if current.message else current.name
        lines.append(head if first else f"Caused by: {head}")
        lines.append("\tat org.example.Some.frame(Some.java:1)")
        current, first = current.cause, False
    return "\n".join(lines)


class Py4JJavaError(Exception):
    """Same shape as py4j.protocol.Py4JJavaError: ``java_exception`` and a str() with the Java stack trace."""

    def __init__(self, call: str, java_exception: JavaThrowable, jvm_alive: bool = True):
        super().__init__(f"An error occurred while calling {call}.\n", java_exception)
        self.errmsg = f"An error occurred while calling {call}.\n"
        self.java_exception = java_exception if jvm_alive else _DeadProxy()
        self._trace = trace_text(java_exception)

    def __str__(self) -> str:
        return f"{self.errmsg}: {self._trace}"


class _DeadProxy:
    def __getattr__(self, name):
        raise ConnectionRefusedError("py4j gateway is gone")


PASSWORD = JavaThrowable(
    "org.postgresql.util.PSQLException", 'FATAL: password authentication failed for user "conduit"', sqlstate="28P01"
)
SERVER_DOWN = JavaThrowable(
    "org.postgresql.util.PSQLException",
    "Connection to 127.0.0.1:5999 refused. Check that the hostname and port are correct and that the postmaster is "
    "accepting TCP/IP connections.",
    cause=JavaThrowable("java.net.ConnectException", "Connection refused"),
    sqlstate="08001",
)


def test_wrong_password_reports_the_psql_message_and_sqlstate():
    error = structured_error_from_exception(Py4JJavaError("o763.jdbc", PASSWORD), stage="destination")
    assert error.message == 'org.postgresql.util.PSQLException: FATAL: password authentication failed for user "conduit"'
    assert error.sqlstate == "28P01"
    assert (error.code, error.fatal) == (2500, True)
    assert "o763.jdbc" not in error.message


def test_server_down_reports_the_jdbc_cause_not_the_wrapper():
    error = structured_error_from_exception(Py4JJavaError("o763.jdbc", SERVER_DOWN), stage="destination")
    assert error.message.startswith("org.postgresql.util.PSQLException: Connection to 127.0.0.1:5999 refused.")
    assert error.sqlstate == "08001"
    assert (error.code, error.fatal) == (1100, False)


def test_without_a_live_jvm_the_printed_trace_gives_the_root():
    verdict = classify(Py4JJavaError("o763.jdbc", SERVER_DOWN, jvm_alive=False))
    assert verdict.message == "java.net.ConnectException: Connection refused"  # the printed trace has no SQLSTATE
    assert (verdict.code, verdict.fatal) == (1100, False)


def test_stderr_text_of_a_py4j_error_is_summarised_by_its_root_cause():
    text = "Traceback (most recent call last):\npy4j.protocol.Py4JJavaError: " + str(Py4JJavaError("o763.jdbc", PASSWORD))
    verdict = classify(text)
    assert verdict.message.startswith("org.postgresql.util.PSQLException: FATAL: password authentication failed")
    assert verdict.fatal


def test_java_chain_readers_and_root_choice():
    assert java_causes(Py4JJavaError("o1.x", SERVER_DOWN)) == [
        JavaCause("org.postgresql.util.PSQLException", SERVER_DOWN.message, "08001"),
        JavaCause("java.net.ConnectException", "Connection refused"),
    ]
    printed = java_causes_from_text(str(Py4JJavaError("o1.x", SERVER_DOWN)))
    assert [c.class_name for c in printed] == ["org.postgresql.util.PSQLException", "java.net.ConnectException"]
    assert root_cause(java_causes(Py4JJavaError("o1.x", SERVER_DOWN))).sqlstate == "08001"  # deepest with a SQLSTATE
    assert root_cause(printed).class_name == "java.net.ConnectException"  # else the deepest
    assert root_cause([]) is None
    assert java_causes(ValueError("plain")) == []


def test_a_cyclic_or_endless_java_chain_is_cut():
    looping = JavaThrowable("java.lang.RuntimeException", "again")
    looping.cause = JavaThrowable("java.lang.IllegalStateException", "and again", cause=looping)
    assert len(java_causes(Py4JJavaError("o1.x", _Endless()))) == 20
    assert len(java_causes(Py4JJavaError("o1.x", looping))) == 20


class _Endless(JavaThrowable):
    def __init__(self):
        super().__init__("java.lang.RuntimeException", "wrapped")

    def getCause(self):  # noqa: N802
        return _Endless()


SPARK_CONTEXT = "None.org.apache.spark.api.java.JavaSparkContext"


def test_spark_that_cannot_start_for_a_missing_file_is_fatal_and_names_the_file():
    # The relative --state-dir bug: the --py-files zip path was doubled, SparkContext failed for good.
    missing = JavaThrowable(
        "java.io.FileNotFoundException", "File file:/tmp/relstate/runs/r1/relstate/runs/r1/airflow_conduit.zip does not exist"
    )
    error = structured_error_from_exception(Py4JJavaError(SPARK_CONTEXT, missing), stage="runner")
    assert (error.code, error.fatal) == (2700, True)
    assert error.message.startswith("java.io.FileNotFoundException: File file:/tmp/relstate/")
    assert "Spark could not start" in error.extra["classified_by"]


def test_spark_that_cannot_start_for_a_passing_reason_stays_transient():
    unbound = JavaThrowable("java.net.BindException", "Address already in use: Service 'sparkDriver' failed after 16 retries")
    assert classify(Py4JJavaError(SPARK_CONTEXT, unbound)).code == 1400
    masters = JavaThrowable("org.apache.spark.SparkException", "Exiting due to error from cluster scheduler: All masters are unresponsive! Giving up.")
    assert classify(Py4JJavaError(SPARK_CONTEXT, masters)).code == 1100


def test_a_user_rule_can_make_startup_failures_transient():
    missing = JavaThrowable("java.io.FileNotFoundException", "File file:/x.zip does not exist")
    reported = structured_error_from_exception(Py4JJavaError(SPARK_CONTEXT, missing), stage="runner")  # the job
    verdict = classify(reported.to_dict(), [{"code": [2700], "as": "transient"}])  # the engine, with the user's rules
    assert verdict.transient and verdict.rule == "user-rule"


def test_other_py4j_failures_keep_the_default():
    odd = JavaThrowable("java.lang.IllegalStateException", "something odd")
    verdict = classify(Py4JJavaError("o42.start", odd))
    assert (verdict.code, verdict.rule) == (1000, "default")
    assert verdict.message == "java.lang.IllegalStateException: something odd"


SPARK_SUBMIT_REFUSAL = """\
WARNING: Using incubator modules: jdk.incubator.vector
Exception in thread "main" org.apache.spark.SparkException: Master must either be yarn or start with spark, k8s, or local
\tat org.apache.spark.deploy.SparkSubmit.error(SparkSubmit.scala:1068)
\tat org.apache.spark.deploy.SparkSubmitArguments.validateSubmitArguments(SparkSubmitArguments.scala:253)
\tat org.apache.spark.deploy.SparkSubmit.doSubmit(SparkSubmit.scala:95)
\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)
"""


def test_spark_submit_refusing_its_command_line_is_fatal_and_named():
    # `airflow-conduit run --master bogus://x`: spark-submit exits 1 before any driver; it used to restart for ever.
    verdict = classify(SPARK_SUBMIT_REFUSAL, exit_code=1)
    assert (verdict.code, verdict.fatal, verdict.rule) == (2700, True, "startup")
    assert verdict.message == "org.apache.spark.SparkException: Master must either be yarn or start with spark, k8s, or local"


def test_spark_submit_failing_to_reach_a_cluster_stays_transient():
    text = SPARK_SUBMIT_REFUSAL.replace(
        "Master must either be yarn or start with spark, k8s, or local", "Failed to connect to master 127.0.0.1:7077"
    )
    assert classify(text, exit_code=1).code == 1100


def test_a_summary_of_log_text_is_never_a_stack_frame():
    text = "INFO starting\nERROR something broke badly\n\tat org.example.Thing.error(Thing.java:10)\n\t... 12 more\n"
    assert classify(text).message == "ERROR something broke badly"
