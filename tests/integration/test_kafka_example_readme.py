"""examples/kafka_delta/README.md runs as written: its bash blocks, pasted in order from the repository root.

The blocks run in one bash (``set -euo pipefail``) in a copy of what they use from the repository root (the
Makefile, examples/; jars/ and .venv linked), on a free port (``KAFKA_PORT``, which the README honours) and a
broker folder of the test's own (``KAFKA_LOCAL_DIR``): the user's own broker on 9092 is left alone. The broker is
the one ``make kafka-up`` starts; the README's last block stops it (and the test does, whatever happened).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from postgres_server import free_port
from test_kafka_delta_dag import delta_rows

pytestmark = pytest.mark.integration

README = REPO / "examples" / "kafka_delta" / "README.md"
DEADLINE_SECONDS = 900


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def sandbox(root: Path) -> Path:
    """What the README's commands use from the repository root: the Makefile, examples/, jars/ and .venv."""
    root.mkdir()
    shutil.copy(REPO / "Makefile", root / "Makefile")
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("out", "state*", "__pycache__"))
    (root / "jars").symlink_to(REPO / "jars")
    venv = REPO / ".venv" if (REPO / ".venv" / "bin" / "activate").exists() else Path(sys.prefix)
    (root / ".venv").symlink_to(venv)
    return root


def test_the_kafka_example_readme_runs_as_written(tmp_path):
    blocks = bash_blocks(README.read_text())
    assert len(blocks) >= 3 and "make kafka-up" in blocks[0] and "make kafka-down" in blocks[-1]
    root = sandbox(tmp_path / "repo")
    env = {**os.environ, "KAFKA_PORT": str(free_port()), "KAFKA_LOCAL_DIR": str(tmp_path / "kafka")}
    script = "set -euo pipefail\n" + "\n".join(blocks)
    try:
        done = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True,
                              timeout=DEADLINE_SECONDS)
    finally:
        subprocess.run([sys.executable, "examples/local_kafka.py", "down"], cwd=root, env=env, capture_output=True,
                       timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "15 record(s) produced to orders" in done.stdout
    expected = json.loads((REPO / "examples" / "orders" / "expected.json").read_text())
    rows = delta_rows(root / "examples" / "kafka_delta" / "out" / "orders")
    assert sorted(r["id"] for r in rows) == sorted(expected["written_ids"])
    dlq_records = [line for line in done.stdout.splitlines() if re.match(r"^\d+/\d+ ", line)]
    assert len(dlq_records) == len(expected["dlq"]) == 7
    assert done.stdout.count("    error: ") == 7
    assert "the local Kafka broker at" in done.stdout and "is stopped" in done.stdout
    assert not (tmp_path / "kafka").exists()
