"""The status words of a pipeline's runs, one ``StrEnum`` per level.

The same words (``running``, ``stopped``...) mean different things at each level, so each level has its
own type: a run report's ``status`` (``RunStatus``), what a backend sees of the job (``JobState``), a
watch event's ``status`` (``WatchStatus``). The pipeline's own state (running, recovering, degraded,
stopped) is the engine's ``recovery.state.PipelineState``. Each member equals its plain string, the
value the JSON files, trigger events and XCom carry, so the serialized forms are those strings.
"""

from __future__ import annotations

from airflow_conduit.compat import StrEnum


class RunStatus(StrEnum):
    """A run report's ``status``: the Spark job's own word on its run."""

    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # ended cleanly because it was asked to (stop_reason says why): not a success

    @property
    def finished(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED)


class JobState(StrEnum):
    """A job as a backend sees it (the process or the cluster's driver), whatever its report says."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class WatchStatus(StrEnum):
    """What the watcher reports about a run: the job and its report read together."""

    RUNNING = "running"  # still running, and it has written its first records (reported once, on request)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # ended because it was asked to (its report has a stop_reason)
