"""``[core] hostname_callable`` for the deployment tests: each triggerer reports its own name.

Two triggerers on one machine share a hostname; the tests tell them apart by the name their
job row carries (``job.hostname``), which comes from this callable.
"""

import os
import socket


def hostname() -> str:
    return os.environ.get("CONDUIT_COMPONENT") or socket.getfqdn()
