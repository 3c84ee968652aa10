"""An output folder has one owner (runs/output_owner.py), a full state dir keeps recovery.json truthful
(runs/state_dir.py), a moved checkpoint is named (spark/checkpoint_paths.py: pure, no Spark needed)."""

from __future__ import annotations

import errno
import json
import shutil

import pytest

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.classify import classify
from airflow_conduit.runs.events import WatchEvent
from airflow_conduit.runs.output_owner import OWNER_FILE, OutputOwnedElsewhere, claim, state_dir_owner
from airflow_conduit.runs.state_dir import RESERVE_FILE, StateDir, StateDirFull
from airflow_conduit.spark.checkpoint_paths import CheckpointMoved, check_sources, input_folder


def test_the_first_pipeline_owns_the_folder_and_a_second_one_is_refused_naming_both(tmp_path):
    first, second = state_dir_owner(tmp_path / "a", "orders"), state_dir_owner(tmp_path / "b", "orders-b")
    out = tmp_path / "out"
    claim(out, first, what="destination 'lake' (path)", written_before=False)
    (out / "batch_id=0").mkdir()
    claim(out, first, what="destination 'lake' (path)", written_before=False)  # its own: again and again
    with pytest.raises(OutputOwnedElsewhere) as refused:
        claim(out, second, what="destination 'lake' (path)", written_before=False)
    assert refused.value.code == codes.OUTPUT_OWNED_ELSEWHERE == 2650
    text = str(refused.value)
    assert f"destination 'lake' (path) {out} is the output of pipeline 'orders' (state dir {tmp_path / 'a'})" in text
    assert f"pipeline 'orders-b' (state dir {tmp_path / 'b'})" in text
    assert json.loads((out / OWNER_FILE).read_text())["pipeline_id"] == "orders"  # the marker left as it was


def test_the_same_spec_with_a_new_state_dir_is_another_owner(tmp_path):
    claim(tmp_path / "out", state_dir_owner(tmp_path / "state", "orders"), what="x", written_before=False)
    shutil.rmtree(tmp_path / "state")  # batch numbers would start at 0 again: batch_id=0.. replaced
    with pytest.raises(OutputOwnedElsewhere):
        claim(tmp_path / "out", state_dir_owner(tmp_path / "state", "orders"), what="x", written_before=False)


def test_data_without_a_marker_is_refused_unless_this_state_dir_wrote_it(tmp_path):
    out = tmp_path / "out"
    (out / "batch_id=3").mkdir(parents=True)
    owner = state_dir_owner(tmp_path / "state", "orders")
    with pytest.raises(OutputOwnedElsewhere, match=r"already holds data that pipeline 'orders' .* did not write \(batch_id=3\)"):
        claim(out, owner, what="dead-letter-queue (path)", written_before=False)
    assert not (out / OWNER_FILE).exists()
    claim(out, owner, what="dead-letter-queue (path)", written_before=True)  # its commit markers say it wrote them
    assert json.loads((out / OWNER_FILE).read_text())["token"] == owner.token


def test_a_moved_state_dir_keeps_its_outputs(tmp_path):
    owner = state_dir_owner(tmp_path / "p" / "state", "orders")
    claim(tmp_path / "p" / "out", owner, what="x", written_before=False)
    shutil.move(str(tmp_path / "p"), str(tmp_path / "q"))
    moved = state_dir_owner(tmp_path / "q" / "state", "orders")
    assert moved.token == owner.token
    claim(tmp_path / "q" / "out", moved, what="x", written_before=False)
    assert json.loads((tmp_path / "q" / "out" / OWNER_FILE).read_text())["state_dir"] == str(tmp_path / "q" / "state")


def _full(path):
    raise OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_full_disk_releases_the_reserve_so_recovery_json_still_says_degraded(tmp_path, monkeypatch):
    from airflow_conduit.runs import state_dir as module

    folder = StateDir(tmp_path)
    folder.write_recovery({"pipeline_state": "running"})
    assert (tmp_path / RESERVE_FILE).stat().st_size == module.RESERVE_BYTES
    real, calls = module.write_json_atomic, []

    def full_until_room(path, data, **kw):  # the disk is full until the reserve is given back
        calls.append(path)
        if (tmp_path / RESERVE_FILE).exists():
            _full(path)
        return real(path, data, **kw)

    monkeypatch.setattr(module, "write_json_atomic", full_until_room)
    folder.write_recovery({"pipeline_state": "degraded"})
    assert folder.read_recovery()["pipeline_state"] == "degraded" and len(calls) == 2
    assert not (tmp_path / RESERVE_FILE).exists()
    # no reserve left and no room for a new file: recovery.json is written again in its own blocks
    monkeypatch.setattr(module, "write_json_atomic", lambda path, data, **kw: _full(path))
    folder.write_recovery({"pipeline_state": "stopped"})
    assert folder.read_recovery()["pipeline_state"] == "stopped"
    (tmp_path / "recovery.json").unlink()  # nothing to write over either: a named error, never an internal one
    with pytest.raises(StateDirFull, match=rf"no space left on device: the file system of {tmp_path} is full"):
        folder.write_recovery({"pipeline_state": "running"})


def test_a_submission_refused_for_a_full_disk_is_fatal_2640_naming_the_path():
    cause = OSError(errno.ENOSPC, "No space left on device", "/state/runs/r1")
    try:
        raise RuntimeError("run r1 could not be started on this machine") from cause
    except RuntimeError as exc:
        event = WatchEvent.submission_refused("r1", exc)
    assert event.error["code"] == codes.NO_SPACE_LEFT and event.error["fatal"] is True
    assert "no space left on device" in event.error["message"] and "(at /state/runs/r1)" in event.error["message"]
    java = classify("java.io.IOException: No space left on device\n\tat java.io.FileOutputStream.writeBytes")
    assert (java.code, java.fatal) == (codes.NO_SPACE_LEFT, True)


def _checkpoint_with(tmp_path, files):
    log = tmp_path / "state" / "checkpoints" / "pipeline" / "sources" / "0"
    log.mkdir(parents=True)
    (log / "0").write_text("v1\n" + "".join(json.dumps({"path": f"file://{f}", "timestamp": 1, "batchId": 0}) + "\n" for f in files))
    return log.parent.parent


def test_a_checkpoint_that_read_files_elsewhere_is_named_with_what_moved(tmp_path):
    checkpoint = _checkpoint_with(tmp_path, ["/old/place/orders/data/in/a.jsonl"])
    check_sources(checkpoint, [(0, "in", "/old/place/orders/data/in")])  # not moved
    check_sources(checkpoint, [(0, "in", "/old/place/orders/data/in/*.jsonl")])  # a glob: its folder
    with pytest.raises(CheckpointMoved) as moved:
        check_sources(checkpoint, [(0, "in", "/new/spot/orders/data/in")])
    assert moved.value.code == codes.CHECKPOINT_MOVED == 2630
    assert "the pipeline's files moved from /old/place to /new/spot" in str(moved.value)
    assert len(str(moved.value)) < 500  # an error's summary keeps 500 characters
    assert classify("java.lang.IllegalArgumentException: Wrong basePath file:/a for the root path: file:/b").code == 2630


def test_input_folder_of_a_path_setting():
    assert input_folder("file:///data/in") == "/data/in"
    assert input_folder("/data/in/2026-*/x.json") == "/data/in"
    assert input_folder("s3a://bucket/in") is None
