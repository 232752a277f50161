"""The stage job's JVM jars (Delta, hadoop-aws and its AWS SDK bundle): resolved by Maven from the
pom the product ships, into the jars folder (``paths.jars_dir``), and checked byte for byte against
the SHA-256 list the product ships (``jars/spark.sha256``): a changed, new or missing artifact is
refused before it reaches Spark. ``eobatch jars`` runs it, and so does a checkout's ``make jars``
(``make jar-lock`` writes the list).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable

from ..errors import UsageError
from ..paths import JVM_EXTENSION, RESOURCES, jars_dir

# the groups of the pom's dependencies Spark needs on its class path (the rest is Spark's own)
SPARK_JAR_GROUPS = "io.delta,org.apache.hadoop,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator"
EXCLUDED_ARTIFACTS = "hadoop-client-api,hadoop-client-runtime"
# The Maven plugin that copies them, by its full coordinates: the pom pins the same version (a bare
# ``dependency:`` prefix would run whatever version the installed Maven defaults to).
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.11.0"


def listed(list_file: str | None = None) -> dict[str, str]:
    """{jar name: SHA-256} of the list the product ships."""
    out = {}
    with open(list_file or os.path.join(RESOURCES, "jars", "spark.sha256")) as f:
        for line in f:
            if line.strip():
                digest, name = line.split()
                out[name.removeprefix("./")] = digest
    return out


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def problems(folder: str | None = None, list_file: str | None = None) -> list[str]:
    """What is wrong with the jars of ``folder`` (default ``jars_dir()``) against the list: missing,
    unexpected or changed jars (the stage job's own JVM jar is built, never listed); [] when none."""
    folder = folder or jars_dir()
    want = listed(list_file)
    if not os.path.isdir(folder):
        return [f"no jars folder {folder}"]
    have = {n for n in os.listdir(folder) if n.endswith(".jar") and n != JVM_EXTENSION}
    out = [f"missing {n}" for n in sorted(set(want) - have)]
    out += [f"not in the list: {n}" for n in sorted(have - set(want))]
    out += [f"{n} does not have the listed SHA-256" for n in sorted(have & set(want))
            if _sha256(os.path.join(folder, n)) != want[n]]
    return out


def resolve(folder: str | None = None, mvn: str | None = None, log: Callable[[str], None] = print,
            write_list: str | None = None) -> str:
    """Resolve the jars with Maven into ``folder`` (default ``jars_dir()``), check them, and return
    the folder. Resolved into a new folder first: a failed or refused resolution leaves the old
    jars in place. UsageError when Maven is missing or the result is not the listed jars.
    ``write_list``: after a reviewed pom change (`make jar-lock`), write that SHA-256 list from
    what Maven resolved instead of checking against it."""
    folder = folder or jars_dir()
    mvn = mvn or shutil.which("mvn")
    if not mvn:
        raise UsageError("eobatch jars needs Maven (`mvn` on PATH, e.g. `apt-get install maven`), or put the listed "
                         f"jars ({os.path.join(RESOURCES, 'jars', 'spark.sha256')}) in {folder} yourself "
                         "(EOBATCH_JARS_DIR names another folder)")
    if write_list is None and not problems(folder):
        log(f"jars: {folder} already holds the {len(listed())} listed jars")
        return folder
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".jars-", dir=parent)
    try:
        cmd = [mvn, "--batch-mode", "--quiet", "--strict-checksums", "-s", os.path.join(RESOURCES, "maven-settings.xml"),
               "-f", os.path.join(RESOURCES, "pom.xml"), f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
               f"-DincludeGroupIds={SPARK_JAR_GROUPS}", f"-DexcludeArtifactIds={EXCLUDED_ARTIFACTS}",
               f"-DoutputDirectory={work}"]
        log(f"jars: {' '.join(cmd)}")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise UsageError(f"Maven could not resolve the jars (exit {r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
        if write_list is not None:
            names = sorted(n for n in os.listdir(work) if n.endswith(".jar"))
            with open(write_list, "w") as f:
                f.writelines(f"{_sha256(os.path.join(work, n))}  {n}\n" for n in names)
            log(f"jars: wrote the SHA-256 of {len(names)} jars to {write_list}")
        found = problems(work, write_list)
        if found:
            raise UsageError("the jars Maven resolved are not the listed ones, refused: " + "; ".join(found))
        own = os.path.join(folder, JVM_EXTENSION)
        if os.path.isfile(own):  # a checkout's built JVM jar stays
            shutil.copy2(own, os.path.join(work, JVM_EXTENSION))
        old = folder + ".old"
        shutil.rmtree(old, ignore_errors=True)
        if os.path.isdir(folder):
            os.replace(folder, old)
        os.replace(work, folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"jars: {len(listed())} jars in {folder}, each with its listed SHA-256")
    return folder
