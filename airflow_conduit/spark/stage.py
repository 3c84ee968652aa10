"""Where in the pipeline the driver is working now: a failure is classified and reported with it."""

from __future__ import annotations

from dataclasses import dataclass

Where = tuple[str, str | None, str | None]  # (stage, component id, component type) of a StructuredError
RUNNER: Where = ("runner", None, None)


@dataclass
class StageTracker:
    """The stage the run is in (source, processor, destination, dlq or runner), set as it moves on.

    The runner and its batch pass both move it; the runner reads it when something fails, because the
    Python context of an exception is lost once it has crossed into the JVM and back.
    """

    where: Where = RUNNER

    def at(self, stage: str, component_id: str | None = None, component_type: str | None = None) -> None:
        self.where = (stage, component_id, component_type)

    def reset(self) -> None:
        """Back to the runner's own work (between the stages of a batch)."""
        self.where = RUNNER
