"""Submissions that cannot happen now, as both drivers (the operator and ``airflow-conduit run``) catch them.

A refused submission is handed to the run supervisor (``RunSupervisor.submit``), which answers it like a
failed run: a transient infrastructure failure the recovery engine restarts or degrades on.
"""

from __future__ import annotations

import httpx

from airflow_conduit.hooks.backends.base import PreviousRunAlive
from airflow_conduit.hooks.backends.lease import LeaseHeld
from airflow_conduit.hooks.backends.standalone import MasterUnavailable, RestSubmissionError

# The previous driver not confirmed gone, the state dir's lease held, the cluster unreachable or refusing.
SUBMISSION_FAILURES = (PreviousRunAlive, LeaseHeld, RestSubmissionError, MasterUnavailable, httpx.HTTPError, OSError)
LEASE_REFUSALS = (LeaseHeld,)  # another driver holds the state dir (the holder's recovery.json is left alone)
