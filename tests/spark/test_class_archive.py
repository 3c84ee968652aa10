"""The driver's class data sharing archive (spark/class_archive.py): made by one real spark-submit run, then mapped by
a session the runner's ``build_session`` starts; a damaged archive is never moved into place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_conduit.spark import class_archive
from airflow_conduit.spark.jvm.options import CLASS_ARCHIVE_ENV

FROM_THE_ARCHIVE = "source: shared objects file (top)"  # -Xlog:class+load's mark of a class mapped from a dynamic archive
SESSION_SCRIPT = """
import sys
from airflow_conduit.spark.session import build_session
spark = build_session("class-archive-check", master="local[1]")
spark.read.json(sys.argv[1]).write.parquet(sys.argv[2])
spark.stop()
"""


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """Made from a path relative to the current folder, as ``make install`` passes it."""
    folder = tmp_path_factory.mktemp("archive")
    before = os.getcwd()
    os.chdir(folder)
    try:
        made = class_archive.create(Path("share") / "spark-classes.jsa")
    finally:
        os.chdir(before)
    assert made.is_absolute() and made == folder / "share" / "spark-classes.jsa"
    return made


def _session_run(tmp_path: Path, archive_setting: str) -> tuple[int, str]:
    """A session built by ``build_session`` in a process of its own, reading and writing a few records; its exit code
    and the driver JVM's class loading log (``%p``: the launcher's short JVM logs to a file of its own)."""
    (tmp_path / "in.json").write_text('{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}\n', encoding="utf-8")
    env = {**os.environ, CLASS_ARCHIVE_ENV: archive_setting, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "JDK_JAVA_OPTIONS": f"-Xlog:class+load=info:file={tmp_path}/classes-%p.log"}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    done = subprocess.run([sys.executable, "-c", SESSION_SCRIPT, str(tmp_path / "in.json"), str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("classes-*.log"))
    return done.returncode, logs + done.stderr[-3000:]


def test_a_session_maps_most_of_its_classes_from_the_archive(archive, tmp_path):
    code, log = _session_run(tmp_path, str(archive))
    assert code == 0, log[-3000:]
    mapped = log.count(FROM_THE_ARCHIVE)
    loaded = log.count(" source: ")
    # Spark's, Hadoop's and Parquet's classes come from the archive; what cannot be archived is loaded as before
    # (classes generated at run time, Janino's from its signed jar, the connector jars' of spark.jars).
    assert mapped > 5000 and mapped > loaded // 2, (mapped, loaded)


def test_a_stale_archive_is_ignored_and_the_session_runs(tmp_path):
    stale = tmp_path / "stale.jsa"
    stale.write_bytes(b"not an archive of this JDK")
    code, log = _session_run(tmp_path, str(stale))
    assert code == 0, log[-3000:]
    assert FROM_THE_ARCHIVE not in log
    assert (tmp_path / "out").is_dir()


def test_a_damaged_archive_is_not_moved_into_place(archive, tmp_path, monkeypatch):
    truncated = tmp_path / "truncated.jsa"
    truncated.write_bytes(archive.read_bytes()[: 2**20])
    assert class_archive.opens(archive)
    assert not class_archive.opens(truncated)  # the JVM would crash mapping it: create() checks before the move
    target = tmp_path / "target.jsa"
    # a run that exits 0 leaving a half-written archive behind (a JVM killed while saving it)
    write_half = f"import sys; open(sys.argv[1], 'wb').write(open({str(truncated)!r}, 'rb').read())"
    monkeypatch.setattr(class_archive, "dump_command", lambda work, dump: [sys.executable, "-c", write_half, str(dump)])
    with pytest.raises(class_archive.ArchiveNotCreated, match="cannot open"):
        class_archive.create(target)
    assert not target.exists() and not list(tmp_path.glob(".target.jsa.*"))
