"""SQLite settings for a local Airflow whose scheduler, dag-processor, api-server and CLI share
one database file: wait for a lock instead of failing at once ("database is locked").

Use with ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=eobatch.airflow_sqlite.CONNECT_ARGS`` and
put the database in WAL mode (``eobatch.airflow_sqlite.use_wal(path)``). Production Airflow
runs on PostgreSQL; this is for the demo and the tests.
"""

CONNECT_ARGS = {"timeout": 60}
CONNECT_ARGS_ASYNC = {"timeout": 60}


def use_wal(db_path: str) -> None:
    import sqlite3

    with sqlite3.connect(db_path) as c:
        c.execute("PRAGMA journal_mode=WAL")
