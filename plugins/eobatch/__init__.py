"""eobatch: exactly-once micro-batches into Delta Lake, driven by Airflow, computed by Spark.

The package is split so that both sides can import what they share:

* ``formats``, ``storage``, ``config``, ``faults``: pure Python (no Airflow, no pyspark).
  They are shipped to Spark with ``--py-files``.
* ``protocol``, ``ledger``, ``verify``, ``sinks``, ``sources``: the two-phase commit
  itself; they use pyarrow and deltalake but neither Airflow nor pyspark.
* ``airflow_ops``, ``dag_factory``: thin Airflow declarations over the library.

Nothing here imports pyspark at module level.
"""

__version__ = "0.1.0"
