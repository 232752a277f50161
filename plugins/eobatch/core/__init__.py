"""eobatch.core: the exactly-once protocol itself, as plain Python over the ledger and the tables.

Holds ``protocol/`` (``state``: its pure decisions; ``verbs``: plan, verify, commit, abort,
recover; ``repairs``: rewind, reset, sweep), the ledger and its records (``ledger``,
``checkpoint``, ``formats``), verify's checks of a staged attempt (``verify``), fault injection
(``faults``), replays, the backlog, one
DAG run's batch (``batch_run``), maintenance, the Delta log's file actions (``table_files``) and
the plug-in ``registry`` that ``sources`` and ``sinks`` are built on.

May import: ``eobatch.errors``, ``eobatch.config``, ``eobatch.storage``, ``eobatch.sources``, ``eobatch.sinks`` (the
kinds, through their registries), pyarrow and deltalake (deltalake inside functions).
Must not import: Apache Airflow, pyspark, ``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``,
``eobatch.cli`` (tests/unit/test_packages.py checks every import statement).
"""
