"""What an input-file check stats and writes per batch: counts, with a fake clock and real files.

A batch stats the files it reads and the unsettled ones (modified within ``SETTLE_MS`` of a stat), every
file read only at a run's start and end and once per ``SWEEP_SECONDS``; the ledger is rewritten only when
it changed. Appends are still found: an unsettled file's at the next batch, a settled file's at the next
sweep or full check (spark/input_files.py; the real runner's checks: tests/spark/test_input_files.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow_conduit.spark import input_files as inf
from airflow_conduit.spark.input_files import InputFiles

HOUR_MS = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _deliver(folder: Path, checkpoint: Path, batch_id: int, names: list[str], *, age_ms: int) -> list[Path]:
    """Files written ``age_ms`` ago, and Spark's source log entry of the batch that lists them."""
    folder.mkdir(parents=True, exist_ok=True)
    log = checkpoint / "sources" / "0"
    log.mkdir(parents=True, exist_ok=True)
    files, lines = [], ["v1"]
    for name in names:
        path = folder / name
        path.write_text('{"id": 1}\n')
        mtime_ns = (path.stat().st_mtime_ns // 1_000_000 - age_ms) * 1_000_000
        os.utime(path, ns=(mtime_ns, mtime_ns))
        lines.append(json.dumps({"path": path.as_uri(), "timestamp": mtime_ns // 1_000_000, "batchId": batch_id}))
        files.append(path)
    (log / str(batch_id)).write_text("\n".join(lines) + "\n")
    return files


def _counting():
    stats: list[str] = []

    def stat(uri: str):
        stats.append(uri)
        return inf.local_stat(uri)

    return stats, stat


def _writes(monkeypatch) -> list[str]:
    written: list[str] = []
    real = inf.write_json_atomic
    monkeypatch.setattr(inf, "write_json_atomic", lambda path, data, **kw: (written.append(Path(path).name), real(path, data, **kw)))
    return written


def test_a_batch_stats_only_its_own_files_when_the_files_read_before_are_settled(tmp_path, monkeypatch):
    clock, (stats, stat) = Clock(), _counting()
    written = _writes(monkeypatch)
    files = InputFiles(tmp_path / "state", stat, clock=clock)
    files.check(every_file=True)  # the run's start: nothing read yet
    checkpoint = tmp_path / "cp"
    for batch in range(6):
        clock.now += 1
        _deliver(tmp_path / "in", checkpoint, batch, [f"{batch}-a.json", f"{batch}-b.json"], age_ms=HOUR_MS)
        del stats[:], written[:]
        files.note_batch(checkpoint, batch)
        assert files.check() == []
        files.save()
        assert len(stats) == 2, f"batch {batch} stat'd {stats}: only the 2 files it reads"
        assert written == ["read.json"], "only the ledger of files read changed"
    del stats[:], written[:]
    files.save()
    assert written == [], "nothing changed: nothing written"
    assert files.check(every_file=True) == [] and len(stats) == 12  # a run's end: every file read


def test_an_unsettled_file_is_checked_at_every_batch_and_an_append_to_it_found_at_the_next(tmp_path):
    clock, (stats, stat) = Clock(), _counting()
    files = InputFiles(tmp_path / "state", stat, clock=clock)
    checkpoint = tmp_path / "cp"
    [fresh] = _deliver(tmp_path / "in", checkpoint, 0, ["fresh.json"], age_ms=0)  # just written: may still grow
    files.note_batch(checkpoint, 0)
    files.check()
    clock.now += 1
    _deliver(tmp_path / "in", checkpoint, 1, ["old.json"], age_ms=HOUR_MS)
    files.note_batch(checkpoint, 1)
    del stats[:]
    assert files.check() == [] and stats == [fresh.as_uri()], "the unsettled file, not the settled one"
    with fresh.open("a") as f:
        f.write('{"id": 2}\n')
    clock.now += 1
    [found] = files.check()
    assert found["file"] == fresh.as_uri() and found["size_now"] == fresh.stat().st_size
    files.save()
    assert json.loads((tmp_path / "state" / "input-files" / "changed.json").read_text())[fresh.as_uri()] == found


def test_an_append_to_a_settled_file_is_found_at_the_next_sweep_and_at_a_full_check(tmp_path):
    clock, (stats, stat) = Clock(), _counting()
    files = InputFiles(tmp_path / "state", stat, clock=clock, sweep_seconds=60)
    checkpoint = tmp_path / "cp"
    [old] = _deliver(tmp_path / "in", checkpoint, 0, ["old.json"], age_ms=HOUR_MS)
    files.note_batch(checkpoint, 0)
    files.check()  # the first check of a run is a full one
    with old.open("a") as f:
        f.write('{"id": 2}\n')
    os.utime(old, ns=(old.stat().st_mtime_ns - HOUR_MS * 500_000,) * 2)  # still an old modification time
    clock.now += 59
    del stats[:]
    assert files.check() == [] and stats == [], "settled and no sweep due: not stat'd"
    clock.now += 1
    [found] = files.check()  # the sweep is due
    assert found["file"] == old.as_uri() and found["read_bytes"] < found["size_now"]

    again = InputFiles(tmp_path / "state2", stat, clock=clock)  # the same append, found by a run's full check
    _deliver(tmp_path / "in2", tmp_path / "cp2", 0, ["old.json"], age_ms=HOUR_MS)
    again.note_batch(tmp_path / "cp2", 0)
    again.check()
    with (tmp_path / "in2" / "old.json").open("a") as f:
        f.write('{"id": 2}\n')
    os.utime(tmp_path / "in2" / "old.json", ns=((tmp_path / "in2" / "old.json").stat().st_mtime_ns - HOUR_MS * 500_000,) * 2)
    assert again.check() == []
    assert len(again.check(every_file=True)) == 1


def test_a_restart_checks_every_file_of_the_ledger_and_rewrites_nothing_unchanged(tmp_path, monkeypatch):
    clock, (stats, stat) = Clock(), _counting()
    first = InputFiles(tmp_path / "state", stat, clock=clock)
    _deliver(tmp_path / "in", tmp_path / "cp", 0, ["a.json", "b.json"], age_ms=HOUR_MS)
    first.note_batch(tmp_path / "cp", 0)
    first.check()
    first.save()
    written = _writes(monkeypatch)
    restarted = InputFiles(tmp_path / "state", stat, clock=clock)
    del stats[:]
    assert restarted.check(every_file=True) == [] and len(stats) == 2
    restarted.save()
    assert written == []


def test_the_cli_prints_each_input_file_finding_of_its_runs_once(tmp_path, capsys):
    """The appended-lines finding is in the driver log and the report; `airflow-conduit run` prints it too."""
    from airflow_conduit.cli.run_cmd import _say_input_file_findings
    from airflow_conduit.runs.report import RunReport, report_path
    from airflow_conduit.runs.state_dir import StateDir

    finding = {"file": "file:/data/in/a.json", "batch_id": 0, "read_bytes": 1200, "read_mtime_ms": 1, "size_now": 1260,
               "mtime_now_ms": 2, "detected_at": "2026-01-01T00:00:00Z"}
    for run_id in ("r1", "r2"):  # a restart reports it again: printed once
        report = RunReport(pipeline_id="p", run_id=run_id)
        report.input_files_changed = [finding]
        path = report_path(tmp_path, run_id)
        path.parent.mkdir(parents=True)
        report.write_atomic(path)

    class Runs:
        def run_ids(self):
            return ["r1", "r2", "never-started"]

    _say_input_file_findings(StateDir(tmp_path), Runs())
    out = capsys.readouterr().out.splitlines()
    assert out == [out[0]] and out[0].startswith("WARNING INPUT_FILE_CHANGED: input file file:/data/in/a.json")
    assert "bytes 1,200..1,260 (end excluded) were not processed" in out[0]


def test_what_a_batch_read_of_a_file_listed_mid_line_ends_at_a_line_end(tmp_path):
    """Hadoop's line reader reads each line starting at or before the listed end to its line end."""
    from airflow_conduit.spark.input_files import needs_settling, processed_to

    f = tmp_path / "a.json"
    f.write_bytes(b"l1\nline2\nl3\n")
    uri = f"file:{f}"
    assert processed_to(uri, 5) == 9  # mid "line2": to its end
    assert processed_to(uri, 3) == 9  # "line2" starts at the listed end: read too
    assert processed_to(uri, 12) == 12  # all of it
    assert not needs_settling(uri, 12) and needs_settling(uri, 5) and needs_settling(uri, 9)  # grew since
    f.write_bytes(b"l1\nhalf")
    assert needs_settling(uri, 7) and processed_to(uri, 7) == 7  # no line end yet: the end of the file
