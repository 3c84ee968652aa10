"""What a batch started under: the spec's fingerprint, kept before the batch's first commit.

A batch commits to its outputs one by one (the DLQ, then each destination). A crash in between leaves it
half-committed, and the restart runs it again, skipping what was committed. Under a changed spec the re-run could give
a record another fate: one the new spec sends to the DLQ, already committed, would land nowhere. So each batch keeps,
in ``STATE_DIR/batch-intents/<n>.json``, the fingerprint of the spec it runs under (``fingerprint.batch_fingerprint``)
and that spec's text; a re-run of a half-committed batch under another fingerprint is refused
(``SpecChangedMidBatch``, fatal 2150), and the kept text (``<n>.yaml``) is the spec to finish it with.
Rewritten only while nothing of the batch is committed; the last ``KEEP_BATCHES`` kept.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_conduit.recovery.errors import SpecChangedMidBatch
from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic
from airflow_conduit.spark.commits import KEEP_BATCHES


class BatchIntents:
    """The spec each batch runs under (``begin``), checked when a half-committed batch runs again."""

    def __init__(self, state_dir: str | os.PathLike[str], fingerprint: str, spec_file: str | None, run_id: str):
        self.root = Path(state_dir) / "batch-intents"
        self.fingerprint = fingerprint
        self.spec_file = spec_file
        self.run_id = run_id
        self._spec_text = _read(spec_file)  # as the run started: the file may be edited while it runs
        self._spec_kept = False  # the text is kept once per run, under its fingerprint

    def path(self, batch_id: int) -> Path:
        return self.root / f"{batch_id}.json"

    def kept_spec(self, fingerprint: str) -> Path:
        return self.root / f"spec-{fingerprint}.yaml"

    def begin(self, batch_id: int, committed: list[str]) -> None:
        """Before batch ``batch_id`` writes: keep this run's spec for it when nothing of it is committed yet
        (``committed``: the outputs that have it); else check that the spec is the one it started with."""
        if committed:
            self._check(batch_id, committed)
            return
        if not self._spec_kept and self._spec_text is not None:
            kept = self.kept_spec(self.fingerprint)
            kept.parent.mkdir(parents=True, exist_ok=True)
            tmp = kept.with_name(f".{kept.name}.tmp")
            tmp.write_text(self._spec_text, encoding="utf-8")
            os.replace(tmp, kept)
            self._spec_kept = True
        write_json_atomic(self.path(batch_id), {"batch_id": batch_id, "fingerprint": self.fingerprint, "run_id": self.run_id,
                                                "spec_file": self.spec_file, "at": utc_now_iso()},
                          durable=False)  # per batch: see write_json_atomic
        self.path(batch_id - KEEP_BATCHES).unlink(missing_ok=True)

    def _check(self, batch_id: int, committed: list[str]) -> None:
        intent = read_json(self.path(batch_id))
        if intent is None or intent.get("fingerprint") == self.fingerprint:
            return  # the same spec, or a batch begun before intents were kept: nothing to compare with
        kept = self.kept_spec(str(intent.get("fingerprint")))
        if kept.is_file():
            how = f"run once with the spec it started with, kept in {kept}, to finish the batch, then with the new one"
        else:
            how = (f"put back the spec it started with ({intent.get('spec_file') or 'that of run ' + str(intent.get('run_id'))}) "
                   "for one run to finish the batch, then the new one")
        raise SpecChangedMidBatch(
            f"batch {batch_id} was committed to {', '.join(committed)} and not to the other outputs when its run "
            f"stopped, and the spec changed since in what decides a record's fate (sources, processors, destinations): "
            f"finished under the new spec, a record given another fate could land nowhere. To go on: {how}")


def _read(spec_file: str | None) -> str | None:
    if not spec_file:
        return None
    try:
        return Path(spec_file).read_text(encoding="utf-8")
    except OSError:
        return None
