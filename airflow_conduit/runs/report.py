"""The run report: the contract between the Spark job (writer) and Airflow / the CLI (readers).

Pure Python (no airflow, no pyspark). The Spark job rewrites the report at
least once per batch with ``write_atomic`` (temp file in the same folder,
``os.replace``), so a reader never sees a half-written report, even
after the driver was killed. Format: docs/architecture.md, "The run report".
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from airflow_conduit.runs.status import RunStatus



MAX_BATCHES = 100  # the report keeps the last 100 batches

# KIP-298 error metric names (task-error-metrics).
COUNTER_NAMES = (
    "total-record-failures",
    "total-records-skipped",
    "total-retries",
    "deadletterqueue-records-produced",
    "deadletterqueue-produce-failures",
    "last-failure-timestamp",
)


def utc_now_iso() -> str:
    """ISO-8601 UTC with a trailing Z, the time format of every report field."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def report_path(state_dir: str | os.PathLike[str], run_id: str) -> Path:
    """STATE_DIR/runs/<run-id>/report.json (docs/architecture.md, state directory)."""
    return Path(state_dir) / "runs" / run_id / "report.json"


def totals_over_runs(reports: list[dict[str, Any]],
                     committed_rows: Callable[[str, int], int | None] | None = None) -> dict[str, Any]:
    """The pipeline's totals over its runs (reports oldest first): what a user means by "records" after restarts.

    Each run's report counts the batches it recorded, after their commits. A batch a killed run had
    not recorded is re-run by the next run and counted there once; a batch in two runs' reports (a
    run that recorded it and ended before Spark's checkpoint did) is read, filtered and dead-lettered
    once: its earlier counts are taken out. A re-run writes only the destinations that had not
    committed the batch; the rows of those that had (``already_committed``, committed by a run that
    did not record the batch) come from ``committed_rows(destination, batch)``, the commit markers, and the rows a
    killed attempt had written before the re-run wrote the rest (``earlier_attempt_wrote``) from the re-run's entry.
    """
    totals = _empty_totals()
    seen: dict[Any, dict[str, Any]] = {}
    for report in reports:
        run = report.get("totals") or {}
        for key in ("read", "filtered", "dlq"):
            totals[key] += int(run.get(key) or 0)
        for dest, n in (run.get("written") or {}).items():
            totals["written"][dest] = totals["written"].get(dest, 0) + int(n)
        for batch in report.get("batches") or []:
            batch_id = batch.get("batch_id")
            earlier = seen.get(batch_id)
            if earlier is not None:
                for key in ("read", "filtered", "dlq"):
                    totals[key] -= int(earlier.get(key) or 0)
            else:
                for dest, n in (batch.get("earlier_attempt_wrote") or {}).items():  # by a killed attempt: in no report
                    totals["written"][dest] = totals["written"].get(dest, 0) + int(n)
            if earlier is None and committed_rows is not None:
                for dest in batch.get("already_committed") or []:
                    if dest in (batch.get("written") or {}):  # a destination, not the DLQ
                        totals["written"][dest] = totals["written"].get(dest, 0) + int(committed_rows(dest, batch_id) or 0)
            seen[batch_id] = batch
    return totals


def replay_totals_text(replay: dict[str, Any]) -> str:
    """A replay's totals on one line, as the task log and the CLI show them."""
    skipped = replay.get("skipped_already_replayed", 0)
    unchanged = (replay.get("skipped") or {}).get("spec unchanged since it failed", 0)  # spark/replay.py UNCHANGED
    settled = f", {unchanged} skipped as their spec is unchanged since they failed (force takes them)" if unchanged else ""
    if replay.get("dry_run"):
        return (f"DRY RUN: {replay.get('replayed', 0)} record(s) would be replayed: {replay.get('passed', 0)} would pass, "
                f"{replay.get('filtered', 0)} filtered, {replay.get('still_failing', 0)} would still fail; "
                f"{skipped} skipped as already replayed{settled}")
    if replay.get("replay") is None:
        return f"nothing to replay; {skipped} skipped as already replayed{settled}"
    passing = ", ".join(f"{d}={n}" for d, n in sorted((replay.get("passing") or {}).items())) or "0"
    return (f"replay {replay['replay']} (batch {replay.get('batch_id')}{', resumed' if replay.get('resumed') else ''}): "
            f"replayed={replay.get('replayed', 0)} now passing[{passing}] filtered={replay.get('filtered', 0)} "
            f"still failing={replay.get('still_failing', 0)} skipped as already replayed={skipped}")


def _empty_totals() -> dict[str, Any]:
    return {"read": 0, "filtered": 0, "dlq": 0, "written": {}}


def _empty_counters() -> dict[str, Any]:
    counters: dict[str, Any] = {name: 0 for name in COUNTER_NAMES}
    counters["last-failure-timestamp"] = None
    return counters


@dataclass
class RunReport:
    """What one run of the Spark job did: status, counts per batch and in total, KIP-298 counters, error."""

    pipeline_id: str
    run_id: str
    status: RunStatus = RunStatus.STARTING
    started_at: str | None = None
    ended_at: str | None = None
    last_progress_at: str | None = None
    first_record_written_at: str | None = None
    totals: dict[str, Any] = field(default_factory=_empty_totals)
    batches: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=_empty_counters)
    error: dict[str, Any] | None = None
    stop_reason: str | None = None  # why a run ended early but cleanly: "signal SIGTERM" (graceful stop)
    replay: dict[str, Any] | None = None  # a DLQ replay's totals (``replay_totals``); None for a pipeline run
    # input files changed after they were read (spark/input_files.py): their new bytes were not processed
    input_files_changed: list[dict[str, Any]] = field(default_factory=list)
    # destinations new in the spec of a pipeline that ran before: {destination, begins_at_batch, message}
    destinations_added: list[dict[str, Any]] = field(default_factory=list)

    # -- updates -------------------------------------------------------------------------------------

    def add_batch(
        self,
        batch_id: int,
        *,
        read: int,
        filtered: int,
        dlq: int,
        written: dict[str, int],
        at: str | None = None,
    ) -> None:
        """Record one committed batch: per-batch entry (last 100 kept) and running totals."""
        at = at or utc_now_iso()
        self.batches.append(
            {"batch_id": batch_id, "read": read, "filtered": filtered, "dlq": dlq, "written": dict(written), "at": at}
        )
        del self.batches[:-MAX_BATCHES]
        self.totals["read"] += read
        self.totals["filtered"] += filtered
        self.totals["dlq"] += dlq
        for dest, n in written.items():
            self.totals["written"][dest] = self.totals["written"].get(dest, 0) + n
        if self.first_record_written_at is None and any(n > 0 for n in written.values()):
            self.first_record_written_at = at
        self.last_progress_at = at

    def add_expectations(self, counts: dict[str, dict[str, dict[str, Any]]]) -> None:
        """Expectation counts of the batch just added (processor -> rule -> {action, passed, failed}), also in totals."""
        if self.batches:
            self.batches[-1]["expectations"] = counts
        totals = self.totals.setdefault("expectations", {})
        for processor, rules in counts.items():
            for name, rule in rules.items():
                total = totals.setdefault(processor, {}).setdefault(name, {"action": rule["action"], "passed": 0, "failed": 0})
                total["action"] = rule["action"]
                total["passed"] += int(rule["passed"])
                total["failed"] += int(rule["failed"])

    def add_dlq_kinds(self, kinds: dict[str, dict[str, dict[str, int]]]) -> None:
        """The DLQ records of the batch just added per source, stage and error class (source -> stage -> class -> n),
        also in totals (``dlq_kinds``: lineage's DLQ facet, docs/lineage.md)."""
        if self.batches:
            self.batches[-1]["dlq_kinds"] = kinds
        totals = self.totals.setdefault("dlq_kinds", {})
        for source, stages in kinds.items():
            for stage, classes in stages.items():
                per_stage = totals.setdefault(source, {}).setdefault(stage, {})
                for error_class, n in classes.items():
                    per_stage[error_class] = per_stage.get(error_class, 0) + int(n)

    def add_counters(self, **increments: int) -> None:
        """Add to KIP-298 counters; keyword names use underscores (total_record_failures=1)."""
        for key, value in increments.items():
            name = key.replace("_", "-")
            if name not in COUNTER_NAMES or name == "last-failure-timestamp":
                raise KeyError(f"unknown counter {name!r}")
            self.counters[name] = self.counters.get(name, 0) + value

    def fail(self, error: dict[str, Any]) -> None:
        """The run ended with ``error`` (a ``StructuredError.to_dict()``): status failed, end time now."""
        self.status = RunStatus.FAILED
        self.ended_at = utc_now_iso()
        self.error = error

    @property
    def finished(self) -> bool:
        return RunStatus(self.status).finished

    # -- (de)serialisation ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = {
            "pipeline_id": self.pipeline_id,
            "run_id": self.run_id,
            "status": str(self.status),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "last_progress_at": self.last_progress_at,
            "first_record_written_at": self.first_record_written_at,
            "totals": self.totals,
            "batches": self.batches,
            "counters": self.counters,
            "error": self.error,
            "stop_reason": self.stop_reason,
        }
        if self.replay is not None:  # only a replay's report has the key
            data["replay"] = self.replay
        if self.input_files_changed:
            data["input_files_changed"] = self.input_files_changed
        if self.destinations_added:
            data["destinations_added"] = self.destinations_added
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunReport":
        totals = _empty_totals()
        totals.update(data.get("totals") or {})
        counters = _empty_counters()
        counters.update(data.get("counters") or {})
        return cls(
            pipeline_id=data.get("pipeline_id", ""),
            run_id=data.get("run_id", ""),
            status=RunStatus(data.get("status") or RunStatus.STARTING),
            started_at=data.get("started_at"),
            ended_at=data.get("ended_at"),
            last_progress_at=data.get("last_progress_at"),
            first_record_written_at=data.get("first_record_written_at"),
            totals=totals,
            batches=list(data.get("batches") or []),
            counters=counters,
            error=data.get("error"),
            stop_reason=data.get("stop_reason"),
            replay=data.get("replay"),
            input_files_changed=list(data.get("input_files_changed") or []),
            destinations_added=list(data.get("destinations_added") or []),
        )

    def write_atomic(self, path: str | os.PathLike[str], *, durable: bool = True) -> None:
        """Write to a temp file in the same folder, then os.replace: readers see old or new, never half
        (``durable``: fsync'd as well, see ``write_json_atomic``)."""
        write_json_atomic(path, self.to_dict(), durable=durable)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> "RunReport | None":
        """The report at ``path``, or None when there is none (the job never got that far)."""
        data = read_json(path)
        return None if data is None else cls.from_dict(data)


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON in ``path``, or None when there is no such file (``write_json_atomic`` never leaves half a file)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``data`` as JSON (also used for the Spark job's small state files).

    A reader, and a process started after this one was killed, sees the old content or the new, never half:
    the rename is atomic and the page cache outlives a killed process. ``durable`` also fsyncs the file and its
    folder, so the new content outlives a crash of the machine too. The per-batch state files pass False: their
    guarantees are across a killed process, and a crash of the machine is not survived by what they vouch for
    either (Spark's checkpoint and the data files Spark writes to a local disk are not fsync'd: docs/architecture.md,
    state directory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if not durable:
        return
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass
