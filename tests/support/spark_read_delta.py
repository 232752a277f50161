"""Reads Delta tables with delta-spark (the independent Spark reader of the tests).

    spark-submit --jars <delta jars> tests/support/spark_read_delta.py <table> [<table> ...]

Prints one JSON line per table: rows (sorted), history (version, operation, userMetadata-free
commit info keys starting with "eo."). With ``EOBATCH_READ_WHERE`` (a JSON list of SQL filters)
only ``where`` instead: for each filter, the rows of the table it selects (Spark's data skipping
by the Delta stats and its Parquet reader's row-group filter both on, as by default).
"""

import json
import os
import sys

from pyspark.sql import SparkSession

spark = (SparkSession.builder.appName("read-delta")
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
         # a test table's log is small: 2 tasks rebuild its state, not Delta's default 50
         .config("spark.databricks.delta.snapshotPartitions", "2").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
wheres = json.loads(os.environ.get("EOBATCH_READ_WHERE", "[]"))
for path in sys.argv[1:]:
    df = spark.read.format("delta").load(path)
    if wheres:
        found = {w: [r.asDict(recursive=True) for r in df.where(w).collect()] for w in wheres}
        print("RESULT " + json.dumps({"table": path, "where": found}, default=str), flush=True)
        continue
    rows = [r.asDict(recursive=True) for r in df.collect()]
    hist = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation").collect()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0].asDict()
    print("RESULT " + json.dumps({"table": path, "rows": rows, "history": [h.asDict() for h in hist],
                                  "partitionColumns": detail["partitionColumns"],
                                  "minReaderVersion": detail["minReaderVersion"],
                                  "minWriterVersion": detail["minWriterVersion"]}, default=str), flush=True)
