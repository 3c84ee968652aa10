"""Spec and data builders for the Spark runner tests (PipelineSpec dataclasses built directly)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from airflow_conduit.pipeline.model import (
    DeadLetterQueueSpec,
    DestinationSpec,
    ErrorsSpec,
    PipelineSpec,
    ProcessorSpec,
    RetrySpec,
    SourceSpec,
)

# -- spec and data helpers --------------------------------------------------------------------------------

SCHEMA = "id BIGINT NOT NULL, name STRING, amount DOUBLE"


_MTIME = [1_700_000_000]


def write_lines(folder: Path, name: str, lines: list[str]) -> Path:
    """Write a file atomically, with a modification time later than every file written before.

    Spark's file source takes new files in modification-time order; files written within the
    same millisecond would come in any order.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(line + "\n" for line in lines))
    _MTIME[0] += 10
    os.utime(tmp, (_MTIME[0], _MTIME[0]))
    os.replace(tmp, path)
    return path


def good(i: int) -> str:
    return json.dumps({"id": i, "name": f"n{i}", "amount": i * 1.5})


def file_source(path: Path, sid: str = "in", fmt: str = "json", schema: str | None = SCHEMA, processors=(), **extra) -> SourceSpec:
    settings: dict[str, Any] = {"path": str(path), "format": fmt, **extra}
    if schema:
        settings["schema"] = schema
    return SourceSpec(id=sid, plugin="file", settings=settings, processors=tuple(processors))


def file_dest(path: Path, did: str = "out", fmt: str = "json", processors=()) -> DestinationSpec:
    return DestinationSpec(id=did, plugin="file", settings={"path": str(path), "format": fmt}, processors=tuple(processors))


def dlq_file(path: Path, size: int = 0, threshold: int = 0, **kw) -> DeadLetterQueueSpec:
    return DeadLetterQueueSpec(plugin="file", settings={"path": str(path), "format": "json"}, window_size=size,
                               window_nack_threshold=threshold, **kw)


def pipeline(pid: str, sources, destinations, processors=(), dlq=None, retry: RetrySpec | None = None, **kw) -> PipelineSpec:
    return PipelineSpec(
        id=pid,
        sources=tuple(sources),
        destinations=tuple(destinations),
        processors=tuple(processors),
        dead_letter_queue=dlq or DeadLetterQueueSpec(),
        errors=ErrorsSpec(retry=retry or RetrySpec()),
        **kw,
    )


def proc(pid: str, plugin: str, **settings) -> ProcessorSpec:
    return ProcessorSpec(id=pid, plugin=plugin, settings=settings)


def read_json_rows(spark, path: Path) -> list[dict]:
    """Every row under a file destination folder (all batch_id=<n> partitions)."""
    if not path.exists() or not any(path.rglob("*.json")):
        return []
    return [r.asDict(recursive=True) for r in spark.read.json(str(path)).collect()]


def first_pass_plan(spark, spec: PipelineSpec, state_dir: Path):
    """Run ``spec`` once; the executed physical plan of its first batch's pass (the observed frame the first write
    reads) and the run's exit code and report."""
    import pytest

    from airflow_conduit.spark import batch_pass
    from airflow_conduit.spark.runner import execute

    plans = []
    observe = batch_pass.observe

    def keeping(df, observation, metrics):
        out = observe(df, observation, metrics)
        plans.append(out._jdf.queryExecution().executedPlan())
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch_pass, "observe", keeping)
        code, report = execute(spark, spec, state_dir=state_dir, run_id="r1")
    return (plans[0] if plans else None), code, report


def dlq_replay_cli(spark, spec, state, *extra: str):
    """``airflow-conduit dlq replay SPEC --state-dir STATE ...`` by the CLI's own ``main`` in this process, on the
    tests' shared session instead of a JVM of its own: its exit code, stdout and stderr as a finished process's.

    Everything the command does runs (the spec and option checks, the driver lease, the replay, the summary lines);
    only the session it starts is the shared one, which it does not stop. What a process of its own adds (its JVM
    starting, a SIGKILL, the lease let go as the process ends) is for the tests that run the command so."""
    import contextlib
    import io
    import logging
    import subprocess

    import pytest

    from airflow_conduit.cli.main import main
    from airflow_conduit.hooks.backends import lease
    from airflow_conduit.spark import session as session_module

    argv = ["dlq", "replay", str(spec), "--state-dir", str(state), *extra]
    held, acquire = [], lease.acquire
    handlers = list(logging.getLogger().handlers)
    out, err = io.StringIO(), io.StringIO()

    def acquiring(*args, **kwargs):
        fd = acquire(*args, **kwargs)
        held.append(fd)
        return fd

    try:
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            patch.setattr(lease, "acquire", acquiring)
            patch.setattr(session_module, "build_session", lambda *args, **kwargs: spark)
            patch.setattr(spark, "stop", lambda: None)
            code = main(argv)
    finally:
        for fd in held:  # what the process's end would do
            lease.release(fd)
        for handler in logging.getLogger().handlers[len(handlers):]:
            logging.getLogger().removeHandler(handler)
            handler.close()
    return subprocess.CompletedProcess(["airflow-conduit", *argv], code, out.getvalue(), err.getvalue())
