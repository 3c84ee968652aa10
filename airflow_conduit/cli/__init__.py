"""The ``airflow-conduit`` command line."""
