"""Benchmark peer: Spark Structured Streaming, file source -> Delta sink, as a user writes it.

    spark-submit [--master M] [--driver-memory X] --jars <delta jars> tests/bench/peer_sss.py \
        --source <landing folder> --table <delta path> --checkpoint <folder> --schema "<DDL>"
        [--max-files-per-trigger N]

Reads every JSON-lines file of the folder once (``trigger(availableNow=True)``) and stops; with
``--max-files-per-trigger``, in micro-batches of that many files (a backlog drained batch by batch).
"""

import argparse

from pyspark.sql import SparkSession


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--max-files-per-trigger", type=int, default=None)
    args = ap.parse_args()
    spark = SparkSession.builder.appName("bench-peer-sss").getOrCreate()
    reader = spark.readStream.schema(args.schema)
    if args.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
    query = (reader.json(args.source)
             .writeStream.format("delta")
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True)
             .start(args.table))
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
