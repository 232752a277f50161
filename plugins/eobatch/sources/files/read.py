"""Spark side of the files kind: the records of planned JSON-lines files, read in parallel pieces.

Spark's line reader splits every file into pieces (``spark.sql.files.maxPartitionBytes``, 128 MiB
by default) read by parallel tasks, so a landing file of any size streams through bounded memory.
It gives no line numbers, so a record's position is found in two steps:

1. ``read_lines``: every line gets the piece it was read from (``_metadata.file_block_start``) and
   its read-order id (``monotonically_increasing_id``: the task's partition in the high bits, the
   row's index within that task in the low bits; a piece is read by one task, its lines in order).
   That id is the provisional ``position``.
2. ``locate`` (only for the quarantined records, the only ones whose position is written): the
   lines of each piece and its first id, observed while the read numbers them
   (``eobatch.jvm.PieceLines``; without that observation one more pass over the same pieces
   counts them); a record's line number is the lines of the file's earlier pieces plus its index
   in its piece. Every read numbers the very same DataFrame (``numbered``), before any filter,
   and every located record is checked to fall inside its piece, so a numbering that differed
   between two reads would fail the stage instead of pointing at the wrong line.

Files are opened by this driver, not by name in Spark: each planned local file is opened without
following any link below the landing folder (``Storage.open_landing``), checked against the
identity the plan recorded (device, inode, size, mtime), and Spark reads ``/proc/<pid>/fd/<n>``
of that descriptor, which is the opened file itself whatever happens to its name meanwhile (a
writer that swaps it for a link to a credentials file and back reads nothing of the link). The
descriptors stay open while the batch is staged: both passes read the same files, and ``seen`` (the
stage summary's ``source_positions``, checked by verify) is their identity after the reads; then
``release`` closes them, so a run of many batches holds one batch's files at a time. A
master whose executors may run on other hosts (not ``local``, not on loopback) reads the names,
checked before the read (``changed_since_plan``) and after it (``seen``).

Objects on S3 are read by name (``s3a://``): before the read, the object under the key must be the
planned one (ETag, VersionId, LastModified, size: ``identity_problem``); the line reader opens each
with the status the plan recorded (``pins``), so s3a's change detection (``s3conf.CHANGE_DETECTION``:
``server`` mode, ETag source) sends every GET with ``If-Match`` of the planned ETag and another
object put under the key, whenever, fails the read (Parquet, read by Spark's own reader, is pinned
per stream to the ETag it opens at); after the read, ``seen`` records the object under the key
again and verify refuses the batch unless it is still the planned one. A plan from before ETags is
read by name, checked by size and mtime.

Lines are eobatch.config.lines', read by ``eobatch.jvm.BoundedLines`` (include/jvm/; Spark's text source
would hold a line of any length whole, and Hadoop's bound on it returns fragments of a long line
as lines): the bytes between two ``\\n``, kept as bytes (invalid UTF-8 is preserved for the
classifier); a ``\\r`` just before the ``\\n`` is dropped. A line longer than
``lines.max_line_bytes(max_record_bytes)`` is streamed through, never held: its row keeps its
first bytes as ``raw`` and the record's length as ``_eo_bytes`` (null for every other line), so it
is quarantined as too large at its own line, and the counts and line numbers are unchanged.
"""

from __future__ import annotations

import os
import resource
from urllib.parse import urlparse

from ...config.lines import BLANK_BYTES, SPARK_BLANK_LINE, max_line_bytes
from ...core.jvm import jvm_class
from ...storage.fs import NotARegularFile, S3StorageError, storage_for
from ..base import local_frame
from .planner import changed_since_plan, files_now, identity_problem, read_files


def _glob_escape(path: str) -> str:
    out = []
    for ch in path:
        out.append("\\" + ch if ch in "[]{}*?\\" else ch)
    return "".join(out)


_OPENED: dict[str, tuple[int, str]] = {}  # planned path -> (descriptor, the path Spark reads), this driver's


def _fd_paths_usable(spark) -> bool:
    """Can Spark's executors open this process's descriptors (``/proc/<pid>/fd``)? Only on this host."""
    if not os.path.isdir(f"/proc/{os.getpid()}/fd"):
        return False
    master = spark.sparkContext.master
    if master.startswith("local"):
        return True
    host = urlparse(master).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def open_planned(spark, rng: dict, root: str | None) -> dict[str, str]:
    """Planned path -> the path Spark reads it by (``/proc/<pid>/fd/<n>``, or the name itself);
    SystemExit naming every planned file that is not the one planned (nothing is read then)."""
    files = read_files(rng)
    local = [f for f in files if storage_for(f["path"]).scheme == "file"]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = len(local) + 256
    if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    by_fd = local and _fd_paths_usable(spark) and soft >= want
    problems: list[str] = []
    out = {}
    for f in files:
        path = f["path"]
        if path in _OPENED:
            out[path] = _OPENED[path][1]
            continue
        if not by_fd or f not in local:
            out[path] = path
            continue
        fs = storage_for(path)
        try:
            reader, info = fs.open_landing(path, root)
        except NotARegularFile as e:
            problems.append(f"{path}: {e.strerror}; refusing to read it")
            continue
        except OSError as e:
            problems.append(f"{path}: cannot be opened ({type(e).__name__}: {e.strerror or e})")
            continue
        fd = os.dup(reader.fileno())
        reader.close()
        why = identity_problem(f, info)
        if why:
            os.close(fd)
            problems.append(why)
            continue
        _OPENED[path] = (fd, f"/proc/{os.getpid()}/fd/{fd}")
        out[path] = _OPENED[path][1]
    if not by_fd:
        problems += changed_since_plan(rng, root)
    if problems:
        raise SystemExit("the planned source range changed or cannot be read since the plan; the batch range "
                         "can no longer be read exactly: " + "; ".join(problems))
    return out


def release(rng: dict) -> int:
    """Close the descriptors ``open_planned`` opened for the files of ``rng`` (once the batch is
    staged and ``seen`` recorded them): one application stages the batches of a run one after
    another, and what one batch holds is released before the next opens its own. Returns how many
    were closed."""
    closed = 0
    for f in read_files(rng):
        held = _OPENED.pop(f["path"], None)
        if held is not None:
            os.close(held[0])
            closed += 1
    return closed


def seen(rng: dict, root: str | None) -> dict:
    """What the job read, for verify (``FilesRange.check_stage``): ``{"files": {path: [size,
    *identity]}}`` of each planned file after the reads. Local: [size, device, inode, mtime_ns] of
    the descriptor read, or of the name (opened without following links) when Spark read the name.
    S3: [size, ETag, VersionId, LastModified ms] of the object under the key now: the same as
    planned only when no other object was put there since the plan (each of Spark's reads is
    pinned to one ETag, the planned one for JSON lines: a read is never of two objects)."""
    files = read_files(rng)
    now = files_now([f for f in files if f["path"] not in _OPENED], root)
    out: dict = {}
    for f in files:
        path = f["path"]
        if path in _OPENED:
            st = os.fstat(_OPENED[path][0])
            out[path] = [st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns]
            continue
        info = now[path]
        if isinstance(info, S3StorageError):
            raise info  # the job fails and is retried: an outage says nothing of the object
        out[path] = (f"{type(info).__name__}: {info.strerror or info}" if isinstance(info, OSError)
                     else [info.size, *(info.identity or [])])
    return {"files": out}


def planned_path(file_path, read_as: dict[str, str] | None = None):
    """The planned path of a file from Spark's ``_metadata.file_path`` (a percent-encoded URI);
    ``read_as``: planned path -> the path Spark read it by, when that is another one.

    A SQL expression, not a Python UDF: a UDF would start Python workers just for this.
    ``+`` is protected before url_decode, which would turn it into a space.
    """
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    local = F.regexp_replace(file_path, "^file:(//)?", "")
    decoded = F.url_decode(F.replace(local, F.lit("+"), F.lit("%2B")))
    other = {v: k for k, v in (read_as or {}).items() if v != k}
    if not other:
        return decoded
    lookup = F.create_map(*[F.lit(x) for kv in sorted(other.items()) for x in kv])
    return F.coalesce(F.element_at(lookup, decoded), decoded)


LINES_FORMAT = "eobatch.jvm.BoundedLines"  # include/jvm/, in eobatch-jvm.jar (make jars)

# Pieces per core, at least, when the files are large enough (Spark's default is one: the last of
# 5 equal pieces on 2 cores runs alone, and a core idles for a fifth of the read).
PIECES_PER_CORE = 4


def balance_pieces(spark) -> None:
    """Split the read into at least PIECES_PER_CORE pieces per core (``spark.sql.files.minPartitionNum``,
    unless the pipeline sets it), so that the cores finish together. Pieces stay between Spark's
    open cost (4 MiB) and ``maxPartitionBytes``: small files are still packed into one task."""
    if spark.conf.get("spark.sql.files.minPartitionNum", None) is None:
        spark.conf.set("spark.sql.files.minPartitionNum", str(PIECES_PER_CORE * spark.sparkContext.defaultParallelism))


def pins(rng: dict) -> str | None:
    """The line reader's ``pins`` option (``BoundedLines.PINS``): each planned S3 object with the
    ETag, version, size and mtime the plan recorded, which every GET of it must match; None for
    local files, and for a plan from before ETags (read as before: by name, checked around)."""
    objects = [f for f in read_files(rng) if storage_for(f["path"]).scheme == "s3"]
    if not objects or any(f.get("identity") is None for f in objects):
        return None
    return "\0".join("\1".join([f["path"], f["identity"][0] or "", f["identity"][1] or "", str(f["size"]),
                                  str(f["mtime_ms"])]) for f in objects)


def numbered(spark, files: list[str], max_record_bytes: int, pinned: str | None = None):
    """Every line of ``files`` (blank ones included) with ``_eo_file`` (Spark's URI of the file),
    ``_eo_split`` (the start byte of the piece it was read from), ``_eo_row`` (read-order id),
    ``value`` (the line, or its first bytes) and ``_eo_bytes`` (the record's length when ``value``
    holds only its first bytes, else null). ``pinned``: the reader's ``pins`` option (``pins``)."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    lines_class = jvm_class(spark, LINES_FORMAT)  # a clear error when the jars predate it
    if pinned is not None:
        # py4j (comes with pyspark): only in the Spark driver
        from py4j.protocol import Py4JError

        try:
            pinning = lines_class.PINS == "pins"
        except Py4JError:
            pinning = False
        if not pinning:  # an older reader would ignore the option and read whatever is under the key
            raise SystemExit(f"the stage job's JVM code ({LINES_FORMAT}, eobatch-jvm.jar) predates reading S3 objects "
                             f"pinned to their planned ETag: run `make jars`")
    balance_pieces(spark)
    reader = (spark.read.format(LINES_FORMAT).option("maxLineBytes", str(max_line_bytes(max_record_bytes)))
              .option("blankBytes", BLANK_BYTES.decode("ascii")))
    if pinned is not None:
        reader = reader.option("pins", pinned)
    df = reader.load([_glob_escape(p) for p in files])
    return df.select(F.col("_metadata.file_path").alias("_eo_file"),
                     F.col("_metadata.file_block_start").alias("_eo_split"),
                     F.monotonically_increasing_id().alias("_eo_row"), "value", F.col("bytes").alias("_eo_bytes"))


def _blank(value):
    """eobatch.config.lines' blank line, cheaply: the regular expression runs only on a line that is
    empty or starts with one of the blank bytes (almost never, for a record)."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    first = F.substring(value, 1, 1)
    return (F.octet_length(value) == 0) | (first.isin(*[chr(b) for b in BLANK_BYTES]) & value.rlike(SPARK_BLANK_LINE))


def _without_trailing_cr(value):
    """The line without a final ``\\r`` (part of a ``\\r\\n`` terminator), cut as bytes so that a
    line of invalid UTF-8 keeps its exact bytes."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    cut = F.substring(value.cast("binary"), 1, F.octet_length(value) - 1).cast("string")
    return F.when(F.endswith(value, F.lit("\r")), cut).otherwise(value)


def read_lines(spark, rng: dict, root: str | None = None, *, max_record_bytes: int, pieces=None):
    """One row per non-blank line: source (planned path), position (provisional: the read-order
    id, see ``locate``), raw, ``_eo_bytes`` (a record too long to hold: its length, ``raw`` its
    first bytes; else null) and the ``_eo_file`` / ``_eo_split`` internals. ``root``: the landing
    folder (no link below it is followed). ``pieces``: an Observation the read fills with the
    lines of each piece (``observed_pieces``), which ``locate`` then needs no read of its own for."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    read_as = open_planned(spark, rng, root)
    lines = numbered(spark, [read_as[f["path"]] for f in rng["files"]], max_record_bytes, pins(rng))
    if pieces is not None:  # every line, blank ones too, as it is numbered
        lines = lines.observe(pieces, F.call_function(_piece_lines(spark), "_eo_file", "_eo_split", "_eo_row")
                              .alias("pieces"))
    cut = F.col("_eo_bytes").isNotNull()  # the line's first bytes only: no \r of its end, blank or not by the reader
    # The filter stays above the numbering: Spark never pushes a filter below a non-deterministic
    # projection (monotonically_increasing_id), so blank lines keep their ids.
    return lines.where(cut | ~_blank(F.col("value"))).select(
        planned_path(F.col("_eo_file"), read_as).alias("source"), F.col("_eo_row").alias("position"),
        F.when(cut, F.col("value")).otherwise(_without_trailing_cr(F.col("value"))).alias("raw"),
        "_eo_bytes", "_eo_file", "_eo_split")


_PIECE_LINES_FN = "eobatch_piece_lines"


def _piece_lines(spark) -> str:
    """The name of the piece-lines aggregate (eobatch.jvm.PieceLines), registered in ``spark``'s session."""
    jvm_class(spark, "eobatch.jvm.PieceLines").register(spark._jsparkSession, _PIECE_LINES_FN)
    return _PIECE_LINES_FN


def observed_pieces(observation) -> list[tuple[str, int, int, int]] | None:
    """(file, piece start, lines, first read id) of each piece of the read that ``observation``
    watched (``read_lines``' ``pieces``); None until that read has run."""
    if observation is None or observation._jo is None or not observation._jo.future().isCompleted():
        return None
    text = observation.get["pieces"] or ""
    return [(f, int(start), int(n), int(first)) for f, start, n, first in
            (entry.split("\x01") for entry in text.split("\x02") if entry)]


def locate(spark, records, rng: dict, root: str | None = None, *, max_record_bytes: int, pieces=None):
    """``records`` (rows of ``read_lines``, ``source`` not needed) with ``source`` = the planned path
    and ``position`` = the 1-based line number in its file. ``pieces``: what the read observed of
    its pieces (``observed_pieces``); without them, one more read counts the lines of each."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    read_as = open_planned(spark, rng, root)  # the descriptors read_lines opened
    records = records.withColumn("source", planned_path(F.col("_eo_file"), read_as))
    if pieces is not None:
        pieces = local_frame(spark, "_eo_file string, _eo_split long, _eo_n long, _eo_first long", pieces)
    else:  # lazy, like the rest of the job: the counting pass runs only if the quarantine is written
        pieces = (numbered(spark, [read_as[f["path"]] for f in rng["files"]], max_record_bytes, pins(rng))
                  .groupBy("_eo_file", "_eo_split")
                  .agg(F.count("*").alias("_eo_n"), F.min("_eo_row").alias("_eo_first")))
    earlier = Window.partitionBy("_eo_file").orderBy("_eo_split").rowsBetween(Window.unboundedPreceding, -1)
    index = pieces.withColumn("_eo_before", F.coalesce(F.sum("_eo_n").over(earlier), F.lit(0)))
    located = records.join(F.broadcast(index), ["_eo_file", "_eo_split"], "left")
    k = F.col("position") - F.col("_eo_first")
    line = (F.when(F.col("_eo_first").isNotNull() & (k >= 0) & (k < F.col("_eo_n")), F.col("_eo_before") + k + 1)
            .otherwise(F.raise_error(F.concat(F.lit("cannot locate a record of "), F.col("source"),
                                              F.lit(": the two reads of the file numbered its lines differently")))))
    return located.withColumn("position", line.cast("long")).drop("_eo_first", "_eo_n", "_eo_before")
