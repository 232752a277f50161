"""The stage job's JVM jars (Delta, hadoop-aws and its AWS SDK bundle): resolved by Maven from the
pom the product ships, into the jars folder (``paths.jars_dir``), and checked byte for byte against
the SHA-256 list the product ships (``jars/spark.sha256``): a changed, new or missing artifact is
refused before it reaches Spark. ``eobatch jars`` runs it, and so does a checkout's ``make jars``
(``make jar-lock`` writes the list).

Two sets (``SETS``, ``set_of``): ``core`` (Delta, about 13 MB), which every pipeline needs, and
``s3`` (hadoop-aws, the AWS SDK v2 bundle it declares and the S3 analytics accelerator, about
660 MB), which only a pipeline with an s3a:// location needs; the pom resolves the second only
with its profile ``s3`` (``-Ps3``). One list holds both: a folder may hold the core set or both,
never a jar the list does not name.

Maven's settings (``maven_settings``): the file ``--maven-settings`` or ``EOBATCH_MAVEN_SETTINGS``
names, else the user's own ``~/.m2/settings.xml`` (a company mirror, proxy or credentials), else the
product's (every repository read from Maven Central). Whatever repository serves the jars, they
are the listed bytes or they are refused.

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
# The sets of jars: every pipeline needs ``core``; ``s3`` only a pipeline with an s3a:// location.
SETS = ("core", "s3")
S3_JARS = ("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-")  # the names of the ``s3`` set's jars
# Maven's settings: a file named here (or by ``eobatch jars --maven-settings``), else the user's own
SETTINGS_ENV = "EOBATCH_MAVEN_SETTINGS"
PRODUCT_SETTINGS = os.path.join(RESOURCES, "maven-settings.xml")


def set_of(name: str) -> str:
    """The set (``SETS``) the listed jar ``name`` belongs to."""
    return "s3" if name.startswith(S3_JARS) else "core"


def sets_for(uses_s3: bool) -> tuple[str, ...]:
    """The sets a pipeline needs: ``core``, and ``s3`` when it has an s3a:// location."""
    return ("core", "s3") if uses_s3 else ("core",)


def fetch_command(sets: tuple[str, ...] | list[str] = ("core",)) -> str:
    """The command that puts the jars of ``sets`` into the jars folder (a checkout's `make jars`
    fetches both)."""
    if paths.CHECKOUT:
        return "make jars"
    return "eobatch jars --with s3" if "s3" in sets else "eobatch jars"


def _sets(sets) -> tuple[str, ...]:
    chosen = tuple(SETS if sets is None else sets)
    unknown = sorted(set(chosen) - set(SETS))
    if unknown:
        raise UsageError(f"unknown set of jars {', '.join(unknown)}: the sets are {', '.join(SETS)}")
    return tuple(s for s in SETS if s in chosen or s == "core")


def maven_settings(explicit: str | None = None, environ=None) -> tuple[str, str]:
    """(the settings file Maven runs with, why that one): ``explicit`` (``--maven-settings``), else
    ``EOBATCH_MAVEN_SETTINGS``, else the user's ``~/.m2/settings.xml`` when it exists (their
    repository manager, proxy, credentials: honoured), else the product's, which reads every
    repository from Maven Central. A file named but missing is a UsageError naming it."""
    env = os.environ if environ is None else environ
    for path, source in ((explicit, "--maven-settings"), (env.get(SETTINGS_ENV), SETTINGS_ENV)):
        if path:
            if not os.path.isfile(path):
                raise UsageError(f"{source} names {path}, which is no file: name the Maven settings file of your "
                                 f"repository (or unset it: the user's ~/.m2/settings.xml, else Maven Central)")
            return os.path.abspath(path), source
    home = env.get("HOME") or os.path.expanduser("~")
    user = os.path.join(home, ".m2", "settings.xml")
    if os.path.isfile(user):
        return user, "the user's Maven settings"
    return PRODUCT_SETTINGS, f"no {user}: Maven Central only"


def mvn_command(mvn: str, settings: str, out: str, sets=None) -> list[str]:
    """The Maven command that resolves the jars of ``sets`` into ``out`` with ``settings``."""
    cmd = [mvn, "--batch-mode", "--quiet", "--strict-checksums", "-s", settings,
           "-f", os.path.join(RESOURCES, "pom.xml")]
    if "s3" in _sets(sets):
        cmd.append("-Ps3")
    return [*cmd, f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
            f"-DincludeGroupIds={SPARK_JAR_GROUPS}", f"-DexcludeArtifactIds={EXCLUDED_ARTIFACTS}",
            f"-DoutputDirectory={out}"]


class JarsRefused(TerminalError):
    """The jars folder is not the listed jars: a person puts them back (``JARS_COMMAND``)."""


def listed(list_file: str | None = None, sets=None) -> dict[str, str]:
    """{jar name: SHA-256} of the list the product ships: the jars of ``sets`` (default: all)."""
    chosen = _sets(sets)
    out = {}
    with open(list_file or LIST_FILE) as f:
        for line in f:
            if line.strip():
                digest, name = line.split()
                name = name.removeprefix("./")
                if set_of(name) in chosen:
                    out[name] = digest
    return out


def held_sets(folder: str | None = None, list_file: str | None = None) -> tuple[str, ...]:
    """The sets of which ``folder`` (default ``jars_dir()``) holds at least one listed jar."""
    folder = folder or jars_dir()
    names = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    held = {set_of(n) for n in names & set(listed(list_file))}
    return tuple(s for s in SETS if s in held)


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


def problems(folder: str | None = None, list_file: str | None = None, sets=None) -> list[str]:
    """What is wrong with the jars of ``folder`` (default ``jars_dir()``) against the list: missing
    jars of ``sets`` (default: all), unexpected jars (not in the list) or changed ones (the stage
    job's own JVM jar is built, never listed); [] when none."""
    folder = folder or jars_dir()
    want, need = listed(list_file), listed(list_file, sets)
    if not os.path.isdir(folder):
        return [f"no jars folder {folder}"]
    have = {n for n in os.listdir(folder) if n.endswith(".jar") and n != JVM_EXTENSION}
    out = [f"missing {n}" for n in sorted(set(need) - have)]
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


def checked(folder: str | None = None, list_file: str | None = None, sets=None) -> list[str]:
    """The paths of the listed jars of ``sets`` (default: all) in ``folder`` (default ``jars_dir()``),
    checked at each launch: every jar of those sets there, no jar the list does not name, each with
    its listed SHA-256 (hashed once per file identity, then a ``stat`` each), in a folder other users
    cannot write. The folder may be read-only (a pre-built image layer): nothing is written to it.
    JarsRefused names what is wrong and the command that puts the listed jars back; FileNotFoundError
    when the folder holds none of them."""
    folder = folder or jars_dir()
    chosen = _sets(sets)
    want = listed(list_file, chosen)
    command = fetch_command(chosen)
    if not os.path.isdir(folder) or not set(listed(list_file)) & set(os.listdir(folder)):
        raise FileNotFoundError(f"no JVM jars in {folder}: run `{command}` (Maven resolves the Delta"
                                f"{' and hadoop-aws' if 's3' in chosen else ''} jars into it; EOBATCH_JARS_DIR names "
                                f"another folder, e.g. a pre-built one)")
    found = problems(folder, list_file, chosen)
    if found:
        held = held_sets(folder, list_file)
        if "s3" in chosen and "s3" not in held and all(p.startswith("missing ") for p in found) and \
                not problems(folder, list_file, ("core",)):
            raise JarsRefused(f"the jars folder {folder} holds only the core jars (Delta); a pipeline with s3a:// "
                              f"locations also needs the s3 set (hadoop-aws and the AWS SDK bundle, about 660 MB): "
                              f"run `{command}` (EOBATCH_JARS_DIR names another folder)")
        raise JarsRefused(f"the jars folder {folder} does not hold exactly the jars of {list_file or LIST_FILE}, "
                          f"refused (no stage job runs with them): {'; '.join(found[:10])}. Run `{command}`: it "
                          f"resolves the listed jars again and replaces the folder")
    loose = _writable_by_others(folder, sorted(want))
    if loose:
        raise JarsRefused(f"other users can write {', '.join(loose[:5])}: any of them could replace a jar after "
                          f"it is checked; refused until `chmod o-w` on them (or run `{command}` again)")
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
            write_list: str | None = None, sets=None, settings: str | None = None) -> str:
    """Resolve the jars of ``sets`` (default ``core`` only; those the folder holds already are kept)
    with Maven into ``folder`` (default ``jars_dir()``), check them, and return the folder. Maven runs
    with ``maven_settings(settings)``. Resolved into a new folder first: a failed or refused
    resolution leaves the old jars in place. UsageError when Maven is missing or the result is not
    the listed jars. ``write_list``: after a reviewed pom change (`make jar-lock`), write that
    SHA-256 list from what Maven resolved (every set) instead of checking against it."""
    folder = folder or jars_dir()
    chosen = SETS if write_list is not None else _sets(tuple(sets or ("core",)) + held_sets(folder))
    settings_file, why = maven_settings(settings)  # a file named but missing is said even when nothing is fetched
    if write_list is None and not problems(folder, sets=chosen):
        log(f"jars: {folder} already holds the {len(listed(sets=chosen))} listed jars of the set(s) "
            f"{', '.join(chosen)}")
        return folder
    mvn = mvn or shutil.which("mvn")
    if not mvn:
        raise UsageError("eobatch jars needs Maven (`mvn` on PATH, e.g. `apt-get install maven`), or put the listed "
                         f"jars ({LIST_FILE}) in {folder} yourself, or point EOBATCH_JARS_DIR at a pre-built folder "
                         "of them (checked against the list at each launch; no Maven needed there)")
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".jars-", dir=parent)
    try:
        cmd = mvn_command(mvn, settings_file, work, chosen)
        log(f"jars: the set(s) {', '.join(chosen)}, Maven settings {settings_file} ({why})")
        log(f"jars: {' '.join(cmd)}")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise UsageError(f"Maven could not resolve the jars (exit {r.returncode}, settings {settings_file}: "
                             f"{why}): {(r.stdout + r.stderr)[-2000:]}")
        if write_list is not None:
            names = sorted(n for n in os.listdir(work) if n.endswith(".jar"))
            with open(write_list, "w") as f:
                f.writelines(f"{_sha256(os.path.join(work, n))}  {n}\n" for n in names)
            log(f"jars: wrote the SHA-256 of {len(names)} jars to {write_list}")
        found = problems(work, write_list, chosen)
        if found:
            raise UsageError(f"the jars Maven resolved (settings {settings_file}) are not the listed ones, refused: "
                             + "; ".join(found))
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
    log(f"jars: {len(listed(sets=chosen))} jars in {folder}, each with its listed SHA-256")
    return folder
