"""Shared test helpers: pipelines and runs (harness), the independent readers of the tables
and the ledger (checks, s3checks), the pyarrow stager of the protocol tests, the real Airflow
stack of the scheduler tests, and the Spark reader script of the table tests."""
