"""Provider utilities: recovery options from the provider config and an Airflow Variable."""
