"""eobatch.core: the vocabulary the kinds and the protocol are built on, as plain Python over the
ledger and the tables.

Holds the ledger and its records (``ledger``, ``checkpoint``, ``formats``), the files the product
writes into a table and their statistics (``table_files``), fault injection (``faults``), the
stuck detector (``stuck``, from the ledger alone), the plug-in ``registry`` that ``sources``
and ``sinks`` are built on, and the stage job's own JVM classes as its Spark driver reaches them
(``jvm``: py4j inside a function, only where Spark runs). The protocol that drives the kinds is the package above them,
``eobatch.protocol``.

May import: ``eobatch.errors``, ``eobatch.config``, ``eobatch.storage``, pyarrow and deltalake
(deltalake inside functions).
Must not import: Apache Airflow, pyspark, the layers above it (``eobatch.sources``,
``eobatch.sinks``, ``eobatch.pipelines``, ``eobatch.protocol``), ``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``,
``eobatch.cli`` (tests/unit/test_packages.py checks every import statement).
"""
