"""A full file system (or quota), found in an exception's chain and said in one line that names the file."""

from __future__ import annotations

import errno
import os

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc``, or an error in its chain, is a full file system (or a full quota)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def no_space_message(exc: BaseException, folder: str | os.PathLike[str] | None = None) -> str:
    """What a full file system stopped, naming the file written (and the folder, when known)."""
    where, hops = None, 0
    while exc is not None and where is None and hops < 20:
        hops += 1
        where = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
        exc = exc.__cause__ or exc.__context__
    writing = f" (at {where})" if where else ""
    full = f"the file system of {folder} is full" if folder else "a file system the run writes to is full"
    return (f"no space left on device: {full}{writing}; free space there, then run the pipeline again: it goes "
            f"on where it stopped")
