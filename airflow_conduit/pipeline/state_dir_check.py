"""Is this a usable state directory? Checked once, before anything is submitted.

A state directory holds checkpoints, commit markers and run reports across restarts, so a bad
one must stop the run at once with a message naming it, not as a traceback (a file, a folder
under /proc, an unwritable folder) nor as a Spark job that fails on every restart (a relative
path that the driver, started in another working directory, reads differently). The path
returned is absolute: callers pass it on, never the text the user typed.
"""

from __future__ import annotations

import os
import tempfile

VIRTUAL_FILE_SYSTEMS = ("/proc", "/sys", "/dev")


class StateDirError(ValueError):
    """The state directory cannot be used; the message names the option and the path."""

    def __init__(self, problem: str, option: str = "--state-dir"):
        super().__init__(f"{option}: {problem}")
        self.problem = problem
        self.option = option


def usable_state_dir(value: str | os.PathLike | None, *, option: str = "--state-dir", create: bool = True) -> str:
    """The absolute path of a directory this process can write (created when missing and ``create``)."""
    text = "" if value is None else os.fspath(value)
    if not text.strip():
        raise StateDirError("empty path; give the pipeline's state directory, e.g. ./state", option)
    if "\x00" in text:
        raise StateDirError(f"{text!r} contains a NUL character", option)
    path = os.path.abspath(os.path.expanduser(text))
    real = os.path.realpath(path)
    for root in VIRTUAL_FILE_SYSTEMS:
        if real == root or real.startswith(root + os.sep):
            raise StateDirError(f"{path} is under {root}, a virtual file system; choose a directory on disk", option)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise StateDirError(f"{path} exists and is not a directory", option)
    if not os.path.isdir(path):
        if not create:
            raise StateDirError(f"{path} does not exist", option)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise StateDirError(f"cannot create {path}: {_why(exc)}", option) from None
    try:  # os.access says yes to root everywhere; a real write also catches read-only mounts
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise StateDirError(f"cannot write in {path}: {_why(exc)}", option) from None
    return path


def _why(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
