"""What a DLQ replay is asked to do: its filters and whether it is a dry run.

Pure Python (no airflow, no pyspark): the operator builds it from its
arguments, the hook hands it to the Spark job as ``--replay JSON``, the job's
entry point reads it back (``spark/replay.py`` does the replay). Every value is
checked here, and a problem names the key, so a bad filter is refused before
anything is submitted.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from airflow_conduit.recovery.clock import parse_iso

LIST_KEYS = ("stages", "components", "exception_classes", "rules")
BATCH_KEYS = ("batch_min", "batch_max")
TIME_KEYS = ("since", "until")
NONE_TEXTS = ("", "none", "null")  # what a Jinja template renders for "no value"


class ReplayRequestError(ValueError):
    """A replay filter or option that cannot be used; the message names the key."""


@dataclass(frozen=True)
class ReplayFilter:
    """Which DLQ records a replay takes; empty tuples / None mean any."""

    stages: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    exception_classes: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()  # expectation rule names (records an ``expect`` processor dropped)
    batch_min: int | None = None
    batch_max: int | None = None
    since: str | None = None  # time_of_error >= since (ISO-8601 UTC, as the DLQ writes it)
    until: str | None = None  # time_of_error < until

    def matches(self, row: dict[str, Any]) -> bool:
        if self.stages and row.get("stage") not in self.stages:
            return False
        if self.components and row.get("component_id") not in self.components:
            return False
        if self.exception_classes and row.get("exception_class") not in self.exception_classes:
            return False
        if self.rules and not any(str(row.get("exception_message") or "").startswith(f"expectation {r!r} ") for r in self.rules):
            return False
        batch = row.get("batch_id")
        if self.batch_min is not None and (batch is None or batch < self.batch_min):
            return False
        if self.batch_max is not None and (batch is None or batch > self.batch_max):
            return False
        at = str(row.get("time_of_error") or "")
        if self.since is not None and at < self.since:
            return False
        if self.until is not None and at >= self.until:
            return False
        return True

    def to_dict(self) -> dict[str, Any]:
        """Only the filters that are set (``{}``: every record)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items() if v not in ((), None)}

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None, *, where: str = "replay filters") -> "ReplayFilter":
        """Checked filters from plain values (a list or one string per list key; text or int batches; ISO times)."""
        values = dict(values or {})
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ReplayRequestError(f"{where}: unknown key(s) {unknown}; known: {[f.name for f in dataclasses.fields(cls)]}")
        out: dict[str, Any] = {}
        for key in LIST_KEYS:
            out[key] = _names(values.get(key), f"{where}: {key}")
        for key in BATCH_KEYS:
            out[key] = _batch(values.get(key), f"{where}: {key}")
        for key in TIME_KEYS:
            out[key] = _moment(values.get(key), f"{where}: {key}")
        if out["batch_min"] is not None and out["batch_max"] is not None and out["batch_min"] > out["batch_max"]:
            raise ReplayRequestError(f"{where}: batch_min {out['batch_min']} is greater than batch_max {out['batch_max']}")
        if out["since"] is not None and out["until"] is not None and out["since"] >= out["until"]:
            raise ReplayRequestError(f"{where}: since {out['since']} is not before until {out['until']}")
        return cls(**out)


@dataclass(frozen=True)
class ReplayRequest:
    filters: ReplayFilter = ReplayFilter()
    dry_run: bool = False
    force: bool = False  # also take records whose spec is unchanged since they failed (docs/dlq.md, the replay rule)

    def to_json(self) -> str:
        forced = {"force": True} if self.force else {}
        return json.dumps({"filters": self.filters.to_dict(), "dry_run": self.dry_run, **forced}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, *, where: str = "--replay") -> "ReplayRequest":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ReplayRequestError(f"{where}: not JSON: {exc}") from None
        if not isinstance(data, dict) or set(data) - {"filters", "dry_run", "force"}:
            raise ReplayRequestError(f"{where}: expected an object with 'filters', 'dry_run' and 'force', got {text[:200]!r}")
        return cls(ReplayFilter.from_mapping(data.get("filters"), where=f"{where}: filters"),
                   as_bool(data.get("dry_run", False), f"{where}: dry_run"), as_bool(data.get("force", False), f"{where}: force"))


def is_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in NONE_TEXTS)


def as_bool(value: Any, where: str) -> bool:
    """A bool, or the text a template renders for one (``True``/``false``/``1``...)."""
    if isinstance(value, bool):
        return value
    if is_none(value):
        return False
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ReplayRequestError(f"{where}: expected true or false, got {value!r}")


def _names(value: Any, where: str) -> tuple[str, ...]:
    """A list of names: a list, one name, a comma-separated text, or JSON list text (what ``| tojson`` renders)."""
    if is_none(value):
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise ReplayRequestError(f"{where}: not a JSON list: {text[:200]!r}") from None
        else:
            return tuple(part.strip() for part in text.split(",") if part.strip())
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ReplayRequestError(f"{where}: expected a list of names, got {value!r}")
    return tuple(v.strip() for v in value)


def _batch(value: Any, where: str) -> int | None:
    if is_none(value):
        return None
    if isinstance(value, bool):
        raise ReplayRequestError(f"{where}: expected a batch id (a whole number), got {value!r}")
    try:
        return int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ReplayRequestError(f"{where}: expected a batch id (a whole number), got {value!r}") from None


def _moment(value: Any, where: str) -> str | None:
    """An ISO-8601 time as the DLQ writes ``time_of_error`` (UTC, microseconds, Z): compared as text."""
    if is_none(value):
        return None
    try:
        moment = parse_iso(value if not isinstance(value, str) else value.strip())
    except (TypeError, ValueError):
        raise ReplayRequestError(f"{where}: expected an ISO-8601 time such as 2026-11-01T10:00:00Z, got {value!r}") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
