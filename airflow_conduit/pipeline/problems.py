"""Validation problems: each names the file, the key path and what was expected.

The loader collects every problem of a spec before it gives up, so a user fixes
a file in one pass instead of one error per run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec file.

    ``key_path`` is written like ``pipeline.sources[0].settings.format``; it is
    empty for problems about the whole file (not found, not YAML). ``line`` is
    the 1-based line of the offending key in the file when known.
    """

    file: str
    key_path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.key_path:
            return f"{where}: {self.key_path}: {self.message}"
        return f"{where}: {self.message}"


class SpecError(ValueError):
    """A pipeline spec was refused; ``problems`` lists every reason, ``str()`` prints one per line."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def file(self) -> str | None:
        return self.problems[0].file if self.problems else None
