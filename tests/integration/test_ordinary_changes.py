"""What users do by accident to outputs, specs, folders and disks, with the real runner (`airflow-conduit run`):
every record keeps its one fate, or the run stops with a named error before it writes anything.

- two pipelines sharing an output path: the second is refused (2650), the first one's records all stay;
- a destination added to a pipeline that ran: the run says where it begins;
- a pipeline folder moved: the checkpoint's absolute paths are named (2630), the documented fix goes on exactly;
- a full state dir (a real tmpfs filled up): a named error (2640), recovery.json says degraded, a restart once
  there is room is exact.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import dlq_lines, lake_ids
from test_cli_run import run_cli

pytestmark = pytest.mark.integration

NEW_IDS = [101, 102, 103]  # the good records of the file added between runs


def _expected(orders: Path) -> dict:
    return json.loads((orders / "expected.json").read_text())


def _add_file(folder: Path, name: str = "orders-0003.jsonl", ids: list[int] = NEW_IDS) -> None:
    lines = [json.dumps({"id": i, "customer": f"c{i}", "amount": 1.5, "currency": "EUR", "ts": "2026-11-01T10:00:00Z",
                         "payload": json.dumps({"channel": "web", "items": 1})}) for i in ids]
    (folder / name).write_text("\n".join(lines) + "\n")


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_a_second_pipeline_on_the_first_ones_output_paths_is_refused_before_it_writes(orders):
    expected = _expected(orders)
    _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state-a"), "--poll-interval", "1"))
    lake, dlq = orders / "out" / "lake", orders / "out" / "dlq"
    before = sorted(str(p.relative_to(orders)) for p in (orders / "out").rglob("*") if p.is_file())

    # a second spec: its own id, state dir and inputs, the same out/lake and out/dlq
    (orders / "data" / "in-b").mkdir()
    _add_file(orders / "data" / "in-b", "b-0001.jsonl", [201, 202, 203, 204, 205])
    spec_b = (orders / "pipeline.yaml").read_text().replace("id: orders\n", "id: orders-b\n").replace("path: data/in\n", "path: data/in-b\n")
    assert "orders-b" in spec_b and "data/in-b" in spec_b
    (orders / "pipeline-b.yaml").write_text(spec_b)
    result = run_cli(str(orders / "pipeline-b.yaml"), "--state-dir", str(orders / "state-b"), "--poll-interval", "1")

    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "classified as fatal, code 2650" in result.stdout
    error = result.stderr
    assert f"destination 'lake' (path) {lake} is the output of pipeline 'orders' (state dir {orders / 'state-a'})" in error
    assert f"pipeline 'orders-b' (state dir {orders / 'state-b'})" in error
    record = json.loads((orders / "state-b" / "recovery.json").read_text())
    assert record["pipeline_state"] == "degraded" and record["last_event"]["error"]["code"] == 2650
    # nothing of the second pipeline was written; every record of the first is there once
    after = sorted(str(p.relative_to(orders)) for p in (orders / "out").rglob("*") if p.is_file())
    assert after == before
    assert lake_ids(lake) == sorted(expected["written_ids"])
    assert len(dlq_lines(dlq)) == len(expected["dlq"])
    # the first pipeline still runs on its own outputs
    _add_file(orders / "data" / "in")
    _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state-a"), "--poll-interval", "1"))
    assert lake_ids(lake) == sorted(expected["written_ids"] + NEW_IDS)


def test_a_folder_with_data_no_run_of_this_pipeline_wrote_is_refused(orders):
    (orders / "out" / "lake" / "batch_id=0").mkdir(parents=True)
    (orders / "out" / "lake" / "batch_id=0" / "part-0.parquet").write_bytes(b"not ours")
    result = run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state"), "--poll-interval", "1")
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "classified as fatal, code 2650" in result.stdout
    assert f"{orders / 'out' / 'lake'} already holds data that pipeline 'orders'" in result.stderr
    assert (orders / "out" / "lake" / "batch_id=0" / "part-0.parquet").read_bytes() == b"not ours"
    assert not (orders / "out" / "dlq").exists()  # refused before anything was written


def test_a_destination_added_to_a_pipeline_that_ran_says_where_it_begins(orders):
    expected = _expected(orders)
    _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state"), "--poll-interval", "1"))
    spec = (orders / "pipeline.yaml").read_text()
    lake = "    - id: lake\n      plugin: builtin:file\n      settings:\n        path: out/lake\n        format: parquet\n"
    assert lake in spec
    (orders / "pipeline.yaml").write_text(spec.replace(lake, lake + lake.replace("lake", "lake2")))
    _add_file(orders / "data" / "in")

    out = _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(orders / "state"), "--poll-interval", "1"))
    message = ("destination 'lake2' is new in the spec: it begins at batch 2; batches 0-1, written by earlier runs, "
               "are not written to it")
    assert message in out
    report = next(json.loads(p.read_text()) for p in (orders / "state" / "runs").glob("*/report.json")
                  if json.loads(p.read_text()).get("destinations_added"))
    assert [(n["destination"], n["begins_at_batch"]) for n in report["destinations_added"]] == [("lake2", 2)]
    assert message in (orders / "state" / "runs" / report["run_id"] / "driver.log").read_text(errors="replace")
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"] + NEW_IDS)
    assert lake_ids(orders / "out" / "lake2") == NEW_IDS  # from its first batch on, as said


def test_a_moved_pipeline_folder_is_a_named_fatal_error_and_the_documented_fix_goes_on_exactly(orders, tmp_path):
    expected = _expected(orders)
    _ok(run_cli("pipeline.yaml", "--state-dir", "state", "--poll-interval", "1", cwd=orders))
    moved = tmp_path / "elsewhere" / "orders"
    moved.parent.mkdir()
    shutil.move(str(orders), str(moved))
    _add_file(moved / "data" / "in")

    result = run_cli("pipeline.yaml", "--state-dir", "state", "--poll-interval", "1", "--max-retries", "3", cwd=moved)
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("submitted: run") == 1  # fatal: not restarted
    assert "classified as fatal, code 2630" in result.stdout
    assert f"the pipeline's files moved from {orders.parent} to {moved.parent}" in result.stderr
    assert "Spark's checkpoint keeps the old paths" in result.stderr and "moving a pipeline's folder" in result.stderr
    assert lake_ids(moved / "out" / "lake") == sorted(expected["written_ids"])  # nothing read again

    # the fix docs/sources.md gives: the checkpoint's source logs name the new place, their checksums go
    sources = moved / "state" / "checkpoints" / "pipeline" / "sources"
    fix = (f"cd {sources} && find . -name '.*.crc' -delete && grep -rl 'file://{orders.parent}/' . "
           f"| xargs sed -i 's#file://{orders.parent}/#file://{moved.parent}/#g'")
    subprocess.run(["bash", "-c", fix], check=True)
    _ok(run_cli("pipeline.yaml", "--state-dir", "state", "--poll-interval", "1", cwd=moved))
    assert lake_ids(moved / "out" / "lake") == sorted(expected["written_ids"] + NEW_IDS)  # each record once
    assert len(dlq_lines(moved / "out" / "dlq")) == len(expected["dlq"])


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 16 MiB tmpfs (root may mount one); skipped with the reason where mounting is not permitted."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): needs root or CAP_SYS_ADMIN")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    assert os.statvfs(folder).f_bavail == 0
    return filler


def test_a_full_state_dir_is_a_named_error_and_recovery_json_says_so(orders, small_tmpfs):
    expected = _expected(orders)
    state = small_tmpfs / "state"
    _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(state), "--poll-interval", "1"))
    filler = _fill(small_tmpfs)
    _add_file(orders / "data" / "in")

    result = run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(state), "--poll-interval", "1")
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "classified as fatal, code 2640" in result.stdout
    assert f"no space left on device: a file system the run writes to is full (at {state}" in result.stderr
    assert "this is a bug" not in result.stderr and "internal error" not in result.stderr
    record = json.loads((state / "recovery.json").read_text())
    assert record["pipeline_state"] == "degraded" and record["last_event"]["error"]["code"] == 2640
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"])

    filler.unlink()  # room again: the restart goes on where it stopped, each record once
    _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(state), "--poll-interval", "1"))
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"] + NEW_IDS)
    assert len(dlq_lines(orders / "out" / "dlq")) == len(expected["dlq"])


def test_a_state_dir_that_fills_up_while_the_driver_runs_is_the_same_named_error(orders, small_tmpfs, tmp_path):
    """Room for the run's start (recovery.json's reserve, the code archive) and a few KiB more: the driver runs
    out of space mid-way (its log, checkpoint, report and exit record cannot be written)."""
    from airflow_conduit.runs.state_dir import RESERVE_BYTES
    from airflow_conduit.spark.packaging import build_py_files_archive

    expected = _expected(orders)
    state = small_tmpfs / "state"
    _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(state), "--poll-interval", "1"))
    for old in state.glob("runs/*/airflow_conduit.zip"):
        old.unlink()  # each run keeps its archive: give the room back
    archive = Path(build_py_files_archive(tmp_path / "zip")).stat().st_size
    filler = _fill(small_tmpfs)
    filler.unlink()
    room = os.statvfs(small_tmpfs).f_bavail * os.statvfs(small_tmpfs).f_frsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * (room - archive - 8 * 1024 - (0 if (state / ".recovery-reserve").exists() else RESERVE_BYTES)))
    _add_file(orders / "data" / "in")

    result = run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(state), "--poll-interval", "1")
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "classified as fatal, code 2640" in result.stdout and "no space left on device" in result.stderr
    assert "this is a bug" not in result.stderr and "internal error" not in result.stderr
    record = json.loads((state / "recovery.json").read_text())
    assert record["pipeline_state"] == "degraded" and record["last_event"]["error"]["code"] == 2640

    filler.unlink()
    _ok(run_cli(str(orders / "pipeline.yaml"), "--state-dir", str(state), "--poll-interval", "1"))
    assert lake_ids(orders / "out" / "lake") == sorted(expected["written_ids"] + NEW_IDS)
    assert len(dlq_lines(orders / "out" / "dlq")) == len(expected["dlq"])
