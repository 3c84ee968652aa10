"""A fingerprint of what decides a record's fate: whether a DLQ replay can change an outcome.

Per source: how it parses a record (its plugin and settings, but not where its
files are or how many it takes per batch), its processors, the pipeline's
processors, every destination's processors and the per-record retry options.
A DLQ record is replayed again only when its source's fingerprint changed
since it failed (``spark/replay.py``): a replay with the same spec would fail
it the same way. Pure Python (no airflow, no pyspark).

Not in it: the code of a ``custom`` function (a fix there does not change the
spec) and anything outside the spec (a lookup service that was down): those
need a forced replay (``--force``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from airflow_conduit.pipeline.model import PipelineSpec, ProcessorSpec, SourceSpec

# source settings that do not change how a record parses
NOT_FATE_SETTINGS = ("path", "max-files-per-trigger")
FINGERPRINTS_FILE = "spec-fingerprints.json"  # in runs/<run-id>/ of a state dir: what that run's DLQ records failed under


def _processors(processors: tuple[ProcessorSpec, ...]) -> list[dict[str, Any]]:
    return [{"id": p.id, "plugin": p.plugin, "settings": p.settings} for p in processors]


def _source_part(source: SourceSpec) -> dict[str, Any]:
    settings = {k: v for k, v in source.settings.items() if k not in NOT_FATE_SETTINGS}
    return {"plugin": source.plugin, "settings": settings, "processors": _processors(source.processors)}


def source_fingerprint(spec: PipelineSpec, source: SourceSpec) -> str:
    """The fingerprint of what decides the fate of ``source``'s records under ``spec``."""
    parts = {
        "source": _source_part(source),
        "processors": _processors(spec.processors),
        "destinations": [{"id": d.id, "processors": _processors(d.processors)} for d in spec.destinations],
        "errors": dataclasses.asdict(spec.errors),
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def spec_fingerprints(spec: PipelineSpec) -> dict[str, str]:
    """source id -> its fingerprint."""
    return {source.id: source_fingerprint(spec, source) for source in spec.sources}


def batch_fingerprint(spec: PipelineSpec) -> str:
    """The fingerprint of what decides where a batch's records go: every source's parsing and processors, the
    pipeline's processors, each destination (id, plugin, processors) and the retry options. A batch committed to some
    outputs under one and finished under another could give a record a fate whose output is already committed
    (``spark/batch_intents.py``). Where files are, how many a batch takes, secrets and timings are not in it."""
    parts = {
        "sources": [{"id": s.id, **_source_part(s)} for s in spec.sources],
        "processors": _processors(spec.processors),
        "destinations": [{"id": d.id, "plugin": d.plugin, "processors": _processors(d.processors)} for d in spec.destinations],
        "errors": dataclasses.asdict(spec.errors),
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
