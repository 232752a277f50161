"""Benchmark peer: Spark Structured Streaming, file source -> Delta sink, as a user writes it.

    spark-submit [--master M] [--driver-memory X] --jars <delta jars> tests/bench/peer_sss.py \
        --source <landing folder> --table <delta path> --checkpoint <folder> --schema "<DDL>"

Reads every JSON-lines file of the folder once (``trigger(availableNow=True)``) and stops.
"""

import argparse

from pyspark.sql import SparkSession


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--schema", required=True)
    args = ap.parse_args()
    spark = SparkSession.builder.appName("bench-peer-sss").getOrCreate()
    query = (spark.readStream.schema(args.schema).json(args.source)
             .writeStream.format("delta")
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True)
             .start(args.table))
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
