"""The docs' shape: no page over 500 lines, every page in the index, every relative link and #anchor resolves,
and every docs page a message, comment or test names exists."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from docs_pages import DOCS, REPO, anchors, pages

MAX_LINES = 500
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# Pages the index may not list yet: others add them, and the index with them.
NAMED_DOCS_PAGE = re.compile(r"\bdocs/([a-z0-9_-]+\.md)\b")


def linking_files() -> list[Path]:
    return [*pages(), *sorted((DOCS / "benchmarks").glob("*.md")), REPO / "README.md",
            *sorted((REPO / "examples").glob("*/README.md"))]


def links(path: Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCED.sub("", path.read_text(encoding="utf-8")))
    return [target or image for target, image in LINK.findall(text)]


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_no_page_is_longer_than_500_lines(page):
    lines = page.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{page.name} has {lines} lines: split it by topic"


def test_the_index_lists_every_page():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([a-z0-9_-]+\.md)(?:#[^)]*)?\)", index))
    missing = {p.name for p in pages()} - listed - {"index.md"}
    assert not missing, f"docs/index.md does not list {sorted(missing)}"


@pytest.mark.parametrize("path", linking_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(path):
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = path if not file_part else (path.parent / unquote(file_part)).resolve()
        if not linked.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and linked.suffix == ".md" and unquote(anchor) not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading in {linked.name}")
    assert not broken, f"{path.relative_to(REPO)}: " + "; ".join(broken)


def test_every_docs_page_named_in_the_code_exists():
    """Error messages, CLI output, comments and tests name pages as docs/<page>.md: each of them exists."""
    missing = []
    for path in [*REPO.glob("airflow_conduit/**/*.py"), *REPO.glob("tests/**/*.py"), *REPO.glob("dags/*.py"),
                 *REPO.glob("bench/*.py"), *linking_files(), REPO / "Makefile"]:
        for name in NAMED_DOCS_PAGE.findall(path.read_text(encoding="utf-8")):
            if not (DOCS / name).exists():
                missing.append(f"{path.relative_to(REPO)}: docs/{name}")
    assert not missing, missing
