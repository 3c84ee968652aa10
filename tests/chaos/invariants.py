"""The chaos invariant: every input record has exactly one fate, read from the raw outputs.

Reads the Parquet lake and the JSON DLQ as files (pyarrow and json, no Spark, not the run report) and the
scenario's ledger of what was delivered. A record's fate is one of:

- in the lake once (a pipeline batch), and in no DLQ batch;
- in the DLQ once (a pipeline batch, its line byte for byte), and in the lake at most once from a replay
  batch (`batch_id=-k`) that took it;
- filtered: in neither, with an amount some version of the spec's filter drops;
- excused: in neither, with the named finding the product reports for it (INPUT_FILE_CHANGED naming its file
  and a read size at or before the record's first byte), or a named error ended the scenario, or its
  pipeline was refused before writing (OUTPUT_OWNED_ELSEWHERE: the ledger's `refused_files`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ID_IN_LINE = re.compile(r'"id": ?(-?\d+)')
BATCH_FOLDER = re.compile(r"batch_id=(-?\d+)")


@dataclass(frozen=True)
class Delivered:
    """One input line as the harness wrote it."""

    record_id: int
    line: str
    file: str
    offset: int                 # byte offset of the line's start in its file
    amount: int | None          # None: the line cannot be a good record (malformed or wrong type)
    appended_after_read: bool = False


@dataclass
class Ledger:
    records: dict[int, Delivered] = field(default_factory=dict)
    filter_thresholds: set[int] = field(default_factory=set)   # every `amount >= T` the spec had
    refused_files: dict[str, str] = field(default_factory=dict)  # file -> the named error its pipeline was refused with

    def add(self, record: Delivered) -> None:
        if record.record_id in self.records:
            raise ValueError(f"record id {record.record_id} delivered twice by the harness")
        self.records[record.record_id] = record

    def to_json(self) -> dict:
        return {"filter_thresholds": sorted(self.filter_thresholds), "refused_files": self.refused_files,
                "records": [vars(r) for r in self.records.values()]}

    @classmethod
    def from_json(cls, data: dict) -> "Ledger":
        ledger = cls(filter_thresholds=set(data["filter_thresholds"]), refused_files=dict(data.get("refused_files", {})))
        for r in data["records"]:
            ledger.add(Delivered(**r))
        return ledger


def _batch_of(path: Path) -> int | None:
    found = [m.group(1) for part in path.parts if (m := BATCH_FOLDER.fullmatch(part))]
    return int(found[-1]) if found else None


def _visible(path: Path, root: Path) -> bool:
    """Spark's and the DLQ writer's hidden files and folders (`.x`, `_temporary`) are not data."""
    return not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def lake_rows(lake: Path) -> list[tuple[int, int | None, float | None]]:
    """(batch, id, amount) of every row in the lake's Parquet files."""
    import pyarrow.parquet as pq

    rows = []
    if not lake.exists():
        return rows
    for f in sorted(lake.rglob("*.parquet")):
        if not _visible(f, lake):
            continue
        table = pq.read_table(f).to_pydict()
        for record_id, amount in zip(table["id"], table.get("amount", [None] * len(table["id"]))):
            rows.append((_batch_of(f), record_id, amount))
    return rows


def dlq_rows(dlq: Path) -> list[dict]:
    """Every record of the JSON DLQ's files, with the batch of the folder it is in."""
    rows = []
    if not dlq.exists():
        return rows
    for f in sorted(dlq.rglob("*.json")):
        if not _visible(f, dlq):
            continue
        for n, text in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if text.strip():
                row = json.loads(text)
                row["_folder_batch"] = _batch_of(f)
                row["_where"] = f"{f}:{n}"
                rows.append(row)
    return rows


def findings(state_dirs: list[Path]) -> list[dict]:
    """The INPUT_FILE_CHANGED findings the product recorded (STATE_DIR/input-files/changed.json)."""
    found = []
    for state in state_dirs:
        path = state / "input-files" / "changed.json"
        if path.exists():
            found.extend(json.loads(path.read_text()).values())
    return found


def _excused(record: Delivered, changed: list[dict]) -> bool:
    if not record.appended_after_read:
        return False
    for finding in changed:
        if str(finding.get("file", "")).endswith("/" + record.file):
            read = finding.get("read_bytes")
            if read is None or record.offset >= read:
                return True
    return False


def check(ledger: Ledger, lake: Path, dlq: Path, state_dirs: list[Path], named_error: str | None = None) -> list[str]:
    """Violations (empty: every record has exactly one fate). `named_error`: the scenario ended on a named error,
    so a record may be missing (never duplicated, never a fragment)."""
    violations: list[str] = []
    in_lake: dict[int, list[int]] = defaultdict(list)
    for batch, record_id, amount in lake_rows(lake):
        record = ledger.records.get(record_id)
        if record is None:
            violations.append(f"lake batch {batch}: id {record_id} was never delivered")
            continue
        if record.amount is None or amount is None or float(record.amount) != float(amount):
            violations.append(f"lake batch {batch}: id {record_id} has amount {amount!r}, input says {record.amount!r}")
        in_lake[record_id].append(batch)
    in_dlq: dict[int, list[int]] = defaultdict(list)
    for row in dlq_rows(dlq):
        text = row.get("record")
        match = ID_IN_LINE.search(text or "")
        record = ledger.records.get(int(match.group(1))) if match else None
        if record is None:
            violations.append(f"DLQ {row['_where']}: record {text!r:.120} is no delivered line")
            continue
        if text != record.line:
            violations.append(f"DLQ {row['_where']}: id {record.record_id} holds {text!r:.120}, "
                              f"a fragment or a changed copy of the input line {record.line!r:.120}")
        in_dlq[record.record_id].append(row["_folder_batch"])
    changed = findings(state_dirs)
    for record_id, record in sorted(ledger.records.items()):
        lake_batches, dlq_batches = in_lake.get(record_id, []), in_dlq.get(record_id, [])
        where = f"id {record_id} ({record.file}, byte {record.offset})"
        pipeline_lake = [b for b in lake_batches if b is None or b >= 0]
        replay_lake = [b for b in lake_batches if b is not None and b < 0]
        pipeline_dlq = [b for b in dlq_batches if b is None or b >= 0]
        replay_dlq = [b for b in dlq_batches if b is not None and b < 0]
        if len(lake_batches) > 1:
            violations.append(f"duplicate: {where} is in the lake {len(lake_batches)} times (batches {lake_batches})")
        if len(pipeline_dlq) > 1:
            violations.append(f"duplicate: {where} is in the DLQ {len(pipeline_dlq)} times (batches {pipeline_dlq})")
        if len(replay_dlq) != len(set(replay_dlq)):
            violations.append(f"duplicate: {where} is in one replay's DLQ batch twice (batches {replay_dlq})")
        if pipeline_lake and dlq_batches:
            violations.append(f"two fates: {where} is in lake batch {pipeline_lake} and DLQ batches {dlq_batches}")
        if (replay_lake or replay_dlq) and not pipeline_dlq:
            violations.append(f"replayed without a DLQ record: {where} in replay batches {replay_lake + replay_dlq}")
        refusal = ledger.refused_files.get(record.file)
        if refusal and (lake_batches or dlq_batches):
            violations.append(f"written despite a refusal: {where} is in lake batches {lake_batches} and DLQ batches "
                              f"{dlq_batches}, yet its pipeline was refused with {refusal} before writing")
        if lake_batches or dlq_batches:
            continue
        if refusal:
            continue
        filtered = record.amount is not None and any(record.amount < t for t in ledger.filter_thresholds)
        if filtered or _excused(record, changed) or named_error:
            continue
        violations.append(f"lost: {where} is in neither the lake nor the DLQ and no filter drops it "
                          f"(amount {record.amount}, thresholds {sorted(ledger.filter_thresholds)})")
    return violations
