"""The JVM options every pipeline's driver and executors get (spark/jvm.py), on the launchers' command lines."""

from __future__ import annotations

from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.spark.jvm import JAVA_OPTION_KEYS, JIT_OPTIONS, with_jit_options


def test_the_options_go_to_the_driver_and_the_executors():
    conf = with_jit_options({"spark.ui.port": "4050"})
    assert conf["spark.ui.port"] == "4050"
    for key in JAVA_OPTION_KEYS:
        assert conf[key].split() == list(JIT_OPTIONS)


def test_a_users_java_options_are_kept_in_front_and_nothing_is_repeated():
    conf = with_jit_options({"spark.driver.extraJavaOptions": "-Dteam=etl  -Xss4m"})
    assert conf["spark.driver.extraJavaOptions"].split() == ["-Dteam=etl", "-Xss4m", *JIT_OPTIONS]
    assert with_jit_options(conf) == conf


def test_a_flag_the_user_set_either_way_is_theirs():
    conf = with_jit_options({"spark.executor.extraJavaOptions": "-XX:+DontCompileHugeMethods"})
    assert conf["spark.executor.extraJavaOptions"] == "-XX:+DontCompileHugeMethods"
    assert conf["spark.driver.extraJavaOptions"] == " ".join(JIT_OPTIONS)


def test_the_local_launcher_passes_them_with_the_users_conf():
    backend = LocalBackend(conf={"spark.driver.extraJavaOptions": "-Dteam=etl", "spark.sql.shuffle.partitions": "8"})
    conf = backend._spark_conf(4050)
    assert conf["spark.driver.extraJavaOptions"].split() == ["-Dteam=etl", *JIT_OPTIONS]
    assert conf["spark.executor.extraJavaOptions"].split() == list(JIT_OPTIONS)
    assert conf["spark.sql.shuffle.partitions"] == "8"
