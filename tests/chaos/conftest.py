"""The chaos tests import the harness's modules by name (they are scripts too: `python tests/chaos/run.py`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    """Under xdist (`make test`: a test at a time, two to a worker at first), each seed's scenario (minutes) is
    followed by a checker test (a second), so that the first two seeds go to different workers."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    def scenario(item) -> bool:
        return "seed" in getattr(getattr(item, "callspec", None), "params", {})

    seeds = [item for item in items if scenario(item)]
    others = [item for item in items if not scenario(item)]
    items[:] = [item for pair in zip(seeds, others) for item in pair] + seeds[len(others):] + others[len(seeds):]
