"""spark-submit script (tests): the stage job's JSON-lines read of a planned S3 object that is
overwritten after the job checked it and before Spark reads it.

    spark-submit --jars ... s3_read_after_overwrite.py <base64 JSON {"range", "root", "overwrite"}>

Builds the session as the stage job has it (s3a settings of ``launch.spark_conf`` are passed by the
caller as --conf), calls ``files.read.read_lines`` (which checks each object against the plan),
then puts ``overwrite`` under the first planned key and only then runs the read. Prints
``RESULT {"raws": [...]}`` or ``RESULT {"error": "..."}``.
"""

from __future__ import annotations

import base64
import json
import sys


def main() -> None:
    from pyspark.sql import SparkSession

    from eobatch.sources.files.read import read_lines
    from eobatch.storage.fs import S3Storage

    spec = json.loads(base64.b64decode(sys.argv[1]))
    spark = SparkSession.builder.getOrCreate()
    lines = read_lines(spark, spec["range"], spec["root"], max_record_bytes=1 << 20)
    S3Storage().write_atomic(spec["range"]["files"][0]["path"], spec["overwrite"].encode())
    out: dict[str, object]
    try:
        out = {"raws": sorted(r["raw"] for r in lines.select("raw").collect())}
    except Exception as e:  # noqa: BLE001 - the test reads what it was
        causes = [x.strip() for x in str(e).splitlines() if "Exception" in x or "Caused by" in x]
        out = {"error": f"{type(e).__name__}: " + "\n".join(causes[:20])}
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
