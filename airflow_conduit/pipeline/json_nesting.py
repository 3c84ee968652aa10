"""How deeply a JSON text nests, measured without parsing it.

Python's JSON parser refuses deep nesting with a RecursionError on some versions and parses it on others
(3.13 reads thousands of levels), so the options that take JSON text apply a limit of their own: the same
refusal on every Python, before the parser runs.
"""

from __future__ import annotations

import re

MAX_JSON_DEPTH = 100  # far beyond any option's shape (fault injection and error rules nest 3 levels)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    return nesting_depth(text) > limit
