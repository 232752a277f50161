"""Files source: JSON-lines objects of a landing folder.

Offsets are the landing objects consumed: (path, size, modification time). A batch takes
whole files, oldest first (modification time, then path), at least one, up to the record
limit. A file is consumed once, whenever it lands; a consumed file that later changes size
or modification time is reported (log and batch plan notes), never published again.

Files whose name starts with ``.`` or ``_`` (and files in such folders) are ignored, as Spark
does: producers should write under such a name and rename into place when complete.
"""

from __future__ import annotations

import logging

from .. import lines
from ..storage import FileInfo, join, storage_for
from .kafka import IntervalTooLarge

log = logging.getLogger(__name__)


def count_records(fs, path: str) -> int:
    """Records of a landing file, by the definition the Spark job reads them with (``eobatch.lines``)."""
    with fs.open_read(path) as f:
        return lines.count_records(f)


def _visible(root: str, path: str) -> bool:
    rel = path[len(root.rstrip("/")) + 1:]
    return not any(part.startswith((".", "_")) for part in rel.split("/"))


class FilesSource:
    kind = "files"

    def __init__(self, cfg):
        self.cfg = cfg
        self.root = cfg.source.path
        self.fs = storage_for(self.root)

    def list_landing(self) -> list[FileInfo]:
        """The landing files to read, oldest first.

        Symbolic links are never followed (a link can point outside the landing zone, e.g. at a
        credentials file, whose text would land in the quarantine table's ``raw`` column). Each
        visible one is logged; after the call ``self.links`` holds their paths and
        ``self.link_notes`` the messages, for the batch plan's notes."""
        links: list[str] = []
        files = [f for f in self.fs.list_files(self.root, links=links)
                 if f.path.endswith(".jsonl") and _visible(self.root, f.path)]
        self.links = sorted(p for p in links if _visible(self.root, p))
        self.link_notes = [f"ignored symbolic link {p} in the landing zone: links are never followed (a link "
                           f"can point outside the landing zone, e.g. at a credentials file); land a regular "
                           f"file instead" for p in self.links]
        for msg in self.link_notes:
            log.warning(msg)
        return sorted(files, key=lambda f: (f.mtime_ms, f.path))

    def next_range(self, previous_plans, limit: int) -> tuple[dict | None, int, list[str]]:
        """(range, records, notes) of the next batch; range None when nothing is new."""
        consumed: dict[str, dict] = {}
        reported: set[str] = set()
        for p in previous_plans:
            for f in p.range.get("files", []):
                consumed[f["path"]] = f
            reported.update(n[len("changed "):].split(" after it was consumed", 1)[0]
                            for n in p.notes if n.startswith("changed "))
            reported.update(n for n in p.notes if n.startswith("ignored symbolic link "))
        notes = []
        chosen, total = [], 0
        for f in self.list_landing():
            old = consumed.get(f.path)
            if old is not None:
                if (old["size"], old["mtime_ms"]) != (f.size, f.mtime_ms):
                    msg = (f"changed {f.path} after it was consumed in an earlier batch "
                           f"(size {old['size']} -> {f.size}, mtime {old['mtime_ms']} -> {f.mtime_ms}); "
                           f"not published again")
                    log.warning(msg)
                    if f.path not in reported:
                        notes.append(msg)
                continue
            n = count_records(self.fs, f.path)
            if chosen and total + n > limit:
                break
            chosen.append({"path": f.path, "size": f.size, "mtime_ms": f.mtime_ms, "records": n})
            total += n
            if total >= limit:
                break
        notes += [n for n in self.link_notes if n not in reported]  # each link in one plan's notes
        if not chosen:
            return None, 0, notes
        return {"files": chosen}, total, notes

    def interval_range(self, start_ms: int, end_ms: int, limit: int,
                       earlier=None) -> tuple[dict | None, int, list[str]]:
        """Interval mode: every landing file of the interval, consumed before or not.

        With ``interval_prefix`` the interval's files are those under that sub-folder (formatted
        with the interval start); without it, those whose modification time is in [start, end).
        """
        import datetime as dt

        start = dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc)
        prefix = self.cfg.source.interval_prefix
        if prefix:
            sub = prefix.format(ds=start.strftime("%Y-%m-%d"), ds_nodash=start.strftime("%Y%m%d"),
                                hh=start.strftime("%H"))
            folder = join(self.root, sub)
            files = [f for f in self.list_landing() if f.path.startswith(folder.rstrip("/") + "/")]
        else:
            files = [f for f in self.list_landing() if start_ms <= f.mtime_ms < end_ms]
        chosen, total = [], 0
        for f in files:
            n = count_records(self.fs, f.path)
            chosen.append({"path": f.path, "size": f.size, "mtime_ms": f.mtime_ms, "records": n})
            total += n
        if not chosen:
            return None, 0, []
        if total > limit:
            raise IntervalTooLarge(f"the interval holds {total} records in {len(chosen)} files, more than "
                                   f"max_records_per_batch={limit}; an interval is published as one batch: "
                                   f"raise the limit (YAML or the run's max_records_per_batch param)")
        return {"files": chosen}, total, []

    def check_unchanged(self, rng: dict) -> list[str]:
        return changed_since_plan(rng)


def changed_since_plan(rng: dict) -> list[str]:
    """Problems with a batch's planned files as they are now (gone, resized, rewritten, a link).

    The stage job calls this before reading: a range that changed can no longer be read exactly,
    and a planned file replaced by a symbolic link is never read (whatever its target's size).
    """
    import os

    problems = []
    for f in rng.get("files", []):
        fs = storage_for(f["path"])
        st = fs.stat(f["path"])  # None for a link too: stat never follows one
        if st is None and fs.scheme == "file" and os.path.islink(fs._p(f["path"])):
            problems.append(f"{f['path']}: is now a symbolic link; refusing to read it")
        elif st is None:
            problems.append(f"{f['path']}: missing (planned {f['size']} bytes)")
        elif (st.size, st.mtime_ms) != (f["size"], f["mtime_ms"]):
            problems.append(f"{f['path']}: changed since planned (size {f['size']} -> {st.size}, "
                            f"mtime {f['mtime_ms']} -> {st.mtime_ms})")
    return problems
