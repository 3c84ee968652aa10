"""What a pipeline task records in Airflow, by name: the operator writes these, the UI plugin reads them.

A leaf module (it imports nothing): the operators and the plugin both depend on it, never on each other.
"""

STORE_KEY = "conduit_recovery"  # task_state_store key of the run supervisor's carry (RunSupervisor.carry)
XCOM_STATE = "pipeline_state"  # Conduit's pipeline state (running, recovering, degraded, ...)
XCOM_AUDIT = "audit_log"  # the recovery audit log
XCOM_SUMMARY = "return_value"  # Airflow's key for what execute() returns (the run summary)
XCOM_JOB = "conduit_job"  # the current job handle (spark_ui inside)
XCOM_DLQ = "conduit_dlq"  # where the DLQ is (file URL or a description)
