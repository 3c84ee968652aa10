"""``${ENV_VAR}`` references in setting values, resolved at load time (as in Conduit's pipeline files).

``$${`` writes a literal ``${``. A reference to a variable that is not set is a
validation problem naming the key and the variable, never an empty string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class Substitution:
    value: str
    used: list[str] = field(default_factory=list)  # variables that were read
    missing: list[str] = field(default_factory=list)  # variables that are not set
    malformed: list[str] = field(default_factory=list)  # ${...} contents that are not variable names


def substitute(text: str, env: Mapping[str, str]) -> Substitution:
    """Replace every ``${NAME}`` in ``text`` by ``env[NAME]``."""
    result = Substitution(text)

    def replace(match: re.Match) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group(1)
        if not _NAME.match(name):
            result.malformed.append(name)
            return match.group(0)
        result.used.append(name)
        if name not in env:
            result.missing.append(name)
            return match.group(0)
        return env[name]

    result.value = _REF.sub(replace, text)
    return result
