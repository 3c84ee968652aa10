"""The control-plane errors: one hierarchy rooted in ``AirflowException``.

Everything that can go wrong between Airflow and Spark before the data is touched (reading a
connection, submitting a run, reading its status, stopping it) raises a ``ConduitControlPlaneError``.
The backends wrap what they meet at their boundary (``httpx`` errors, ``OSError``) in one of these, so
both drivers (the operator and ``airflow-conduit run``) catch one type and decide from its class:

- ``ConnectionUnusable``: a connection (or a connector's jars) is missing or cannot be used; nothing started
  (not retried);
- ``SubmissionRefused``: the backend did not start the run (the state dir is busy, the master said no);
- ``BackendUnreachable``: the cluster or the machine could not be reached or used (after the retries);
- ``StatusUnavailable``: a run's status could not be read (after the retries).

The pure lease module (``backends/lease.py``) keeps a plain ``LeaseHeld`` of its own, because the driver
wrapper and ``airflow-conduit dlq replay`` use it without importing Airflow; the local backend re-raises it
as ``LeaseHeld`` below, which is both.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException

from airflow_conduit.hooks.backends import lease


class ConduitControlPlaneError(AirflowException):
    """A connection, a submission, a status or a stop failed: nothing about the pipeline's data."""

    transient = True  # worth another try later (the recovery engine restarts with backoff)


class ConnectionUnusable(ConduitControlPlaneError):
    """A connection the pipeline needs is missing or unusable as it is: refused before anything starts."""

    transient = False


class SparkConnectionError(ConnectionUnusable):
    """A Spark connection that cannot be used as it is (named in the message)."""


class SparkConnectionNotFound(SparkConnectionError):
    """The connection id names no connection Airflow knows."""


class KafkaConnectionError(ConnectionUnusable):
    """A Kafka connection the spec names cannot be read (missing, wrong type): names the connection and the spec."""


class ConnectorJarsUnavailable(ConnectionUnusable):
    """A Kafka or Delta connector the pipeline needs is in no jars folder and cannot be downloaded: one line
    naming the connector and the three ways to provide it (spark/connector_jars.py)."""


class SubmissionRefused(ConduitControlPlaneError):
    """The backend did not start the run."""


class StateDirBusy(SubmissionRefused):
    """Another driver of this pipeline runs, or may run, on its state dir: two drivers never share one."""


class LeaseHeld(StateDirBusy, lease.LeaseHeld):
    """Another driver of this pipeline holds the state dir's lease."""


class PreviousRunAlive(StateDirBusy):
    """The previous run of a pipeline may still be running: the next one is not submitted."""


class RestSubmissionError(SubmissionRefused):
    """The master refused a REST submission request, or answered it with something that is not JSON."""


class BackendUnreachable(ConduitControlPlaneError):
    """The cluster or this machine could not be reached or used (network, HTTP 5xx, OS error), after the retries."""


class MasterUnavailable(BackendUnreachable):
    """The master's REST API answered with a server error (retried)."""


class StatusUnavailable(ConduitControlPlaneError):
    """A run's status could not be read, after the retries."""
