"""Submissions that cannot happen now, as both drivers (the operator and ``airflow-conduit run``) catch them.

A refused submission is handed to the run supervisor (``RunSupervisor.submit``), which answers a transient
one like a failed run (the recovery engine restarts or degrades) and raises one that is not transient.
"""

from __future__ import annotations

from airflow_conduit.hooks.errors import ConduitControlPlaneError, LeaseHeld

SUBMISSION_FAILURES = (ConduitControlPlaneError,)
LEASE_REFUSALS = (LeaseHeld,)  # another driver holds the state dir (the holder's recovery.json is left alone)
