"""Free loopback ports for the servers the tests start, none of which two test processes of one run can share.

A port the kernel picks (bind to port 0, close, hand it on) is free at that moment only: a second xdist worker
may be handed the same one before the first server binds it. Each worker here takes its ports from its own block
below the kernel's ephemeral range (which other programs' outgoing connections use), in turn from a random start,
and only a port it can bind at the moment.
"""

from __future__ import annotations

import os
import random
import socket
import threading

FIRST_PORT = 20000
BLOCK = 2000  # ports per worker: gw0 20000-21999, gw1 22000-23999, ... (a run of one process: the first block)
BLOCKS = 6  # up to 31999, below the ephemeral range (32768-60999 on Linux)
BLOCK_ENV = "CONDUIT_TEST_PORT_BLOCK"  # the first block of this test run (make test-pythons runs three side by side)
_lock = threading.Lock()
_next: list[int] = []


def worker_index() -> int:
    """This xdist worker's number (gw3 -> 3); 0 outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = worker[2:] if worker.startswith("gw") else ""
    return int(digits) if digits.isdigit() else 0


def block() -> range:
    """This worker's ports: block CONDUIT_TEST_PORT_BLOCK (0 unless set) + its worker number, of BLOCKS."""
    start = FIRST_PORT + ((int(os.environ.get(BLOCK_ENV) or 0) + worker_index()) % BLOCKS) * BLOCK
    return range(start, start + BLOCK)


def free_port() -> int:
    """The next port of this worker's block that nothing holds now (ports handed out earlier are not handed again
    until the block has gone round)."""
    ports = block()
    with _lock:
        if not _next:
            _next.append(random.randrange(len(ports)))
        for _ in range(len(ports)):
            port = ports[_next[0] % len(ports)]
            _next[0] += 1
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
