"""The stage job's own JVM code (include/jvm/, ``eobatch-jvm.jar``, built by ``make jars``), as the
Spark driver sees it. No pyspark import at module level."""

from __future__ import annotations

from typing import Any


def jvm_class(spark: Any, name: str) -> Any:  # a SparkSession: core names nothing of pyspark
    """The py4j class ``name`` of the JVM extension; SystemExit saying how to build it when the
    jars given to spark-submit do not hold it (an old or missing ``eobatch-jvm.jar``)."""
    # py4j (comes with pyspark): only in the Spark driver
    from py4j.java_gateway import JavaClass

    cls: Any = spark._jvm
    for part in name.split("."):
        cls = getattr(cls, part)
    if not isinstance(cls, JavaClass):
        raise SystemExit(f"the stage job needs its JVM code ({name}, eobatch-jvm.jar) among the jars "
                         f"given to spark-submit: run `make jars`, which builds it with a JDK's javac")
    return cls
