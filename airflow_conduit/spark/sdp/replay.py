"""Replay of a quarantined table's records after a fix, exactly once: the file DLQ's replay for SDP projects.

A replay stages; the pipeline's own flows write. Why not a batch append of ours into ``<table>``: an SDP streaming
table is a file sink whose readers see only the files of its ``_spark_metadata`` log, so a batch append beside
that log is invisible, and an entry of ours in the log would take the batch id of the stream's next batch, which
the sink would then skip as already written (lost). Why not a flow reading ``<table>_quarantine``: SDP's streaming
read of a table of the same graph read none of its committed rows (measured on Spark 4.2).

1. Select: the rows of ``<table>_quarantine`` (read in batch, through the sink's log) that no replay took. The
   ledger is ``STATE_DIR/quarantine-replays/<table>/<k>/plan.json``: each plan lists the ``quarantine_id`` s it
   took. A row a replay sent back to the quarantine (its ``source_file`` is replay ``j``'s inbox file) is taken
   again only when the project changed since replay ``j`` (its fingerprint: the project's definitions and
   ``spark-pipeline.yml``), or when forced: an unchanged project would quarantine it the same way.
2. The plan, with the records, is saved before anything is staged: it is the mark.
3. The records go, one per line, into ``replay-<k>.json`` in the table's replay inbox
   (``expectations.replay_inbox``), written as a hidden file and renamed (a file stream never lists a hidden file:
   it never sees half of one). A replay interrupted before (plan saved, no file) is finished by the next one with
   the same records and number; a staged file is never written again.
4. The pipeline's next run reads the inbox with the table's own (fixed) source and expectations: what now passes is
   appended to ``<table>``, what still fails goes back to ``<table>_quarantine`` (with its new rule and error, the
   inbox file as ``source_file``); the flows' checkpoints read each staged file once, across kills and restarts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic
from airflow_conduit.spark.sdp.expectations import WAREHOUSE_CONF, quarantine_table_name, replay_inbox

LEDGER = "quarantine-replays"
STAGED_FILE = re.compile(r"replay-(\d+)\.json$")
UNCHANGED = "project unchanged since a replay sent it back"
MULTILINE = "a record of more than one line"
PROJECT_SKIPPED = {"spark-warehouse", "metastore_db", "storage", "__pycache__"}


class QuarantineReplayError(ValueError):
    """A replay that cannot start: the message names the table and what is missing."""


@dataclass
class QuarantineReplay:
    table: str
    replay: int | None  # None: nothing to replay (or a dry run)
    selected: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # quarantine rows not taken, by reason
    resumed: bool = False
    dry_run: bool = False
    staged: str | None = None  # the inbox file the pipeline's next run reads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def project_folder(spec_path: str | Path) -> Path:
    path = Path(spec_path).absolute()
    return path.parent if path.is_file() else path


def warehouse_of(spec: Any, project: Path) -> str:
    """The project's warehouse as the runner sets it: its configuration's, else ``<project>/spark-warehouse``."""
    value = str(spec.configuration.get(WAREHOUSE_CONF) or project / "spark-warehouse")
    value = value.removeprefix("file://").removeprefix("file:")
    return value if os.path.isabs(value) else str(project / value)


def project_fingerprint(project: Path) -> str:
    """What decides a record's fate: the project's definitions and spec (not its data, tables or checkpoints)."""
    digest = hashlib.sha256()
    for path in sorted(project.rglob("*")):
        relative = path.relative_to(project)
        if (not path.is_file() or set(relative.parts) & PROJECT_SKIPPED or any(p.startswith(".") for p in relative.parts)
                or path.suffix not in (".py", ".sql", ".yml", ".yaml")):
            continue
        digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _ledger(state_dir: Path, table: str) -> Path:
    return state_dir / LEDGER / table


def _plans(state_dir: Path, table: str) -> dict[int, dict[str, Any]]:
    root, out = _ledger(state_dir, table), {}
    if root.is_dir():
        for child in root.iterdir():
            plan = read_json(child / "plan.json") if child.name.isdigit() else None
            if plan is not None:
                out[int(child.name)] = plan
    return out


def read_quarantine(spark: Any, warehouse: str, table: str) -> list[dict[str, Any]]:
    """The quarantine table's committed rows (a batch read of its folder follows the sink's ``_spark_metadata`` log)."""
    path = Path(warehouse) / quarantine_table_name(table)
    if not (path / "_spark_metadata").is_dir():
        return []
    frame = spark.read.parquet(str(path)).select("quarantine_id", "record", "flow", "source_file")
    return [row.asDict() for row in frame.where(frame.flow == table).collect()]


def select(rows: list[dict[str, Any]], plans: dict[int, dict[str, Any]], fingerprint: str, *,
           force: bool = False) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows a new replay takes, and how many were left out, by reason."""
    taken = {qid for plan in plans.values() for qid in plan.get("taken", [])}
    chosen, skipped, seen = [], {}, set()
    for row in sorted(rows, key=lambda r: (str(r.get("source_file")), r["quarantine_id"])):
        staged = STAGED_FILE.search(str(row.get("source_file") or ""))
        sent_back_under = (plans.get(int(staged.group(1))) or {}).get("fingerprint") if staged else None
        if row["quarantine_id"] in taken or row["quarantine_id"] in seen:
            reason = "already replayed"
        elif "\n" in row["record"] or "\r" in row["record"]:
            reason = MULTILINE
        elif not force and sent_back_under == fingerprint:
            reason = UNCHANGED
        else:
            reason = None
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            seen.add(row["quarantine_id"])
            chosen.append(row)
    return chosen, skipped


def locate(spec_path: str | Path, table: str) -> tuple[Path, str, Path]:
    """The project folder, its warehouse and the table's replay inbox; a named error when there is nothing to replay
    into (checked before Spark starts)."""
    from airflow_conduit.spark.sdp import internals

    project = project_folder(spec_path)
    spec_file = next((project / name for name in internals.SPEC_FILE_NAMES if (project / name).is_file()), None)
    if Path(spec_path).is_file():
        spec_file = Path(spec_path).absolute()
    if spec_file is None:
        raise QuarantineReplayError(f"{spec_path}: no SDP project there (no {' or '.join(internals.SPEC_FILE_NAMES)})")
    try:
        spec = internals.load_spec(spec_file)
    except Exception as exc:  # noqa: BLE001 - SDP's own message names what it refused
        raise QuarantineReplayError(f"{spec_file}: not an SDP project spec: {str(exc).splitlines()[0]}") from exc
    warehouse = warehouse_of(spec, project)
    inbox = Path(replay_inbox(warehouse, table))
    if not inbox.is_dir():
        raise QuarantineReplayError(
            f"table {table} of {spec_file} has no replay inbox ({inbox}): it is not a quarantined_table whose source "
            "takes path=, or the project has not run since it became one")
    return project, warehouse, inbox


def replay_quarantine(spark: Any, spec_path: str | Path, table: str, *, state_dir: str | Path, dry_run: bool = False,
                      force: bool = False, crash: Callable[[str], None] | None = None) -> QuarantineReplay:
    """Stage the quarantined records of ``table`` not replayed yet for the pipeline's next run (module docstring).

    ``crash(point)``: tests stop the replay at ``"planned"`` (plan saved, nothing staged) or ``"staged"`` (file
    staged, plan not yet marked done), as a kill would.
    """
    project, warehouse, inbox = locate(spec_path, table)
    state_dir = Path(state_dir)
    plans = _plans(state_dir, table)
    pending = sorted(k for k, plan in plans.items() if plan.get("status") != "staged")
    result = QuarantineReplay(table, None, dry_run=dry_run)
    if pending and not dry_run:
        number, plan = pending[0], plans[pending[0]]
        result.resumed = True
    else:
        fingerprint = project_fingerprint(project)
        rows, result.skipped = select(read_quarantine(spark, warehouse, table), plans, fingerprint, force=force)
        result.selected = len(rows)
        if dry_run or not rows:
            return result
        number = max(plans, default=0) + 1
        plan = {"replay": number, "table": table, "status": "planned", "started_at": utc_now_iso(), "force": force,
                "fingerprint": fingerprint, "taken": [r["quarantine_id"] for r in rows],
                "records": [r["record"] for r in rows]}
        write_json_atomic(_ledger(state_dir, table) / str(number) / "plan.json", plan)  # the mark, before staging
    result.replay, result.selected = number, len(plan["records"])
    if crash:
        crash("planned")
    staged = inbox / f"replay-{number:06d}.json"
    if not staged.exists():
        hidden = inbox / f".{staged.name}.tmp"
        with open(hidden, "w", encoding="utf-8") as out:
            out.write("".join(record + "\n" for record in plan["records"]))
            out.flush()
            os.fsync(out.fileno())
        os.replace(hidden, staged)
    result.staged = str(staged)
    if crash:
        crash("staged")
    write_json_atomic(_ledger(state_dir, table) / str(number) / "plan.json",
                      {**plan, "status": "staged", "staged": str(staged), "staged_at": utc_now_iso()})
    return result


def summary(result: QuarantineReplay) -> str:
    skipped = ", ".join(f"{reason}: {n}" for reason, n in sorted(result.skipped.items())) or "none"
    if result.dry_run:
        return f"DRY RUN: {result.selected} quarantined record(s) of {result.table} would be replayed; not taken: {skipped}"
    if result.replay is None:
        return f"nothing to replay from {quarantine_table_name(result.table)}; not taken: {skipped}"
    return (f"replay {result.replay} of {quarantine_table_name(result.table)}{' (resumed)' if result.resumed else ''}: "
            f"{result.selected} record(s) staged in {result.staged}; the pipeline's next run appends those that now "
            f"pass to {result.table}; not taken: {skipped}")


def to_json(result: QuarantineReplay) -> str:
    return json.dumps(result.to_dict(), sort_keys=True)
