"""Benchmark peer: a plain batch append of the landing files to Delta, as a user writes it.

    spark-submit [--master M] [--driver-memory X] --jars <delta jars> tests/bench/peer_append.py \
        --table <delta path> --schema "<DDL>" <file> [<file> ...]
"""

import argparse

from pyspark.sql import SparkSession


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    spark = SparkSession.builder.appName("bench-peer-append").getOrCreate()
    spark.read.schema(args.schema).json(args.files).write.format("delta").mode("append").save(args.table)
    spark.stop()


if __name__ == "__main__":
    main()
