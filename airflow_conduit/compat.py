"""What the supported Pythons (3.10 to 3.13) spell differently, in one place.

A leaf module (standard library only): every layer may import it, including the pure ones.
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """Python 3.11's ``enum.StrEnum``: members are strings, and ``str()`` and ``format()`` give the value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)

        @staticmethod
        def _generate_next_value_(name, start, count, last_values):  # auto(): the lower-cased name, as 3.11
            return name.lower()


__all__ = ["StrEnum"]
