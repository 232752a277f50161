"""The stage job's JVM jars (Delta, hadoop-aws and its AWS SDK bundle): resolved by Maven from the
pom the product ships, into the jars folder (``paths.jars_dir``), and checked byte for byte against
the SHA-256 list the product ships (``jars/spark.sha256``): a changed, new or missing artifact is
refused before it reaches Spark. ``eobatch jars`` runs it, and so does a checkout's ``make jars``
(``make jar-lock`` writes the list).

Every launch checks them again (``checked``, which ``launch.jars`` calls): the jars it puts on the
class path are exactly the listed ones, each with its listed SHA-256 (hashed once per file identity,
``integrity``); a changed, unknown or missing jar is refused with the command that puts the listed
ones back. The stage job's own JVM jar is the one built into the installed package
(``own_jvm_jar``), never a file of the jars folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

from .. import paths
from ..errors import TerminalError, UsageError
from ..paths import JVM_EXTENSION, RESOURCES, jars_dir
from . import integrity

# the groups of the pom's dependencies Spark needs on its class path (the rest is Spark's own)
SPARK_JAR_GROUPS = "io.delta,org.apache.hadoop,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator"
EXCLUDED_ARTIFACTS = "hadoop-client-api,hadoop-client-runtime"
# The Maven plugin that copies them, by its full coordinates: the pom pins the same version (a bare
# ``dependency:`` prefix would run whatever version the installed Maven defaults to).
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.11.0"
# The SHA-256 list the product ships, and the command that fills the jars folder with its jars.
LIST_FILE = os.path.join(RESOURCES, "jars", "spark.sha256")
JARS_COMMAND = "make jars" if paths.CHECKOUT else "eobatch jars"


class JarsRefused(TerminalError):
    """The jars folder is not the listed jars: a person puts them back (``JARS_COMMAND``)."""


def listed(list_file: str | None = None) -> dict[str, str]:
    """{jar name: SHA-256} of the list the product ships."""
    out = {}
    with open(list_file or LIST_FILE) as f:
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


def _digest_cache() -> str | None:
    """The owner-only cache folder that remembers the jars' digests, or None (hash every time)."""
    try:
        return integrity.private_dir(paths.cache_dir())
    except OSError:
        return None


def _changed(path: str, digest: str, cache: str | None) -> str | None:
    """Why the jar at ``path`` is not the listed one, or None when it is."""
    try:
        if integrity.sha256(path, cache) == digest:
            return None
    except integrity.Changing:
        return f"{os.path.basename(path)} changed while it was checked"
    except OSError:
        return f"{os.path.basename(path)} is not a readable regular file"
    return f"{os.path.basename(path)} does not have the listed SHA-256"


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
    cache = _digest_cache()
    out += [p for n in sorted(have & set(want)) if (p := _changed(os.path.join(folder, n), want[n], cache))]
    return out


def _writable_by_others(folder: str, names: list[str]) -> list[str]:
    """The folder and the jars of it that users other than its owner's group can write (another
    user could swap a jar between the check and Spark's read)."""
    out = []
    for path in [folder, *(os.path.join(folder, n) for n in names)]:
        try:
            if os.stat(path).st_mode & 0o002:
                out.append(path)
        except OSError:
            pass
    return out


def checked(folder: str | None = None, list_file: str | None = None) -> list[str]:
    """The paths of the listed jars of ``folder`` (default ``jars_dir()``), checked at each launch:
    exactly the listed jars, each with its listed SHA-256 (hashed once per file identity, then a
    ``stat`` each), in a folder other users cannot write. JarsRefused names what is wrong and the
    command that puts the listed jars back; FileNotFoundError when the folder holds none of them."""
    folder = folder or jars_dir()
    want = listed(list_file)
    if not os.path.isdir(folder) or not set(want) & set(os.listdir(folder)):
        raise FileNotFoundError(f"no JVM jars in {folder}: run `{JARS_COMMAND}` (Maven resolves the Delta and "
                                f"hadoop jars into it; EOBATCH_JARS_DIR names another folder)")
    found = problems(folder, list_file)
    if found:
        raise JarsRefused(f"the jars folder {folder} does not hold exactly the jars of {list_file or LIST_FILE}, "
                          f"refused (no stage job runs with them): {'; '.join(found[:10])}. Run `{JARS_COMMAND}`: it "
                          f"resolves the listed jars again and replaces the folder")
    loose = _writable_by_others(folder, sorted(want))
    if loose:
        raise JarsRefused(f"other users can write {', '.join(loose[:5])}: any of them could replace a jar after "
                          f"it is checked; refused until `chmod o-w` on them (or run `{JARS_COMMAND}` again)")
    return [os.path.join(folder, n) for n in sorted(want)]


def own_jvm_jar(folder: str | None = None) -> str:
    """The stage job's own JVM jar (include/jvm/): the one built into the installed package, never
    a file of the jars folder (one there that differs is ignored, with a note). A checkout, which
    has none built in, uses the one ``make jars`` built into its jars folder."""
    folder = folder or jars_dir()
    there, bundled = os.path.join(folder, JVM_EXTENSION), paths.BUNDLED_JVM_JAR
    if os.path.isfile(bundled):
        if os.path.isfile(there) and _changed(there, integrity.sha256(bundled, _digest_cache()), _digest_cache()):
            print(f"eobatch: {there} is not the {JVM_EXTENSION} of the installed package: ignored, the package's "
                  f"is used ({bundled})", file=sys.stderr)
        return bundled
    if paths.CHECKOUT and os.path.isfile(there):
        return there
    if paths.CHECKOUT:
        raise FileNotFoundError(f"{folder} has no {JVM_EXTENSION} (the stage job's own JVM code, include/jvm/): "
                                f"run `make jars`, which compiles it with a JDK's javac")
    raise FileNotFoundError(f"the installed eobatch has no {bundled} (the stage job's own JVM code): "
                            f"install the eobatch wheel again")


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
        if paths.CHECKOUT and os.path.isfile(own):  # a checkout's built JVM jar stays (an installed one is the package's)
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
