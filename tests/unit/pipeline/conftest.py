"""Helpers for the pipeline spec tests: write a spec to a temp file, build a minimal valid spec."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest



@pytest.fixture
def write_spec(tmp_path: Path):
    """write_spec(text, name="pipeline.yaml") -> path of the written file (text is dedented)."""

    def write(text: str, name: str = "pipeline.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write
