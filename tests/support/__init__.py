"""Shared test helpers: pipelines and runs (harness), the independent readers of the tables
and the ledger (checks, s3checks), the pyarrow stager of the protocol tests, the real Airflow
stack of the scheduler tests, and the Spark reader script of the table tests.

Helpers shared by several unit test modules: batches through the real protocol (protocol_runs),
ledger records (records) and a ledger written record by record (ledger_book), landing zones
(landing), pipeline YAML (pipeline_yaml), a storage that counts its calls (counting), made-up S3
settings (s3env)."""
