"""The chaos tests import the harness's modules by name (they are scripts too: `python tests/chaos/run.py`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
