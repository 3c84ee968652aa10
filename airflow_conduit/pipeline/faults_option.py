"""The ``--faults`` option (fault injection for tests and demos), validated before anything starts.

Fault injection is a test tool, but a mistyped value must not turn into a job that fails the
same way on every restart: ``{"transient_first_runs": "abc"}`` would otherwise fail inside every
driver, classified as a passing fault, for ever. Every key and value is
checked here, and each problem names the key. The CLI, the operator and the Spark entrypoint
read faults through ``parse_faults``. Keys: docs/runs.md (fault injection).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from airflow_conduit.pipeline.json_nesting import MAX_JSON_DEPTH, too_deep

MAX_FAULTS_CHARS = 10_000
KEYS = ("transient_first_runs", "fatal", "crash_after_destination", "crash_before_commit")
CRASH_KEYS = ("destination", "batch")


class FaultsError(ValueError):
    """A ``--faults`` value that cannot be used; the message names the option and the key."""

    def __init__(self, problem: str, option: str = "--faults"):
        super().__init__(f"{option}: {problem}")
        self.problem = problem
        self.option = option


def parse_faults(value: str | dict | None, *, option: str = "--faults") -> dict[str, Any]:
    """JSON text (or an already parsed dict) -> a validated faults dict; ``None``/empty/``null`` -> ``{}``."""
    if value is None:
        return {}
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        if len(text) > MAX_FAULTS_CHARS:
            raise FaultsError(f"{len(text):,} characters; fault injection needs far fewer (limit {MAX_FAULTS_CHARS:,})", option)
        if too_deep(text):
            raise FaultsError(f"nested too deeply to read (limit {MAX_JSON_DEPTH} levels)", option)
        try:
            data = json.loads(text)
        except RecursionError:
            raise FaultsError(f"nested too deeply to read (limit {MAX_JSON_DEPTH} levels)", option) from None
        except ValueError as exc:
            raise FaultsError(f"not JSON ({exc}); example: '{{\"transient_first_runs\": 2}}'", option) from None
    else:
        data = value
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FaultsError(f"must be a JSON object like {{\"transient_first_runs\": 2}}, got {type(data).__name__}", option)
    for key in data:
        if key not in KEYS:
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(KEYS)}"
            raise FaultsError(f"unknown key {key!r}{hint}", option)
    faults = dict(data)
    if "transient_first_runs" in faults:
        faults["transient_first_runs"] = _count(faults["transient_first_runs"], "transient_first_runs", option)
    if "fatal" in faults and not isinstance(faults["fatal"], bool):
        raise FaultsError(f"key 'fatal': expected true or false, got {faults['fatal']!r}", option)
    for key in ("crash_after_destination", "crash_before_commit"):
        if key in faults:
            faults[key] = _crash(faults[key], option, key)
    return faults


def _count(value: Any, key: str, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FaultsError(f"key {key!r}: expected a whole number >= 0, got {value!r}", option)
    return value


def _crash(value: Any, option: str, key: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise FaultsError(f"key {key!r}: expected {{\"destination\": ID, \"batch\": N}}, got {value!r}", option)
    unknown = [k for k in value if k not in CRASH_KEYS]
    missing = [k for k in CRASH_KEYS if k not in value]
    if unknown or missing:
        raise FaultsError(
            f"key {key!r}: expected exactly the keys destination and batch"
            + (f"; unknown: {', '.join(map(repr, unknown))}" if unknown else "")
            + (f"; missing: {', '.join(missing)}" if missing else ""),
            option,
        )
    destination = value["destination"]
    if not isinstance(destination, str) or not destination:
        raise FaultsError(f"key '{key}.destination': expected a destination id, got {destination!r}", option)
    return {"destination": destination, "batch": _count(value["batch"], f"{key}.batch", option)}
