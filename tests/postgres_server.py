"""A throwaway PostgreSQL 15 server for the tests (Debian's binaries), shared by the spark and deployment layers.

It runs as user ``postgres`` when the tests run as root (initdb refuses root), in a temp dir it owns,
on a free loopback port, with trust authentication; ``pg_ctl stop -m immediate`` and the folder
removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ports import free_port  # noqa: F401 - tests import it from here

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def installed() -> bool:
    return (PG_BIN / "initdb").exists()


def _as_postgres(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs)


@contextlib.contextmanager
def postgres_server(*settings: str) -> Iterator[dict]:
    """Start a server (extra ``name=value`` server settings allowed); yield its connection facts; stop it."""
    root = Path(tempfile.mkdtemp(prefix="conduit-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    port = free_port()
    options = " ".join([f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", *(f"-c {s}" for s in settings)])
    _as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"], cwd=root)
    _as_postgres(
        [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "-o", options, "start"],
        cwd=root,
    )
    try:
        yield {"host": "127.0.0.1", "port": port, "user": "postgres", "dbname": "postgres",
               "url": f"jdbc:postgresql://127.0.0.1:{port}/postgres", "log": str(root / "server.log")}
    finally:
        _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], cwd=root)
        shutil.rmtree(root, ignore_errors=True)
