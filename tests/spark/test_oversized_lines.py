"""A line too long to read never reaches a JVM whole: the reader skips it, the DLQ names it with a prefix.

Real runner, real local Spark, real files; the in-process tests use a small ``max-string-length`` (the line bound is
it plus 1 MiB), the spark-submit test a 100 MB record under a 512 MB driver heap (driver and executors share it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_conduit.runs.report import RunReport, report_path
from airflow_conduit.spark import oversized_lines
from airflow_conduit.spark.runner import execute
from spark_helpers import dlq_file, file_dest, file_source, good, pipeline, read_json_rows

pytestmark = pytest.mark.spark

TOO_LARGE = "airflow_conduit.spark.RecordTooLargeError"


def _write(path: Path, lines: list[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_bytes(b"".join(line + b"\n" for line in lines))
    os.replace(tmp, path)
    return path


def _dlq_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.rglob("*.json")) for line in f.read_text().splitlines() if line]


def test_a_line_over_the_bound_goes_to_the_dlq_with_its_line_and_prefix_and_later_lines_keep_their_numbers(spark, tmp_path):
    huge = b'{"id": 2, "name": "' + b"x" * (oversized_lines.LINE_SLACK + 2000) + b'", "amount": 2.0}'
    _write(tmp_path / "in" / "a.json", [good(1).encode(), huge, good(3).encode(), b'{"id": 4, "name": "n4", "amount": 4',
                                        b"", good(5).encode()])
    spec = pipeline("oversized", [file_source(tmp_path / "in", **{"max-string-length": 1000})],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 3, 5]
    rows = sorted(_dlq_rows(tmp_path / "dlq"), key=lambda r: r["source_position"])
    assert [(r["source_position"], r["exception_class"]) for r in rows] == [
        (2, TOO_LARGE), (4, "airflow_conduit.spark.MalformedRecordError")]
    big = rows[0]
    assert big["source_file"].endswith("/in/a.json") and big["stage"] == "source" and big["component_id"] == "in"
    assert len(big["record"]) == oversized_lines.PREFIX_BYTES and huge.decode().startswith(big["record"])
    assert f"line 2 is {len(huge) + 1:,} bytes long" in big["exception_message"]
    assert rows[1]["record"] == '{"id": 4, "name": "n4", "amount": 4'  # its own line, found past the skipped one
    assert report.totals["read"] == 5 and report.totals["dlq"] == 2  # every record one fate


def test_a_file_of_only_a_too_long_line_still_commits_its_dlq_record(spark, tmp_path):
    huge = b'{"id": 1, "name": "' + b"y" * (oversized_lines.LINE_SLACK + 10) + b'"}'
    _write(tmp_path / "in" / "a.json", [huge])
    spec = pipeline("oversized-alone", [file_source(tmp_path / "in", **{"max-string-length": 10})],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq"))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == 0 and report.totals["read"] == 1 and report.totals["dlq"] == 1
    [row] = _dlq_rows(tmp_path / "dlq")
    assert row["exception_class"] == TOO_LARGE and row["source_position"] == 1


def test_scan_finds_each_too_long_line_whatever_the_pieces():
    data = b"ab\n" + b"z" * 10 + b"\ncd\n" + b"w" * 12
    for size in (1, 3, 5, 100):
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        found = oversized_lines.scan(iter(pieces), 10, "f")
        assert [(f.number, f.start, f.length) for f in found] == [(2, 3, 11), (4, 17, 12)]
        assert found[0].prefix == b"z" * 10


def _write_100_mb_record_between_two_good_ones(folder: Path) -> None:
    folder.mkdir()
    tmp = folder / ".a.json.tmp"
    with tmp.open("wb") as f:
        f.write(good(1).encode() + b"\n")
        f.write(b'{"id": 2, "name": "')
        chunk = b"v" * (1 << 20)
        for _ in range(100):
            f.write(chunk)
        f.write(b'", "amount": 2.0}\n')
        f.write(good(3).encode() + b"\n")
    os.replace(tmp, folder / "a.json")


def _run_cli(tmp_path: Path, **source_settings) -> tuple[subprocess.CompletedProcess, Path]:
    """``airflow-conduit run`` (spark-submit, local[4]) with a 512 MB driver heap, no restarts; (result, state dir)."""
    spec = {
        "version": "1",
        "pipeline": {
            "id": "big-record",
            "mode": "available-now",
            "sources": [{"id": "in", "plugin": "builtin:file", "settings": {
                "path": str(tmp_path / "in"), "format": "json", "schema": "id BIGINT NOT NULL, name STRING, amount DOUBLE",
                **source_settings}}],
            "destinations": [{"id": "out", "plugin": "builtin:file",
                              "settings": {"path": str(tmp_path / "out"), "format": "json"}}],
            # bad records tolerated (the default window stops the pipeline at the first, this one included)
            "dead-letter-queue": {"plugin": "builtin:file", "settings": {"path": str(tmp_path / "dlq"), "format": "json"},
                                  "window-size": 0},
        },
    }
    spec_file = tmp_path / "pipeline.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    state = tmp_path / "state"
    env = {**os.environ, "SPARK_DRIVER_MEMORY": "512m"}  # spark-submit's launcher reads it (client mode)
    done = subprocess.run(
        [sys.executable, "-m", "airflow_conduit.cli.main", "run", str(spec_file), "--state-dir", str(state),
         "--master", "local[4]", "--max-retries", "0"],
        capture_output=True, text=True, timeout=1400, env=env,
    )
    return done, state


def test_a_100_mb_record_under_a_512_mb_heap_goes_to_the_dlq_and_the_good_records_land(tmp_path):
    """The real CLI and spark-submit: 100 MB is 5x the heap share of each of the JVM's 4 task slots (512 MB / 4)."""
    _write_100_mb_record_between_two_good_ones(tmp_path / "in")
    done, state = _run_cli(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = [json.loads(line) for f in (tmp_path / "out").rglob("*.json") for line in f.read_text().splitlines() if line]
    assert sorted(r["id"] for r in out) == [1, 3]
    [row] = _dlq_rows(tmp_path / "dlq")
    assert row["exception_class"] == TOO_LARGE and row["source_position"] == 2
    assert row["record"].startswith('{"id": 2, "name": "vvv') and len(row["record"]) == oversized_lines.PREFIX_BYTES
    [run] = [p.name for p in (state / "runs").iterdir()]
    report = RunReport.read(report_path(state, run))
    assert report.status == "succeeded" and report.totals["read"] == 3 and report.totals["dlq"] == 1


def test_a_jvm_that_still_runs_out_of_memory_degrades_the_pipeline_with_the_cause_not_a_clean_stop(tmp_path):
    """``max-string-length`` raised past what the heap holds: the line is read whole and the JVM dies (Spark exit 52,
    its Python driver ended by SIGTERM). That is fatal 2800 naming the OutOfMemoryError, never "stopped", exit 0."""
    _write_100_mb_record_between_two_good_ones(tmp_path / "in")
    done, state = _run_cli(tmp_path, **{"max-string-length": 2_000_000_000})
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]  # degraded
    said = done.stdout + done.stderr
    assert "fatal 2800" in said and "java.lang.OutOfMemoryError" in said
    assert "stopped:" not in said
    recovery = json.loads((state / "recovery.json").read_text())
    assert "2800" in json.dumps(recovery)


def test_scan_ends_lines_where_hadoop_does_and_numbers_them_as_sed_does():
    """``\\n``, ``\\r\\n`` and a lone ``\\r`` end a line (a long run of short lone-``\\r`` lines is no long line); the
    number is the physical line's; pieces bigger or smaller than the bound give the same answer."""
    data = (b"a\r\n" + b"L" * 30 + b"\r\n" + (b"s\r" * 20) + b"\n" + b"M" * 25 + b"\r" + b"t\n" + b"N" * 40)
    for size in (1, 2, 7, 16, 1000):
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        found = oversized_lines.scan(iter(pieces), 20, "f")
        assert [(f.number, f.length, f.prefix[:1]) for f in found] == [(2, 32, b"L"), (4, 26, b"M"), (5, 40, b"N")], size


def test_a_too_long_line_counts_in_the_nack_window_like_any_bad_record(spark, tmp_path):
    from airflow_conduit.recovery import codes

    huge = b'{"id": 2, "name": "' + b"z" * (oversized_lines.LINE_SLACK + 100) + b'"}'
    _write(tmp_path / "in" / "a.json", [good(1).encode(), huge, b"{bad", good(4).encode()])
    spec = pipeline("oversized-window", [file_source(tmp_path / "in", **{"max-string-length": 10})],
                    [file_dest(tmp_path / "out")], dlq=dlq_file(tmp_path / "dlq", size=10, threshold=1))
    code, report = execute(spark, spec, state_dir=tmp_path / "state", run_id="r1")
    assert code == codes.EXIT_FATAL and report.error["code"] == codes.DLQ_NACK_THRESHOLD  # 2 nacks in 4 records
    assert sorted(r["id"] for r in read_json_rows(spark, tmp_path / "out")) == [1, 4]  # the batch was committed
    assert sorted((r["source_position"], r["exception_class"]) for r in _dlq_rows(tmp_path / "dlq")) == [
        (2, TOO_LARGE), (3, "airflow_conduit.spark.MalformedRecordError")]
