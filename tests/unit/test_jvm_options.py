"""The JVM options every pipeline's driver and executors get (spark/jvm/options.py), on the launchers' command lines."""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_conduit.hooks.backends.local import LocalBackend
from airflow_conduit.spark.jvm.options import CLASS_ARCHIVE_ENV, JAVA_OPTION_KEYS, JIT_OPTIONS, class_archive_path, with_class_archive, with_jit_options


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


def test_the_local_launcher_passes_them_with_the_users_conf(monkeypatch):
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, "")  # no class archive: only the JIT options
    backend = LocalBackend(conf={"spark.driver.extraJavaOptions": "-Dteam=etl", "spark.sql.shuffle.partitions": "8"})
    conf = backend._spark_conf(4050)
    assert conf["spark.driver.extraJavaOptions"].split() == ["-Dteam=etl", *JIT_OPTIONS]
    assert conf["spark.executor.extraJavaOptions"].split() == list(JIT_OPTIONS)
    assert conf["spark.sql.shuffle.partitions"] == "8"


def test_an_existing_class_archive_goes_to_the_driver_only_after_the_users_options(tmp_path):
    archive = tmp_path / "spark-classes.jsa"
    archive.write_bytes(b"archive")
    conf = with_class_archive(with_jit_options({"spark.driver.extraJavaOptions": "-Dteam=etl"}), archive)
    assert conf["spark.driver.extraJavaOptions"].split() == ["-Dteam=etl", *JIT_OPTIONS, f"-XX:SharedArchiveFile={archive}"]
    assert conf["spark.executor.extraJavaOptions"].split() == list(JIT_OPTIONS)
    assert with_class_archive(conf, archive) == conf


def test_a_missing_class_archive_adds_nothing(tmp_path):
    conf = {"spark.driver.extraJavaOptions": "-Dteam=etl"}
    assert with_class_archive(conf, tmp_path / "absent.jsa") == conf
    assert "spark.driver.extraJavaOptions" not in with_class_archive({}, tmp_path / "absent.jsa")


def test_class_sharing_the_user_chose_is_theirs(tmp_path):
    archive = tmp_path / "spark-classes.jsa"
    archive.write_bytes(b"archive")
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=/tmp/new.jsa"):
        conf = {"spark.driver.extraJavaOptions": f"-Dteam=etl {own}"}
        assert with_class_archive(conf, archive) == conf


def test_the_class_archive_path_is_the_environment_variable_else_under_the_prefix(monkeypatch, tmp_path):
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(tmp_path / "a.jsa"))
    assert class_archive_path() == tmp_path / "a.jsa"
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, "")
    assert class_archive_path() is None
    assert with_class_archive({}) == {}
    monkeypatch.delenv(CLASS_ARCHIVE_ENV)
    assert class_archive_path() == Path(sys.prefix) / "share" / "airflow-conduit" / "spark-classes.jsa"


def test_the_local_launcher_adds_the_class_archive(monkeypatch, tmp_path):
    archive = tmp_path / "spark-classes.jsa"
    archive.write_bytes(b"archive")
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(archive))
    conf = LocalBackend(conf={"spark.driver.extraJavaOptions": "-Dteam=etl"})._spark_conf(4050)
    assert conf["spark.driver.extraJavaOptions"].split() == ["-Dteam=etl", *JIT_OPTIONS, f"-XX:SharedArchiveFile={archive}"]
