"""What the caller does next: the one vocabulary of recovery actions.

The engine decides ``RESTART`` or ``DEGRADE`` for a failure; the run supervisor
(``runs.supervisor.RunSupervisor.on_event``) adds ``WATCH`` (keep watching the same job)
and ``DONE`` (the job finished). A ``StrEnum``, so the values stay the plain
strings the audit log, the simulator's JSON and XCom always carried.
"""

from __future__ import annotations

from airflow_conduit.compat import StrEnum


class Action(StrEnum):
    RESTART = "restart"  # wait Decision.delay_seconds, then submit again
    DEGRADE = "degrade"  # stop: the pipeline is degraded
    WATCH = "watch"  # keep watching the same job (it made progress; it is still running)
    DONE = "done"  # the job finished: the pipeline is stopped
