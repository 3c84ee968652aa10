"""Inputs of `airflow-conduit run` checked before anything starts: --faults and --state-dir, each error naming the option."""

from __future__ import annotations

import os

import pytest

from airflow_conduit.pipeline.faults_option import FaultsError, parse_faults
from airflow_conduit.pipeline.state_dir_check import StateDirError, usable_state_dir


# --- --faults ---------------------------------------------------------------------------------------------


def test_valid_faults_pass_through():
    assert parse_faults('{"transient_first_runs": 2}') == {"transient_first_runs": 2}
    assert parse_faults({"fatal": True}) == {"fatal": True}
    assert parse_faults('{"crash_after_destination": {"destination": "lake", "batch": 0}}') == {
        "crash_after_destination": {"destination": "lake", "batch": 0}
    }
    assert parse_faults(None) == parse_faults("") == parse_faults("  ") == parse_faults("null") == {}


@pytest.mark.parametrize(
    "text, names",
    [
        ('{"transient_first_runs": "abc"}', "key 'transient_first_runs': expected a whole number >= 0, got 'abc'"),
        ('{"transient_first_runs": -1}', "key 'transient_first_runs'"),
        ('{"transient_first_runs": true}', "key 'transient_first_runs'"),
        ('{"transient_first_runs": 1.5}', "key 'transient_first_runs'"),
        ('{"fatal": "yes"}', "key 'fatal': expected true or false"),
        ('{"transiant_first_runs": 2}', "unknown key 'transiant_first_runs'; did you mean 'transient_first_runs'?"),
        ('{"crash_after_destination": {"destination": "lake"}}', "missing: batch"),
        ('{"crash_after_destination": {"destination": "", "batch": 1}}', "'crash_after_destination.destination'"),
        ('{"crash_after_destination": {"destination": "lake", "batch": "x"}}', "'crash_after_destination.batch'"),
        ("[1, 2]", "must be a JSON object"),
        ("{oops", "not JSON"),
        ("[" * 50_000, "characters"),
        ("[" * 4_000 + "]" * 4_000, "nested too deeply"),
    ],
)
def test_bad_faults_are_refused_naming_the_key(text, names):
    with pytest.raises(FaultsError) as info:
        parse_faults(text)
    assert str(info.value).startswith("--faults: ")
    assert names in str(info.value)


def test_the_spark_entrypoint_refuses_the_same_faults():
    from airflow_conduit.spark.faults import parse_faults as driver_parse

    with pytest.raises(ValueError, match="key 'transient_first_runs'"):
        driver_parse('{"transient_first_runs": "abc"}')


# --- --state-dir --------------------------------------------------------------------------------------------


def test_relative_state_dir_becomes_absolute_and_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = usable_state_dir("relstate")
    assert path == str(tmp_path / "relstate") and os.path.isdir(path)
    assert os.listdir(path) == []  # the write check leaves nothing behind


@pytest.mark.parametrize("value", ["", "   ", None])
def test_empty_state_dir_is_refused(value):
    with pytest.raises(StateDirError, match="--state-dir: empty path"):
        usable_state_dir(value)


def test_a_file_is_not_a_state_dir(tmp_path):
    file = tmp_path / "spec.yaml"
    file.write_text("x")
    with pytest.raises(StateDirError, match=f"{file} exists and is not a directory"):
        usable_state_dir(str(file))
    with pytest.raises(StateDirError, match=f"cannot create {file}/sub"):
        usable_state_dir(str(file / "sub"))


@pytest.mark.parametrize("value", ["/proc/conduit-state", "/proc/self", "/sys/conduit", "/dev/shm/../conduit"])
def test_virtual_file_systems_are_refused(value):
    with pytest.raises(StateDirError, match="a virtual file system"):
        usable_state_dir(value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_unwritable_state_dir_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StateDirError, match=f"cannot write in {locked}"):
            usable_state_dir(str(locked))
        with pytest.raises(StateDirError, match="cannot create"):
            usable_state_dir(str(locked / "sub"))
    finally:
        locked.chmod(0o700)


def test_unwritable_state_dir_is_refused_even_for_root(tmp_path):
    # A read-only bind is not available here; a folder whose parent is a file fails for root too.
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(StateDirError, match="cannot create"):
        usable_state_dir(str(blocker / "state"))


def test_missing_state_dir_without_create_is_refused(tmp_path):
    with pytest.raises(StateDirError, match="does not exist"):
        usable_state_dir(str(tmp_path / "nope"), create=False)


def test_the_driver_refuses_bad_faults_once_as_invalid_input(tmp_path, capsys):
    """Before: int("abc") failed inside every run, classified transient, restarted for ever. Now exit 78, fatal 2100."""
    import json

    from airflow_conduit.spark import entrypoint

    spec = tmp_path / "pipeline.yaml"
    spec.write_text("unused: the faults are checked first\n")
    code = entrypoint.main(
        ["--spec", str(spec), "--run-id", "r1", "--state-dir", str(tmp_path / "state"), "--faults", '{"transient_first_runs": "abc"}']
    )
    assert code == 78
    report = json.loads((tmp_path / "state" / "runs" / "r1" / "report.json").read_text())
    assert (report["error"]["code"], report["error"]["fatal"]) == (2100, True)
    assert "transient_first_runs" in report["error"]["message"]
    assert "AIRFLOW_CONDUIT_ERROR" in capsys.readouterr().err
