"""The docs pages as headings and sections, for the tests that hold docs to the code (and their links)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")


@dataclass(frozen=True)
class Section:
    page: str  # file name under docs/, e.g. "spec.md"
    level: int
    title: str  # the heading's text as written, e.g. "Source `file`"
    text: str  # the section's lines up to the next heading of any level


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, _ and - kept), spaces to -."""
    text = re.sub(r"<[^>]+>", "", title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of each heading outside fenced code blocks."""
    found, fenced = [], False
    for i, line in enumerate(text.split("\n")):
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            found.append((len(m.group(1)), m.group(2), i))
    return found


def anchors(text: str) -> set[str]:
    """Every anchor a heading of this page gets, duplicates numbered as GitHub numbers them (-1, -2 ...)."""
    seen: dict[str, int] = {}
    result = set()
    for _, title, _ in headings(text):
        base = slug(title)
        n = seen.get(base, 0)
        result.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return result


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def sections(page: str | None = None) -> list[Section]:
    found = []
    for path in pages():
        if page is not None and path.name != page:
            continue
        lines = path.read_text(encoding="utf-8").split("\n")
        marks = headings("\n".join(lines))
        for k, (level, title, start) in enumerate(marks):
            end = marks[k + 1][2] if k + 1 < len(marks) else len(lines)
            found.append(Section(path.name, level, title, "\n".join(lines[start:end])))
    return found


def section(title: str, page: str | None = None) -> Section:
    """The one section with this heading (on ``page``, or on any page)."""
    matches = [s for s in sections(page) if s.title == title]
    assert len(matches) == 1, f"heading {title!r}{' on ' + page if page else ''}: found {len(matches)}"
    return matches[0]


def rows(text: str) -> dict[str, str]:
    """First-column key -> the whole table row, for rows like '| `key` | ...'."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", text, re.MULTILINE)}


def cells(row: str) -> list[str]:
    """A table row's cells, stripped ('\\|' inside a cell is not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
