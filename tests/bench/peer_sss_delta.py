"""Benchmark peer: Spark Structured Streaming reading a Delta table as a stream into another Delta
table, as a user writes it (``readStream.format("delta")``, ``trigger(availableNow=True)``).

    spark-submit [--master M] [--driver-memory X] --jars <delta jars> tests/bench/peer_sss_delta.py \
        --source <upstream Delta table> --table <delta path> --checkpoint <folder>
"""

import argparse

from pyspark.sql import SparkSession


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--checkpoint", required=True)
    args = ap.parse_args()
    spark = SparkSession.builder.appName("bench-peer-sss-delta").getOrCreate()
    query = (spark.readStream.format("delta").load(args.source)
             .writeStream.format("delta")
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True)
             .start(args.table))
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
