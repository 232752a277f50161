"""Files planner: JSON-lines objects of a landing folder.

Offsets are the landing objects consumed: (path, size, modification time). A batch takes
whole files, oldest first (modification time, then path), at least one, up to the record
limit and at most ``max_files_per_batch`` files (empty files count: 20,000 of them are 20 batches,
not one batch whose plan record holds them all). A file is consumed once, whenever it lands; a consumed file that later changes size
or modification time is reported (log and batch plan notes), never published again.

Files whose name starts with ``.`` or ``_`` (and files in such folders) are ignored, as Spark
does: producers should write under such a name and rename into place when complete. Of the
other files it reads those whose name ``source.include`` takes (``takes``: globs of the name,
default the kind's ``*.jsonl`` / ``*.parquet``); the others are reported on every plan while they
are there, bounded (``sources.base.not_taken_skip``: one entry of ``skipped``, one note).

The landing folder itself must be one that can be listed (``check_landing``): a folder that does
not exist, is not a folder, or cannot be read fails the plan (``LandingUnreadable``, terminal),
because its listing would be empty and every run would say "nothing new". An empty folder is
nothing new.

A landing input below it that the planner cannot take never fails the plan: a file whose name is not UTF-8,
a visible folder or a file it cannot read, a file that is no longer a regular file when it is
opened (swapped for a link, a FIFO) is skipped, the rest is planned. Each skip is logged, noted
once in the notes of a plan (``SKIP_NOTE``), and listed in ``skipped`` (the plan task's metric
and alert). A skipped file is not consumed: once it can be read it is planned like any new file
(exactly once); a name that is not UTF-8 never can be, it must be renamed.

Each planned file's identity (device, inode, mtime in ns: ``storage.FileInfo.identity``) is
recorded with its size, from the very descriptor its records were counted from (opened without
following any link below the landing folder); the stage job reads that identity and nothing else.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...config import lines
from ...core.checkpoint import SKIP_NOTE, ReadSoFar
from ...core.formats import REPLAY_DIR, REPLAY_LINEAGE, slice_name
from ...errors import TerminalError
from ...storage import s3conf
from ...storage.fs import FileInfo, NotARegularFile, is_utf8, join, printable, storage_for
from ..base import (
    MAX_FILES_PER_BATCH,
    BacklogAsk,
    IntervalTooLarge,
    LandingUnreadable,
    consumed_skip,
    not_taken_skip,
)
from .notifications import Event, EventReader, same_object

log = logging.getLogger(__name__)


class LateFiles(TerminalError):
    """Interval mode with ``source.late_files: fail``: files landed in an interval already planned."""


class FileTooLarge(TerminalError):
    """A landing file larger than the pipeline's optional ``source.max_file_bytes``."""


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()




def measured(fs, path: str, root: str | None, measure):
    """``(measure(reader, info), info)`` of a landing file opened by ``Storage.open_landing``: locally
    without following links, of the descriptor ``fstat`` described; on S3 pinned to the object HEAD
    described (a GET of another object under the key fails). What a plan records of a file (its
    records, its identity) is thereby of one and the same file. NotARegularFile, ObjectChanged, or
    the OSError of a file that cannot be read."""
    f, info = fs.open_landing(path, root)
    with f:
        return measure(f, info), info


def counted(fs, path: str, root: str | None = None) -> tuple[int, FileInfo]:
    """(records, what was counted) of a JSON-lines landing file, by the definition the Spark job
    reads them with (``eobatch.config.lines``), at most the size the open saw read (``measured``)."""
    return measured(fs, path, root, lambda f, info: lines.count_records(f, max_bytes=info.size))


def count_records(fs, path: str, root: str | None = None) -> int:
    """Records of a landing file (``counted``)."""
    return counted(fs, path, root)[0]




def _own_file(root: str, path: str) -> bool:
    """A file eobatch itself keeps in the landing folder (a replay's lineage), never data to report."""
    return path.endswith(REPLAY_LINEAGE) and path.startswith(join(root, REPLAY_DIR) + "/")


# the range keys that say where a plan's discovery got to (``source.discovery`` lexical, notification)
DISCOVERY_KEYS = ("listed_after", "full_listing_ms", "listing_done", "events")


class _Batch:
    """The files a plan takes, within its bounds: the record limit (a first file over it is taken
    alone) and ``max_files_per_batch``."""

    def __init__(self, limit: int, max_files: int):
        self.limit, self.max_files = limit, max_files
        self.chosen: list[dict] = []
        self.paths: set[str] = set()
        self.total = 0

    @property
    def full(self) -> bool:
        return len(self.chosen) >= self.max_files or self.total >= self.limit

    def add(self, entry: dict) -> bool:
        """Take ``entry`` unless the batch would pass its record limit with it (False)."""
        n = entry["records"]
        if self.chosen and self.total + n > self.limit:
            return False
        self.chosen.append(entry)
        self.paths.add(entry["path"])
        self.total += n
        return True


class _Ahead:
    """The new files of a listing measured (``FilesSource._entry``: on S3 a HEAD and a GET each) a few
    at a time ahead of the walk that takes them in order, in threads, on S3 only: one after the other,
    their round trips were most of a plan task's time there. Bounded: ``AHEAD`` in flight, none past
    the batch's room in files, none of a file over ``AHEAD_MAX_BYTES`` (its read costs more than a
    round trip: measured when the walk reaches it). What the walk never takes was measured for
    nothing: at most ``AHEAD`` small files a plan."""

    AHEAD, AHEAD_MAX_BYTES = 8, 1 << 20

    def __init__(self, measure, files, room: int):
        self._measure = s3conf.carried(measure)  # the pipeline's S3 settings in the threads too
        self._files = iter(files)
        self._room = room
        self._pending: dict[str, Any] = {}
        self._pool = ThreadPoolExecutor(self.AHEAD, thread_name_prefix="eobatch-plan")

    def entry(self, f: FileInfo) -> dict:
        """``measure(f)``: its result, or the exception it raised, as a call of it would."""
        fut = self._pending.pop(f.path, None)
        self._fill()
        return fut.result() if fut is not None else self._measure(f)

    def _fill(self) -> None:
        while len(self._pending) < min(self.AHEAD, self._room):
            f = next(self._files, None)
            if f is None:
                return
            if f.size <= self.AHEAD_MAX_BYTES:
                self._pending[f.path] = self._pool.submit(self._measure, f)
                self._room -= 1

    def __enter__(self) -> _Ahead:
        self._fill()
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _visible(root: str, path: str) -> bool:
    rel = path[len(root.rstrip("/")) + 1:]
    return not any(part.startswith((".", "_")) for part in rel.split("/"))


class FilesSource:
    kind = "files"

    def __init__(self, cfg):
        self.cfg = cfg
        self.root = cfg.source.path
        self.fs = storage_for(self.root)
        self.include: tuple[str, ...] = tuple(cfg.source.include)  # the names it reads (``takes``)
        self.not_taken: list[str] = []  # ``list_landing``: the visible files whose names it does not take
        self.skipped: list[dict] = []  # ``skip``: the landing inputs a plan left out (``list_landing`` starts them)
        self.late: list[dict] = []  # interval mode: what the last ``interval_range`` found late
        self.links: list[str] = []  # ``list_landing``: the symbolic links it saw
        self.link_notes: list[str] = []
        self._run_listing: tuple[list[FileInfo], list[dict]] | None = None  # ``begin_run``
        self._one_listing = False
        self._discovered: dict | None = None  # ``discovered``
        self._run_events: tuple[list[Event], dict[int, int], bool] | None = None  # ``begin_run``: the run's one read
        self._ahead: _Ahead | None = None  # ``_measuring``

    def list_landing(self, folders: Sequence[str] | None = None, after: str | None = None) -> list[FileInfo]:
        """The landing files to read, oldest first (``discovery: lexical``: in path order), of the whole
        landing folder (``after``: only the paths after it, and the replay folder whole), or only of
        ``folders`` (sub-folders of it, interval mode with ``interval_prefix``).

        Symbolic links are never followed (a link can point outside the landing zone, e.g. at a
        credentials file, whose text would land in the quarantine table's ``raw`` column). Each
        visible one is logged; after the call ``self.links`` holds their paths and
        ``self.link_notes`` the messages, for the batch plan's notes. Visible folders that cannot
        be read and files whose name is not UTF-8 are left out and put in ``self.skipped``
        (``skip``); ``_entry`` adds the files that cannot be opened."""
        links: list[str] = []
        unreadable: list[tuple[str, str]] = []
        self.skipped = []
        sources = [(folder, None) for folder in folders] if folders is not None else [(self.root, after)]
        if folders is None and after is not None:  # discovery lexical: a replay's names do not grow with the layout's
            sources.append((join(self.root, REPLAY_DIR), None))
        try:
            visible = list({f.path: f for folder, start in sources
                            for f in self.fs.list_files(folder, links=links, unreadable=unreadable, after=start)
                            if _visible(self.root, f.path)}.values())
        except OSError:  # a bucket that is gone or denied: said as such (LandingUnreadable), else as it failed
            self.check_landing()
            raise
        if not visible:
            # the listing of a folder that is not there, or cannot be read, is empty too: only then is the
            # folder itself looked at (on S3 a LIST call fewer per plan that finds files)
            self.check_landing()
        listed = [f for f in visible if self.takes(f.path)]
        self.not_taken = [f.path for f in visible if not self.takes(f.path) and not _own_file(self.root, f.path)]
        if self.not_taken:
            entry = not_taken_skip(self.root, self.not_taken, self.include)
            log.warning(entry["note"])
            self.skipped.append(entry)
        files = []
        for f in listed:
            if is_utf8(f.path):
                files.append(f)
            else:  # py4j, the ledger's JSON and the quarantine's source column all need text
                self.skip(f.path, "its name is not UTF-8; never read under this name: rename it (a new name is "
                          "planned like any new file)", retried=False)
        for d, why in sorted(unreadable):
            if _visible(self.root, d):
                self.skip(d, f"the folder cannot be read ({why}); its files are planned once it can be read")
        self.links = sorted({p for p in links if _visible(self.root, p)})
        self.link_notes = [f"ignored symbolic link {printable(p)} in the landing zone: links are never followed "
                           f"(a link can point outside the landing zone, e.g. at a credentials file); land a "
                           f"regular file instead" for p in self.links]
        for msg in self.link_notes:
            log.warning(msg)
        if folders is None and self.cfg.source.discovery != "full":
            return sorted(files, key=lambda f: f.path)  # path order: a plan's position never passes a file it left
        return sorted(files, key=lambda f: (f.mtime_ms, f.path))

    def takes(self, path: str) -> bool:
        """Whether this source reads a landing file of this name (``SourceConfig.takes_name``)."""
        return self.cfg.source.takes_name(path)

    def check_landing(self) -> None:
        """LandingUnreadable (terminal) when the landing folder (``source.path``) does not exist, is
        not a folder or cannot be listed, naming it, the setting and the fix: a listing of it would be
        empty, and a run would say "nothing new" for ever. A folder that exists and is empty is fine;
        on S3 a prefix with no object is an empty folder (S3 has no folders), a bucket that does not
        exist or that the credentials may not list is not."""
        why = self.fs.folder_problem(self.root)
        if why is None:
            return
        where = getattr(self.cfg, "file", None) or "the pipeline file"
        fix = ("create the bucket or give this deployment's credentials (aws_conn_id, the bucket's connection) the "
               "right to list it" if self.fs.scheme == "s3" else
               "create the folder (the producer lands files in it), make it readable by the Airflow workers, or "
               "correct source.path")
        raise LandingUnreadable(f"the landing folder {printable(self.root)} (source.path of {where}) {why}: nothing "
                                f"can be planned from it, so this plan fails rather than report \"nothing new\"; {fix}")

    def check_readable(self) -> str:
        """``Planner.check_readable``: the plan's own check of the landing folder (``check_landing``)."""
        self.check_landing()
        line = f"{printable(self.root)}: a folder it can list (it reads the files named [{', '.join(self.include)}])"
        if self.cfg.source.discovery == "notification":
            line += "; " + EventReader(self.cfg.source.notifications).check()
        return line

    def begin_run(self) -> None:
        """The ``next_range`` calls from now on plan the batches of one run (``sources.base.Planner``):
        they all plan from one listing of the landing folder (each would list it whole)."""
        self._run_listing, self._run_events, self._one_listing = None, None, True

    def discovered(self) -> dict | None:
        """``Planner.discovered``: after a lexical plan that planned nothing, its position and full
        listing time when they moved (a full listing made, consumed or void files passed)."""
        return self._discovered

    def _landing_files(self, after: str | None = None) -> list[FileInfo]:
        """``list_landing(after=after)`` of the whole folder; after ``begin_run``, the run's one listing
        (each call starting its skips from the listing's; the first call's ``after`` holds for the run:
        its later plans start after an earlier plan of the same run)."""
        if not self._one_listing:
            return self.list_landing(after=after)
        if self._run_listing is None:
            self._run_listing = (self.list_landing(after=after), list(self.skipped))
        files, skipped = self._run_listing
        self.skipped = list(skipped)
        return files

    def skip(self, path: str, why: str, retried: bool = True) -> None:
        """Leave a landing input out of this plan: logged, noted (once) and counted (``skipped``)."""
        shown = printable(path)
        note = f"{SKIP_NOTE}{shown}: {why}"
        log.warning(note)
        self.skipped.append({"path": shown, "reason": why, "retried": retried, "note": note})

    def _skip_notes(self, read) -> list[str]:
        """The notes of this plan's skips and links that no earlier plan made."""
        return [n for n in [s["note"] for s in self.skipped] + self.link_notes if not read.link_noted(n)]

    def _entry_or_skip(self, f: FileInfo) -> dict | None:
        """``_entry``, or None when the file cannot be opened now (skipped, or gone since the listing)."""
        try:
            return self._ahead.entry(f) if self._ahead is not None else self._entry(f)
        except NotARegularFile as e:
            self.skip(f.path, f"{e.strerror}; not read (it is planned if a regular file is there again)")
        except FileNotFoundError:
            log.info("%s: gone since the listing; not planned", printable(f.path))
        except OSError as e:
            self.skip(f.path, f"cannot be read ({type(e).__name__}: {e.strerror or e}); planned once it can be read")
        return None

    def next_range(self, previous_plans: Sequence, limit: int) -> tuple[dict | None, int, list[str]]:
        """(range, records, notes) of the next batch; range None when nothing is new.

        ``source.discovery`` finds the candidates: every landing file (full: a file may land late,
        anywhere in the folder), the paths after the last position passed (lexical), or the objects
        the notification topic names (notification), each of the last two with a full listing every
        ``full_listing_hours``. Whether a candidate was consumed is asked of ``previous_plans`` (a
        ``checkpoint.ReadSoFar`` from the protocol: the ledger checkpoint's file index and the plans
        after it, so the ledger's age does not matter; a plain list of plans is read whole)."""
        read = previous_plans if isinstance(previous_plans, ReadSoFar) else ReadSoFar.from_plans(previous_plans)
        notes: list[str] = []
        batch = _Batch(limit, self.cfg.source.max_files_per_batch)
        self._discovered = None
        state = self._discovery_state(read)
        if self.cfg.source.discovery == "notification":
            disc = self._notified(read, batch, state, notes)
        else:
            after, full_at = self._discovery(read)
            listed = self._landing_files(after=after)
            if full_at is not None and after is None:  # listed in path order (``list_landing``)
                notes.append(f"full listing of the landing folder (discovery: lexical, every "
                             f"{self.cfg.source.full_listing_hours} h): {len(listed)} files")
            position, _stopped = self._walk(listed, read, batch, notes, after)
            disc = {"listed_after": position, "full_listing_ms": full_at} if full_at is not None else {}
        for path, why in getattr(read, "skipped_inputs", []):  # asking ``void`` found them (a replay lineage)
            self.skip(path, why)
        notes += self._skip_notes(read)  # each link and skip in one plan's notes
        if not batch.chosen:
            if disc and disc != {k: state.get(k) for k in disc}:
                self._discovered = disc
            return None, 0, notes
        return {"files": batch.chosen, **disc}, batch.total, notes + skip_notes(batch.chosen)

    def _consider(self, f: FileInfo, read: ReadSoFar, batch: _Batch, notes: list[str]) -> str:
        """What a plan does with the landing file ``f`` it found: ``passed`` (consumed before, left
        void, or already in this batch), ``taken`` (into ``batch``), ``held`` (it cannot be read now:
        the next plan tries again) or ``stop`` (the batch is full without it)."""
        if batch.full:
            return "stop"
        if f.path in batch.paths:  # a second event of the same object
            return "passed"
        old = read.consumed(f.path)
        if old is not None:
            if (old["size"], old["mtime_ms"]) != (f.size, f.mtime_ms):
                msg = (f"changed {f.path} after it was consumed in an earlier batch "
                       f"(size {old['size']} -> {f.size}, mtime {old['mtime_ms']} -> {f.mtime_ms}); "
                       f"not published again")
                log.warning(msg)
                if not read.reported(f.path):
                    notes.append(msg)
            return "passed"
        void = read.void(f.path)
        if void is not None:  # a void replay's file: never read, said once (an alert, the gauge)
            self.skip(f.path, void, retried=False)
            return "passed"
        entry = self._entry_or_skip(f)
        if entry is None:
            return "held"
        return "taken" if batch.add(entry) else "stop"

    def _walk(self, listed: Sequence[FileInfo], read: ReadSoFar, batch: _Batch, notes: list[str],
              position: str | None) -> tuple[str | None, bool]:
        """Take the new files of a listing into ``batch``, in the listing's order: (the position in
        path order that the next listing may start after (``_advanced``), whether the batch filled
        before the listing's end)."""
        held = False  # a file that could not be taken now stops the position
        new = (f for f in listed if read.consumed(f.path) is None and read.void(f.path) is None)
        with self._measuring(new, batch):
            for f in listed:
                got = self._consider(f, read, batch, notes)
                if got == "stop":
                    return position, True
                if got == "held":
                    held = True
                    continue
                position = _advanced(self.root, position, f.path, held)
        return position, False

    @contextlib.contextmanager
    def _measuring(self, new, batch: _Batch):
        """``_entry_or_skip`` measures ``new`` (files in the walk's order) ahead of the walk (``_Ahead``,
        S3 only) while the block runs."""
        if self.fs.scheme != "s3":
            yield
            return
        with _Ahead(self._entry, new, batch.max_files - len(batch.chosen)) as ahead:
            self._ahead = ahead
            try:
                yield
            finally:
                self._ahead = None

    def _discovery_state(self, read) -> dict:
        """Where the newest plan's discovery got to (its range's ``DISCOVERY_KEYS``), or what a plan
        that planned nothing after it kept (``ReadSoFar.discovery``: newer)."""
        kept = read.discovery() if isinstance(read, ReadSoFar) else None
        if kept is not None:
            return kept
        prev = read[-1].range if read else {}
        return {k: prev.get(k) for k in DISCOVERY_KEYS}

    def _discovery(self, read) -> tuple[str | None, int | None]:
        """(after, full listing time) of the next plan: ``source.discovery: lexical`` lists the paths
        after the last plan's ``listed_after`` and keeps its full listing time, or, when there is none
        or it is ``full_listing_hours`` old, lists the whole folder (after None, now); (None, None)
        for ``full`` discovery."""
        src = self.cfg.source
        if src.discovery != "lexical":
            return None, None
        state = self._discovery_state(read)
        now = int(time.time() * 1000)
        after, full_at = state.get("listed_after"), state.get("full_listing_ms")
        if after is None or full_at is None or now - int(full_at) >= src.full_listing_hours * 3_600_000:
            return None, now
        return after, int(full_at)

    # -- source.discovery: notification ------------------------------------------------------------
    def _notified(self, read: ReadSoFar, batch: _Batch, state: dict, notes: list[str]) -> dict:
        """A plan of ``discovery: notification`` (``notifications``): the reconciliation listing when
        one is due or under way (in path order, over as many plans as it takes), then, when the batch
        has room, the objects the notification topic names after the newest plan's positions. The
        range's ``DISCOVERY_KEYS`` it returns say where both got to."""
        src = self.cfg.source
        topic = src.notifications.topic
        now = int(time.time() * 1000)
        full_at, after, done = state.get("full_listing_ms"), state.get("listed_after"), bool(state.get("listing_done"))
        events = state.get("events") or {}
        positions = {int(p): int(o) for p, o in (events.get("positions") or {}).items()}
        if events and events.get("topic") != topic:
            notes.append(f"source.notifications.topic changed from {events.get('topic')!r} to {topic!r}: the new topic is "
                         f"read from its first offset kept (objects consumed before are never read again)")
            positions = {}
        if full_at is None or now - int(full_at) >= src.full_listing_hours * 3_600_000:
            full_at, after, done = now, None, False
        if not done:
            listed = self._landing_files(after=after)
            if after is None:
                notes.append(f"reconciliation listing of the landing folder (discovery: notification, every "
                             f"{src.full_listing_hours} h): {len(listed)} files")
            after, stopped = self._walk(listed, read, batch, notes, after)
            done = not stopped
        else:  # a replay's file has no event
            self._walk(self.list_landing(folders=[join(self.root, REPLAY_DIR)]), read, batch, notes, None)
        if done and not batch.full:
            positions, lost = self._walk_events(read, batch, notes, positions)
            if lost:  # retention removed events before they were read: the next plan lists the folder
                full_at = 0
        return {"listed_after": after, "full_listing_ms": int(full_at), "listing_done": done,
                "events": {"topic": topic, "positions": {str(p): o for p, o in sorted(positions.items())}}}

    def _walk_events(self, read: ReadSoFar, batch: _Batch, notes: list[str],
                     positions: dict[int, int]) -> tuple[dict[int, int], bool]:
        """Take the objects the notification topic names after ``positions`` into ``batch``: (the
        positions after the events passed, whether events were lost to retention). An event's
        position is passed when each object it names is taken, consumed before, gone, outside the
        landing folder or not one it reads; an object that cannot be read now holds its partition
        there, and a full batch stops every partition at its first event not passed."""
        events, ends, lost = self._events(positions)
        topic = self.cfg.source.notifications.topic
        out = dict(ends)
        for i, e in enumerate(events):
            if e.problem is not None:
                self.skip(f"{topic}[{e.partition}]@{e.offset}", f"a message of the notification topic that names no "
                          f"object: {e.problem}; passed over (the reconciliation listing finds any object it was "
                          f"about)", retried=False)
            for path in e.paths:
                local = same_object(path, self.root)
                if local is None or not _visible(self.root, local) or not self.takes(local):
                    continue  # another prefix, a hidden name, a name it does not read
                f = self.fs.stat(local)
                if f is None:
                    continue  # gone since (or a link): nothing to read
                got = self._consider(f, read, batch, notes)
                if got == "stop":
                    for later in events[i:]:
                        out[later.partition] = min(out[later.partition], later.offset)
                    return out, lost
                if got == "held":
                    out[e.partition] = min(out[e.partition], e.offset)
        return out, lost

    def _notified_pending(self, read: ReadSoFar, notes: list[str], most: int = 1000) -> list[FileInfo]:
        """``backlog`` of ``discovery: notification``: the objects that the events after the newest
        plan's positions name and no plan read (at most ``most`` asked of the store)."""
        state = self._discovery_state(read)
        events = state.get("events") or {}
        same_topic = events.get("topic") == self.cfg.source.notifications.topic
        positions = {int(p): int(o) for p, o in (events.get("positions") or {}).items()} if same_topic else {}
        paths = {local for e in self._events(positions)[0] for path in e.paths
                 if (local := same_object(path, self.root)) is not None and _visible(self.root, local)
                 and self.takes(local) and read.consumed(local) is None and read.void(local) is None}
        pending = [f for path in sorted(paths)[:most] if (f := self.fs.stat(path)) is not None]
        notes.append("discovery notification: the objects named by the events not yet planned"
                     + (f" (the first {most} of {len(paths)} asked of the store)" if len(paths) > most else "")
                     + ("; a reconciliation listing is under way: files whose events were lost are not counted"
                        if not state.get("listing_done") else ""))
        return pending

    def _events(self, positions: dict[int, int]) -> tuple[list[Event], dict[int, int], bool]:
        """The notification topic's messages after ``positions`` (``EventReader.read``), the position
        after each partition's last one, and whether retention removed unread ones; after
        ``begin_run``, the run's one read (a later plan of the run starts where the one before stopped)."""
        if self._one_listing and self._run_events is not None:
            events, ends, lost = self._run_events
            return [e for e in events if e.offset >= positions.get(e.partition, 0)], ends, lost
        src = self.cfg.source.notifications
        reader = EventReader(src)
        events, ends, read_notes = reader.read(positions)
        for n in read_notes:
            log.warning(n)
        got = (events, ends, bool(reader.lost))
        if self._one_listing:
            self._run_events = got
        return got

    def interval_range(self, start_ms: int, end_ms: int, limit: int, earlier=None,
                       lookback: Sequence[tuple[int, int]] = (), published: dict | None = None,
                       ) -> tuple[dict | None, int, list[str]]:
        """Interval mode: every landing file of the interval, consumed before or not, plus the
        intervals to publish again because files landed in them after they were published.

        With ``interval_prefix`` an interval's files are those under that sub-folder (formatted
        with the interval start); without it, those whose modification time is in [start, end).
        ``lookback``: earlier intervals to check; ``published``: slice name -> the (path, size,
        mtime) set the ledger says each published interval holds. A file of a look-back interval
        outside that set is late (it landed, or was renamed into place, after its interval was
        planned; or its interval never ran). ``source.late_files`` decides: ``republish`` adds
        the whole interval as another slice of this batch (its commit replaces that slice, so
        still exactly once), ``fail`` refuses the plan naming the files, ``ignore`` logs them.
        Every file of the range carries its slice (``formats.slice_name`` of its interval start).

        With ``interval_prefix`` only the folders of this interval and of the look-back are
        listed (a plan's cost does not grow with the landing zone's age); without it, the whole
        landing folder (a file's interval is its modification time).
        """
        folders = None
        if self.cfg.source.interval_prefix:
            folders = sorted({self.interval_folder(lo) for lo, _hi in [(start_ms, end_ms), *lookback]})
        listing = self.list_landing(folders)
        chosen, notes = [], []
        self.late = []  # [{"interval", "files", "action"}]: what this call found late, for logs and metrics
        own = self.interval_files(start_ms, end_ms, listing)
        chosen += [(f, slice_name(start_ms)) for f in own]
        for lo, hi in lookback:
            files = self.interval_files(lo, hi, listing)
            held = (published or {}).get(slice_name(lo), set())
            late = [f for f in files if (f.path, f.size, f.mtime_ms) not in held]
            if not late:
                continue
            what = (f"late files in the already planned interval {_iso(lo)}/{_iso(hi)}: "
                    + ", ".join(f"{f.path} ({f.size} bytes, mtime {_iso(f.mtime_ms)})" for f in late))
            policy = self.cfg.source.late_files
            self.late.append({"interval": f"{_iso(lo)}/{_iso(hi)}", "files": [f.path for f in late], "action": policy})
            if policy == "fail":
                raise LateFiles(what + "; nothing was planned (source.late_files: fail). Publish them by running "
                                "that interval again, or set source.late_files: republish")
            if policy == "ignore":
                log.warning("%s; NOT published (source.late_files: ignore)", what)
                notes.append(what + "; not published (source.late_files: ignore)")
                continue
            log.warning("%s; the interval is published again, whole, by this batch", what)
            notes.append(what + f"; interval {_iso(lo)}/{_iso(hi)} re-published whole ({len(files)} files)")
            chosen += [(f, slice_name(lo)) for f in files]
        if len(chosen) > self.cfg.source.max_files_per_batch:  # refused before any file is opened
            raise IntervalTooLarge(f"the interval holds {len(chosen)} files"
                                   f"{' (with re-published late intervals)' if len({s for _f, s in chosen}) > 1 else ''}"
                                   f", more than max_files_per_batch={self.cfg.source.max_files_per_batch}; an "
                                   f"interval is published as one batch: raise source.max_files_per_batch (at most "
                                   f"{MAX_FILES_PER_BATCH}), or land fewer, larger files")
        entries, total = [], 0
        for f, slice_ in chosen:
            entry = self._entry_or_skip(f)
            if entry is not None:
                entries.append({**entry, "slice": slice_})
                total += entry["records"]
        notes += [s["note"] for s in self.skipped] + self.link_notes  # interval mode: every plan says it
        notes += skip_notes(entries)
        if not entries:
            return None, 0, notes
        if total > limit:
            raise IntervalTooLarge(f"the interval holds {total} records in {len(entries)} files"
                                   f"{' (with re-published late intervals)' if len({e['slice'] for e in entries}) > 1 else ''}"
                                   f", more than max_records_per_batch={limit}; an interval is published as one "
                                   f"batch: raise the limit (YAML or the run's max_records_per_batch param)")
        return {"files": entries}, total, notes

    def interval_files(self, start_ms: int, end_ms: int, listing: list[FileInfo]) -> list[FileInfo]:
        """The files of the interval [start, end): by ``interval_prefix`` folder, or by mtime."""
        if not self.cfg.source.interval_prefix:
            return [f for f in listing if start_ms <= f.mtime_ms < end_ms]
        folder = self.interval_folder(start_ms).rstrip("/") + "/"
        return [f for f in listing if f.path.startswith(folder)]

    def interval_folder(self, start_ms: int) -> str:
        """The landing sub-folder of the interval starting at ``start_ms`` (``interval_prefix``)."""
        start = dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc)
        sub = self.cfg.source.interval_prefix.format(ds=start.strftime("%Y-%m-%d"), ds_nodash=start.strftime("%Y%m%d"),
                                                     hh=start.strftime("%H"))
        return join(self.root, sub)

    def _entry(self, f: FileInfo) -> dict:
        """A planned file: path, size, mtime, identity and its records (refused when larger than
        the pipeline's own ``max_file_bytes``), all of the one file its records were counted
        from. Another landing kind (parquet) overrides this."""
        limit = self.cfg.source.max_file_bytes
        if limit is not None and f.size > limit:
            raise FileTooLarge(f"{f.path} holds {f.size} bytes, more than source.max_file_bytes={limit} of this "
                               f"pipeline; nothing was planned. Split the file, or raise or remove "
                               f"source.max_file_bytes (the stage job reads a file of any size in pieces)")
        n, info = counted(self.fs, f.path, self.root)
        return {**planned_file(info), "records": n}

    def check_unchanged(self, rng: dict) -> list[str]:
        return changed_since_plan(rng, self.root)

    counts_cheaply = False  # counting a landing file's records reads the whole file (parquet: its footer)

    def backlog(self, previous_plans: ReadSoFar, unpublished: dict | None, ask: BacklogAsk) -> dict[str, Any]:
        """``Planner.backlog``: the landing files no plan read yet (count, bytes; records when
        counting them is cheap enough) and the oldest modification time among them and among the
        files of ``unpublished``: a file's records are at least that old. After ``begin_run`` and the
        run's plans, the run's one listing (files landed since are counted by the next plan task)."""
        read = previous_plans
        notes: list[str] = []
        after = None
        if self.cfg.source.discovery == "notification":
            pending = self._notified_pending(read, notes)
        else:
            after, _full_at = self._discovery(read)
            pending = [f for f in self._landing_files(after=after)
                       if read.consumed(f.path) is None and read.void(f.path) is None]
        out: dict[str, Any] = {"files": len(pending), "bytes": sum(f.size for f in pending), "records": None}
        if after is not None:
            notes.append(f"discovery lexical: the files after {printable(after)} (a late name before it is found by "
                         f"the next full listing)")
        if not ask.count_records:
            notes.append("records not counted (not asked)")
        elif ask.count_files_limit is not None and len(pending) > ask.count_files_limit:
            notes.append(f"records not counted: {len(pending)} files not yet planned (the page counts the "
                         f"records of at most {ask.count_files_limit} files)")
        elif self.counts_cheaply or out["bytes"] <= ask.count_bytes_limit:
            try:
                out["records"] = sum(self._entry(f)["records"] for f in pending)  # the planner's own count
                notes.append("records counted as the planner counts them")
            except Exception as e:  # noqa: BLE001 - e.g. a file over max_file_bytes: the plan will say it too
                notes.append(f"records not counted: {e}")
        else:
            notes.append(f"records not counted: {out['bytes']} bytes not yet planned (counting lines reads "
                         f"every file; the page counts up to {ask.count_bytes_limit} bytes)")
        stamps = [f.mtime_ms for f in pending]
        stamps += [int(f["mtime_ms"]) for f in (unpublished or {}).get("files", []) if "mtime_ms" in f]
        out["unpublished"] = bool(stamps)
        if stamps:
            out["oldest_ms"] = min(stamps)
            notes.append("age: the oldest modification time of a landing file not yet published (planned or not)")
        else:
            notes.append("nothing unpublished: every landing file is in a committed batch")
        if self.links:
            notes.append(f"{len(self.links)} symbolic link(s) in the landing zone are never read")
        notes += [s["note"] for s in self.skipped if s.get("not_taken")]  # said while they are there
        out["not_taken"] = len(self.not_taken)
        return out | {"notes": notes}


def _advanced(root: str, position: str | None, path: str, held: bool) -> str | None:
    """``source.discovery: lexical``: the position after ``path`` was taken or passed: ``path``,
    unless a file before it is held for a later plan or it is a replay's (the replay folder is
    listed whole at each plan: its names do not grow with the layout's)."""
    if held or path.startswith(join(root, REPLAY_DIR) + "/") or (position is not None and path <= position):
        return position  # (a later plan of a run reads the run's listing, which began before the position)
    return path


def skip_notes(entries: list[dict]) -> list[str]:
    """The batch plan's notes of the planned files a kind skips (``skipped``: the reason): they
    count as consumed and are never read."""
    return [consumed_skip(e)["note"] for e in entries if e.get("skipped")]


def planned_file(info: FileInfo) -> dict:
    """The range entry of a landing file as opened: path, size, mtime_ms and (local) identity."""
    d: dict = {"path": info.path, "size": info.size, "mtime_ms": info.mtime_ms}
    if info.identity is not None:
        d["identity"] = list(info.identity)
    return d


def identity_problem(planned: dict, now: FileInfo) -> str | None:
    """Why ``now`` (a file as opened or stat'ed) is not the planned file ``planned``, or None. A
    plan recorded before identities (no ``identity``) is checked by size and mtime only."""
    path = planned["path"]
    want, got = planned.get("identity"), now.identity
    changed = (now.size, now.mtime_ms) != (planned["size"], planned["mtime_ms"])
    if want is not None and got is not None:
        if not isinstance(want[0], int):  # S3: [ETag, VersionId, LastModified ms]
            if list(want) == list(got) and not changed:
                return None
            return (f"{path}: another object than the one planned is there now (ETag {want[0]} -> {got[0]}, "
                    f"version {want[1]} -> {got[1]}, size {planned['size']} -> {now.size}, mtime "
                    f"{planned['mtime_ms']} -> {now.mtime_ms}); refusing to read it")
        if list(want[:2]) != list(got[:2]):
            return (f"{path}: another file than the one planned is there now (device/inode {want[0]}/{want[1]} -> "
                    f"{got[0]}/{got[1]}); refusing to read it")
        changed = changed or want[2] != got[2]
    if changed:
        return (f"{path}: changed since planned (size {planned['size']} -> {now.size}, "
                f"mtime {planned['mtime_ms']} -> {now.mtime_ms})")
    return None


def read_files(rng: dict) -> list[dict]:
    """The planned files of a range that the job reads: all but those planned as ``skipped``
    (consumed, never read: a Parquet footer that cannot be true)."""
    return [f for f in rng.get("files", []) if not f.get("skipped")]


def gone_files(rng: dict) -> list[str]:
    """The planned files of a range that are no longer in the landing zone (expired, moved)."""
    return [f["path"] for f in rng.get("files", []) if storage_for(f["path"]).stat(f["path"]) is None]


def files_now(files: Sequence[dict], root: str | None = None) -> dict[str, FileInfo | OSError]:
    """Each of ``files`` (planned entries) as it is now, or the OSError of looking: a local file
    opened (and closed) without following links below ``root``, an S3 object by HEAD (16 at a time:
    a batch of many objects costs what a few of them cost)."""
    def one(path: str) -> FileInfo | OSError:
        fs = storage_for(path)
        try:
            if fs.scheme == "file":
                reader, info = fs.open_landing(path, root)
                reader.close()
                return info
            return fs.stat(path) or FileNotFoundError(errno.ENOENT, "missing", path)
        except OSError as e:
            return e

    paths = [f["path"] for f in files]
    if len(paths) < 2:
        return {p: one(p) for p in paths}
    with ThreadPoolExecutor(min(16, len(paths))) as pool:
        return dict(zip(paths, pool.map(s3conf.carried(one), paths)))  # the pipeline's S3 settings too


def changed_since_plan(rng: dict, root: str | None = None) -> list[str]:
    """Problems with a batch's planned files as they are now (gone, resized, rewritten, another
    file under the name or another object under the key, a link at it or on the way from
    ``root``, the landing folder, to it).

    The stage job calls this before reading: a range that changed can no longer be read exactly,
    and a planned file replaced by a symbolic link is never read (whatever its target's size).
    """
    problems = []
    files = read_files(rng)
    now = files_now(files, root)
    for f in files:
        path, st = f["path"], now[f["path"]]
        if isinstance(st, NotARegularFile):
            problems.append(f"{path}: is now a symbolic link; refusing to read it" if storage_for(path).is_link(path)
                            else f"{path}: {st.strerror}; refusing to read it")
        elif isinstance(st, FileNotFoundError):
            problems.append(f"{path}: missing (planned {f['size']} bytes)")
        elif isinstance(st, OSError):
            problems.append(f"{path}: cannot be opened ({type(st).__name__}: {st.strerror or st})")
        elif why := identity_problem(f, st):
            problems.append(why)
    return problems
