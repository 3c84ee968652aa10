"""Reading a job handle: the dict a backend returns for a submitted run and every driver persists.

Handles live on in task state, XCom and deferred triggers across an upgrade; those written before the
backend key was named ``backend`` carry it as ``launcher``, so every reader goes through ``backend_of``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def backend_of(handle: Mapping[str, Any] | None) -> str | None:
    """The backend kind (``local``, ``standalone``, ...) that submitted the job, or None without a handle."""
    if not handle:
        return None
    return handle.get("backend") or handle.get("launcher")
