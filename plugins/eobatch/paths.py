"""Where the product's own files are: in a checkout of its repository, or in an installed wheel.

One definition, so that nothing else in eobatch names a repository path.

* From a checkout (``plugins/eobatch`` beside ``spark_jobs/`` and ``include/``): the Spark job is
  ``spark_jobs/``, the JVM jars ``.jars/`` (``make jars``), the cache ``.cache/``, the demo's
  pipelines ``include/pipelines/``.
* Installed (``site-packages/eobatch``): the Spark job and the stage job's own JVM jar are in the
  package (``eobatch/job/spark_jobs/``, ``eobatch/job/eobatch-jvm.jar``), the Maven files that
  ``eobatch jars`` resolves in ``eobatch/job/resources/``; the jars and the cache are under the
  user's cache folder (``$XDG_CACHE_HOME/eobatch`` or ``~/.cache/eobatch``).

``EOBATCH_JARS_DIR`` and ``EOBATCH_CACHE_DIR`` override both (a cluster image with the jars at a
fixed path). Imports nothing of eobatch: every layer may ask here.
"""

from __future__ import annotations

import os

PACKAGE = os.path.dirname(os.path.abspath(__file__))
JVM_EXTENSION = "eobatch-jvm.jar"  # the stage job's own JVM code (include/jvm/)


def _checkout() -> str | None:
    root = os.path.dirname(os.path.dirname(PACKAGE))
    if os.path.basename(os.path.dirname(PACKAGE)) == "plugins" and os.path.isfile(
            os.path.join(root, "spark_jobs", "stage_batch.py")):
        return root
    return None


CHECKOUT = _checkout()  # the repository's root, or None when eobatch is installed
SPARK_JOBS = os.path.join(CHECKOUT, "spark_jobs") if CHECKOUT else os.path.join(PACKAGE, "job", "spark_jobs")
STAGE_APP = os.path.join(SPARK_JOBS, "stage_batch.py")  # spark-submit's main file
TRANSFORMS_DIR = os.path.join(SPARK_JOBS, "transforms")
# pom.xml, maven-settings.xml and the SHA-256 list of the jars (jars/spark.sha256)
RESOURCES = os.path.join(CHECKOUT, "include") if CHECKOUT else os.path.join(PACKAGE, "job", "resources")
# the JVM jar built into the wheel (a checkout builds it into .jars/ with the rest)
BUNDLED_JVM_JAR = os.path.join(PACKAGE, "job", JVM_EXTENSION)
# the documentation pages (docs/site/ of the checkout; in the wheel, eobatch/docs: `eobatch docs`)
DOCS = os.path.join(CHECKOUT, "docs", "site") if CHECKOUT else os.path.join(PACKAGE, "docs")


def user_cache() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "eobatch")


def cache_dir() -> str:
    """The code zip of the job and the JVM's class-data archive (rebuilt when missing)."""
    return os.environ.get("EOBATCH_CACHE_DIR") or (os.path.join(CHECKOUT, ".cache") if CHECKOUT else user_cache())


def jars_dir() -> str:
    """The Delta and hadoop jars of the stage job (``make jars`` / ``eobatch jars``)."""
    return os.environ.get("EOBATCH_JARS_DIR") or (
        os.path.join(CHECKOUT, ".jars") if CHECKOUT else os.path.join(user_cache(), "jars"))


def default_pipelines_dir() -> str | None:
    """The demo's folder of pipeline files of a checkout; None when installed (the DAG file, the
    ``[eobatch] pipelines_dir`` Airflow option or ``PIPELINES_DIR`` names one)."""
    return os.path.join(CHECKOUT, "include", "pipelines") if CHECKOUT else None


def demo_data_dir() -> str:
    """``${EOBATCH_DATA_DIR}`` in the demo's pipeline files."""
    return os.path.join(CHECKOUT, ".demo", "data") if CHECKOUT else os.path.join(user_cache(), "demo-data")
