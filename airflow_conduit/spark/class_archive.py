"""The driver JVM's class data sharing archive, made by ``make install`` (``python -m airflow_conduit.spark.class_archive``).

It runs one small pipeline with spark-submit, as a run does (a JSON file source with bad records, processors, a
Parquet destination, a JSON DLQ), with ``-XX:ArchiveClassesAtExit``: at its exit the JVM saves every class it loaded
from the JDK and Spark's jars. Runs then map them (``jvm.with_class_archive``). The archive belongs to this machine's
JDK and jars, so it is made here and never shipped; it is written under another name and moved into place only once
the JVM that wrote it exited cleanly and a JVM has opened it (a half-written archive crashes the JVM that maps it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from airflow_conduit.spark.jvm.options import class_archive_path
from airflow_conduit.spark.packaging import entrypoint_path

TIMEOUT_SECONDS = 900.0
SPEC = """\
version: "1"
pipeline:
  id: class-archive
  mode: available-now
  sources:
    - id: orders
      plugin: builtin:file
      settings:
        path: in
        format: json
        schema: "id INT NOT NULL, customer STRING NOT NULL, amount DOUBLE, currency STRING, ts TIMESTAMP, payload STRING"
      processors:
        - {id: currency, plugin: field.set, settings: {field: currency, value: "coalesce(currency, 'EUR')"}}
  processors:
    - {id: decode, plugin: json.decode, settings: {field: payload, schema: "channel STRING, items INT", target: details}}
    - {id: keep, plugin: filter, settings: {condition: "customer <> 'test'"}}
    - {id: enrich, plugin: sql, settings: {select: ["*", "round(amount * 100) AS amount_cents", "to_date(ts) AS day"]}}
    - {id: tidy, plugin: field.exclude, settings: {fields: [payload]}}
  destinations:
    - {id: lake, plugin: builtin:file, settings: {path: out/lake, format: parquet}}
  dead-letter-queue:
    plugin: builtin:file
    settings: {path: out/dlq, format: json}
    window-size: 0
    window-nack-threshold: 0
"""
LINES = [
    '{"id": 1, "customer": "ada", "amount": 12.5, "currency": "USD", "ts": "2026-01-02T10:00:00Z", "payload": "{\\"channel\\": \\"web\\", \\"items\\": 2}"}',
    '{"id": 2, "customer": "bo", "amount": 3.0, "ts": "2026-01-02T11:00:00Z", "payload": "{\\"channel\\": \\"shop\\", \\"items\\": 1}"}',
    '{"id": 3, "customer": "test", "amount": 1.0, "currency": "EUR", "ts": "2026-01-02T12:00:00Z", "payload": "{}"}',
    '{"id": 4, "customer": "cy", "amount": "many", "currency": "EUR", "ts": "2026-01-02T13:00:00Z", "payload": "{}"}',
    '{"id": 5, "amount": 2.0, "currency": "EUR", "ts": "2026-01-02T14:00:00Z", "payload": "{}"}',
    '{"id": 6, "customer": "di", "amount": 9.0, "currency": "EUR", "ts": "2026-01-02T15:00:00Z", "payload": "not json"}',
    '{"id": 7, "customer": ',
]


class ArchiveNotCreated(RuntimeError):
    """The archive could not be made; runs start without one."""


def _binary(name: str, *, java_home: bool = False) -> str:
    """``name`` from JAVA_HOME (for java), else PATH, else beside this Python (the pyspark wheel's spark-submit)."""
    home = os.environ.get("JAVA_HOME") if java_home else None
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.exists() else name)


def dump_command(work: Path, dump: Path) -> list[str]:
    """spark-submit of the entrypoint on the small pipeline in ``work``, its driver saving its classes to ``dump``."""
    return [_binary("spark-submit"), "--master", "local[2]",
            "--conf", f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={dump} -Xlog:cds=off -Xlog:cds+dynamic=off",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
            entrypoint_path(), "--spec", str(work / "pipeline.yaml"), "--run-id", "class-archive", "--state-dir", str(work / "state")]


def opens(archive: Path) -> bool:
    """Whether a JVM starts with ``archive`` mapped or refused (a damaged archive crashes it instead)."""
    with tempfile.TemporaryDirectory(prefix="conduit-class-archive-check-") as tmp:  # a crash's hs_err file goes there
        done = subprocess.run([_binary("java", java_home=True), f"-XX:SharedArchiveFile={archive}", "-XX:-CreateCoredumpOnCrash",
                               "-version"], capture_output=True, timeout=120, cwd=tmp)
    return done.returncode == 0


def create(target: Path | None = None, *, timeout: float = TIMEOUT_SECONDS) -> Path:
    """Make the archive at ``target`` (default ``jvm.class_archive_path()``), replacing an older one; its absolute path."""
    target = target if target is not None else class_archive_path()
    if target is None:
        raise ArchiveNotCreated("no archive path: AIRFLOW_CONDUIT_CLASS_ARCHIVE is set empty")
    target = target.absolute()  # the run that saves the classes works in a folder of its own
    target.parent.mkdir(parents=True, exist_ok=True)
    dump = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tempfile.TemporaryDirectory(prefix="conduit-class-archive-") as tmp:
            work = Path(tmp)
            (work / "in").mkdir()
            (work / "in" / "orders.jsonl").write_text("\n".join(LINES) + "\n", encoding="utf-8")
            (work / "pipeline.yaml").write_text(SPEC, encoding="utf-8")
            env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
                   "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable)}
            env.pop("PYSPARK_GATEWAY_PORT", None)
            done = subprocess.run(dump_command(work, dump), cwd=str(work), env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not dump.is_file():
            raise ArchiveNotCreated(f"the run that saves the classes exited {done.returncode}: {done.stderr[-2000:]}")
        if not opens(dump):
            raise ArchiveNotCreated(f"a JVM cannot open the archive {dump}")
        os.replace(dump, target)
    except subprocess.TimeoutExpired as exc:
        raise ArchiveNotCreated(f"the run that saves the classes took over {exc.timeout:.0f} s") from exc
    finally:
        dump.unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_conduit.spark.class_archive", description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=None, help="where to save it (default: $AIRFLOW_CONDUIT_CLASS_ARCHIVE, else under sys.prefix)")
    args = parser.parse_args(argv)
    try:
        path = create(Path(args.path) if args.path else None)
    except ArchiveNotCreated as exc:  # runs work without it, only slower to start
        print(f"class data sharing archive not created ({exc}); runs start without it", file=sys.stderr)
        return 0
    print(f"class data sharing archive: {path} ({path.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
