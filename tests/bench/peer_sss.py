"""Benchmark peer: Spark Structured Streaming, file source -> Delta sink, as a user writes it.

    spark-submit [--master M] [--driver-memory X] --jars <delta jars> tests/bench/peer_sss.py \
        --source <landing folder> --table <delta path> --checkpoint <folder> --schema "<DDL>"
        [--max-files-per-trigger N] [--progress FILE.json]

Reads every JSON-lines file of the folder once (``trigger(availableNow=True)``) and stops; with
``--max-files-per-trigger``, in micro-batches of that many files (a backlog drained batch by batch).
``--progress``: after the query ended, write what the driver saw of it there (nothing of it is
timed by the query): ``query_seconds``, from ``start()`` (the query reads its checkpoint: the
file source restores the files it has seen) to the end of ``awaitTermination()``, and Spark's own
progress of each micro-batch (``recentProgress``: rows read, ``durationMs`` by phase).
"""

import argparse
import json
import time

from pyspark.sql import SparkSession


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--max-files-per-trigger", type=int, default=None)
    ap.add_argument("--progress", default=None)
    args = ap.parse_args()
    spark = SparkSession.builder.appName("bench-peer-sss").getOrCreate()
    reader = spark.readStream.schema(args.schema)
    if args.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
    t = time.perf_counter()
    query = (reader.json(args.source)
             .writeStream.format("delta")
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True)
             .start(args.table))
    query.awaitTermination()
    took = time.perf_counter() - t
    if args.progress:
        batches = [json.loads(p.json) for p in query.recentProgress]
        with open(args.progress, "w") as f:
            json.dump({"query_seconds": took, "batches": batches}, f)
    spark.stop()


if __name__ == "__main__":
    main()
