"""Quarantine replay: the raw records a batch quarantined, written back as a new landing file, so
that once fixed upstream (or once the rule that refused them changed) they go through the normal
exactly-once path. Each quarantined record is replayed at most once, whatever selections are
replayed, by whoever, at the same time or after a crash.

``make replay PIPELINE=<name> BATCH=<id> [REASON=<text>]`` selects the quarantine rows of that
batch (whose reason contains REASON, when given). A record is known by its source position
(landing file, line), in one incarnation of its batch (a batch id is never used again).

The decision is one put-if-absent record per replay, numbered like batches:
``<sink>/_eo_ledger/replays/<n>.json`` names the records it takes (its lineage: each line's
original batch, source, position and reason) and its landing file,
``<landing>/replay/replay-<n>-b<batch>-<nonce>.jsonl``. A replay reads every record so far, keeps the
selected records none of them took, and writes record ``n`` = last + 1; a contender that wrote
``n`` first wins it, and the loser reads again (now with the winner's records) and decides again.
So two replays with overlapping selections each take only what the other did not.

The raw lines are written to ``replays/data/`` first (any name: a loser's or a crashed replay's
are never named by a record), the record names them, and the landing file is put-if-absent from
them. A crash after the record and before the landing file loses nothing: every later
replay also writes the landing file of each recorded replay that has none and that no batch
read (the planner reads a path once, so a file written again after its batch read it is never
published again). Nothing is written through a symbolic link in the landing zone (``LinkRefused``).
Replay files of versions that kept no record in the ledger count as replays too: their lineage
(``<file>.lineage.json`` beside them) names the records they took.

A rewind that undoes a replay's origin batch makes the replay void (``live``): the tables go back
to before that batch, the batches after the rewind read its records again from their own landing
files, and the replay's file is never read (the planners ask ``void_files``; a batch that had read
it was undone by the same rewind) nor written again. A record quarantined again by the batch that
read it again is another incarnation: replayable once, from that batch. A replay of a batch a
rewind undid is refused.

A record whose raw text the quarantine could not keep exactly (cut at 64 KiB, or invalid UTF-8
made valid) is skipped and counted.

Landing-file sources in continuous mode only: a Kafka record cannot be written back into its
topic's past (produce it again upstream), and an interval-mode file must land in the folder of
an interval still to run (copy the lines there yourself).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..config.lines import RAW_CHARS
from ..core import faults
from ..core.checkpoint import RewindKey, undoing
from ..core.formats import JSON, QUARANTINE, REPLAY_DIR, REPLAY_LINEAGE, Layout, bid
from ..errors import UsageError
from ..sources import kind_for
from ..storage.fs import LinkRefused, join, link_refused, printable, storage_for

REPLAY_NAME = "replay-<n>-b<batch>-<nonce>.jsonl"  # the name of a replay's landing file (``replay``)
RAW_LIMIT = RAW_CHARS  # the quarantine keeps at most this many characters of a record
if TYPE_CHECKING:
    from ..config.pipeline import PipelineConfig
    from ..core.checkpoint import ReadSoFar
    from ..sinks import Participant
    from ..storage.fs import Storage

RECORD_NAME = re.compile(r"(\d{10})\.json")
# a lineage beside a replay file of an earlier version is a landing input: read up to this many bytes
# (a line of its records is about 200 bytes: some 80,000 records), a longer one is refused
LINEAGE_MAX_BYTES = 16 << 20


class Pipeline(Protocol):
    """What a replay reads of the pipeline's protocol (``verbs.Protocol`` is one): its configuration,
    ledger layout and tables, the rewinds in effect and what its batches read so far. A structural
    type: the verbs import this module (``void_files``), and it imports nothing of them."""

    cfg: PipelineConfig
    layout: Layout
    participants: dict[str, Participant]

    def rewinds_in_effect(self) -> list[RewindKey]: ...

    def read_so_far(self) -> ReadSoFar: ...


def quarantined(proto: Pipeline, batch_id: int, reason: str | None = None) -> list[dict[str, Any]]:
    """The quarantine rows of ``batch_id`` (reason containing ``reason``), in source order."""
    import pyarrow.compute as pc  # pyarrow: only where the quarantine table is read

    ds = proto.participants[QUARANTINE].dataset()
    if ds is None:
        raise UsageError(f"the quarantine table {proto.cfg.quarantine_table} does not exist yet")
    rows = ds.to_table(filter=pc.field("batch_id") == batch_id,
                                            columns=["batch_id", "source", "position", "raw", "reason"]).to_pylist()
    if reason:
        rows = [r for r in rows if reason in (r["reason"] or "")]
    return sorted(rows, key=lambda r: (str(r["source"]), int(r["position"] or 0)))


def _key(source: Any, position: Any) -> tuple[str, int | None]:
    """A quarantined record's identity: its source position (landing file, line)."""
    return str(source), None if position is None else int(position)


def recorded(layout: Layout) -> list[JSON]:
    """Every replay recorded so far in the ledger of ``layout``, by number."""
    fs = storage_for(layout.ledger)
    out = []
    for f in fs.list_files(layout.replays_dir(), recursive=False):
        m = RECORD_NAME.fullmatch(f.path.rsplit("/", 1)[-1])
        if m:
            out.append(json.loads(fs.read_bytes(f.path)))
    return sorted(out, key=lambda r: r["replay"])


def every_replay(cfg: PipelineConfig, layout: Layout, strict: bool = True,
                 bad: list[tuple[str, str, str]] | None = None) -> list[JSON]:
    """Every replay, recorded (``recorded``) or of an earlier version (a lineage beside its file):
    ``label``, ``batch_id`` (its origin batch), ``file``, ``records`` and, recorded ones only, the
    rest of their record. ``strict``: a lineage that cannot be read is refused (UsageError), else
    left out and appended to ``bad`` (``_legacy_replays``: a planner never halts on a landing input)."""
    out = [{**rec, "label": f"replay {rec['replay']}"} for rec in recorded(layout)]
    root = _landing(cfg)
    return out + _legacy_replays(storage_for(root), root, strict, bad)


def live(replays: list[JSON], rewinds: Sequence[RewindKey]) -> tuple[list[JSON], list[tuple[JSON, RewindKey]]]:
    """(live replays, [(void replay, the rewind that voided it)]), given the rewinds in effect
    (``Protocol.rewinds_in_effect``). A replay is void once a rewind undid its origin batch
    (``checkpoint.undoing``): that incarnation of its records is gone from the tables' history, they
    are read again from their own landing files, and a record quarantined again is another
    incarnation, replayable once more. Decided by two put-if-absent records, the replay's (its
    origin batch) and the rewind's (or its reservation), so every reader, at any time, in any order
    of the two, decides the same."""
    ok, void = [], []
    for r in replays:
        by = undoing(r["batch_id"], rewinds)
        (ok.append(r) if by is None else void.append((r, by)))
    return ok, void


def void_text(replay: JSON, by: RewindKey) -> str:
    """Why the file of a void replay is never read (a plan's note, the landing input skipped)."""
    return (f"{replay['label']} is void: batch {replay['batch_id']}, whose quarantined records it took, was rewound "
            f"(the rewind after batch {by.after_batch} to before batch {by.to_batch}), so those records are read "
            f"again from their own landing files; this file is never read (remove it; a record quarantined again "
            f"can be replayed from the batch that read it again)")


def void_files(cfg: PipelineConfig, layout: Layout, rewinds: Sequence[RewindKey],
               held: list[tuple[str, str]] | None = None) -> dict[str, str]:
    """Landing file -> why it is never read: the files of the void replays (``live``), given the
    rewinds in effect. What the plans ask (``ReadSoFar.void``); nothing is read without a rewind.

    A replay file whose lineage cannot be read (``_legacy_replays``) is held back too: whether a
    rewind voided it is not known, so it is not read while its lineage stays unreadable (removed,
    the file is a landing file like any other). Each such lineage is appended to ``held`` as
    (path, why): the plan skips it (``ReadSoFar.skipped_inputs``), it never fails the plan."""
    if not rewinds or not _replayable(cfg):
        return {}
    bad: list[tuple[str, str, str]] = []
    out = {r["file"]: void_text(r, by) for r, by in live(every_replay(cfg, layout, strict=False, bad=bad), rewinds)[1]}
    for lineage, file, why in bad:
        out.setdefault(file, f"its lineage {printable(lineage)} cannot be read, so whether a rewind voided this replay "
                             f"is not known: held back, not read while the lineage stays unreadable (fix it, or "
                             f"remove it to publish this file as a landing file)")
        if held is not None:
            held.append((lineage, f"not read as the lineage of a replay ({why}); its replay file "
                                  f"{printable(file)} is held back until it can be read (fix it or remove it)"))
    return out


def _replayable(cfg: PipelineConfig) -> bool:
    return kind_for(cfg.source.kind).replayable and cfg.mode == "continuous" and cfg.source.path is not None


def _landing(cfg: PipelineConfig) -> str:
    """The landing folder a replay writes into (``_check_source``: a replayable kind has one)."""
    if cfg.source.path is None:
        raise UsageError(f"replay writes landing files; pipeline {cfg.name} reads {cfg.source.describe()}: "
                         f"produce the records again upstream instead")
    return cfg.source.path


def _check_source(cfg: PipelineConfig) -> None:
    _landing(cfg)  # a folder to land in (not a Kafka topic)
    if cfg.mode == "interval":
        raise UsageError(f"pipeline {cfg.name} is in interval mode: a replayed file must land in the folder of an "
                         f"interval still to run; copy the records there yourself (`make replay` does not guess it)")
    if not kind_for(cfg.source.kind).replayable:
        raise UsageError(f"replay writes JSON lines; pipeline {cfg.name} reads {cfg.source.kind} files")
    if not cfg.source.takes_name(REPLAY_NAME):
        raise UsageError(f"replay lands files named {REPLAY_NAME} and source.include [{', '.join(cfg.source.include)}] of "
                         f"{cfg.file} does not take that name (they would never be read): add '*.jsonl' to it")


def replay(proto: Pipeline, batch_id: int, reason: str | None = None) -> dict[str, Any]:
    """Replay the selected records that no replay took yet, as one new landing file; and write the
    landing file of any recorded replay that has none yet (a crash, or a replay running now).

    Returns ``replay`` (its number, None when nothing was new), ``file``, ``record`` (its lineage),
    ``records`` (replayed now), ``already`` (selected but replayed before, by ``already_in``),
    ``skipped`` (raw text not kept exactly) and ``finished`` (earlier replays written now).
    UsageError when nothing is to be done or it cannot be done."""
    cfg = proto.cfg
    _check_source(cfg)  # a landing folder of JSON lines read in continuous mode
    undone = undoing(batch_id, proto.rewinds_in_effect())
    if undone is not None:
        raise UsageError(f"batch {batch_id} was rewound (the rewind after batch {undone.after_batch} to before "
                         f"batch {undone.to_batch}): its records are read again by the batches after that rewind, and none "
                         f"of its quarantine counts any more. Replay from the batch that read them again "
                         f"(`make ledger PIPELINE={cfg.name}`); nothing written")
    rows = quarantined(proto, batch_id, reason)
    keep = {_key(r["source"], r["position"]): r for r in rows
            if r["raw"] is not None and len(r["raw"]) < RAW_LIMIT and "\ufffd" not in r["raw"] and "\n" not in r["raw"]}
    skipped = len(rows) - len(keep)
    what = f"batch {batch_id}" + (f" whose reason contains {reason!r}" if reason else "")
    if not keep:
        raise UsageError(f"{what} has no quarantined record to replay"
                         + (f" ({skipped} could not be kept exactly)" if skipped else ""))
    root = _landing(cfg)
    landing, folder = storage_for(root), join(root, REPLAY_DIR)
    if landing.is_link(folder):  # refused before anything is recorded (the write checks again)
        raise link_refused(folder)
    fs = storage_for(proto.layout.ledger)
    mine: dict[str, Any] | None = None
    while mine is None:
        replays = every_replay(cfg, proto.layout)
        records = [r for r in replays if "replay" in r]
        taken = {_key(r["source"], r["position"]): (rep["label"], rep["file"])
                 for rep in live(replays, proto.rewinds_in_effect())[0] for r in rep["records"]}  # a void one took nothing
        new = [r for k, r in keep.items() if k not in taken]
        if not new:
            break
        n = (records[-1]["replay"] if records else 0) + 1
        data = "".join(r["raw"] + "\n" for r in new).encode()
        nonce = uuid.uuid4().hex[:16]  # nobody can take the landing file's name before it is written
        rec: dict[str, Any] = {
            "replay": n, "batch_id": batch_id, "reason_filter": reason,
            "file": join(folder, f"replay-{bid(n)}-b{batch_id}-{nonce}.jsonl"),
            "data": join(proto.layout.replays_dir(), "data", f"{bid(n)}-{nonce}.jsonl"),
            "sha256": hashlib.sha256(data).hexdigest(),
            "records": [{"line": i + 1, "batch_id": batch_id, "source": r["source"], "position": r["position"],
                         "reason": r["reason"]} for i, r in enumerate(new)]}
        fs.write_atomic(rec["data"], data)
        if fs.put_if_absent(proto.layout.replay(n), json.dumps(rec, indent=1).encode()):
            mine = rec
            faults.crash_point("replay.after_record")
        else:  # another replay took number n: read its records, decide again
            fs.delete(rec["data"])
    try:
        finished = _write_landing_files(proto, records + ([mine] if mine else []))
    except LinkRefused as e:
        raise LinkRefused(f"{e}. The records recorded by a replay are not lost: once the link is gone, the next "
                          f"`make replay` of this pipeline writes them (once)") from None
    earlier = [f for f in finished if mine is None or f["replay"] != mine["replay"]]
    already = [k for k in keep if k in taken]
    by = sorted({taken[k] for k in already})
    if mine is None and not earlier:
        consumed = proto.read_so_far().consumed
        where = "; ".join(f"{label} as {file}" + (", published by a later batch" if consumed(file) is not None else "")
                          for label, file in by)
        raise UsageError(f"all {len(already)} selected record(s) of {what} were already replayed ({where}); "
                         f"nothing written: replaying them again would publish them twice"
                         + (f" ({skipped} more could not be kept exactly)" if skipped else ""))
    return {"replay": mine["replay"] if mine else None, "file": mine["file"] if mine else None,
            "record": proto.layout.replay(mine["replay"]) if mine else None,
            "records": len(mine["records"]) if mine else 0, "already": len(already),
            "already_in": [label for label, _file in by], "skipped": skipped, "finished": earlier}


def _legacy_replays(landing: Storage, root: str, strict: bool = True,
                    bad: list[tuple[str, str, str]] | None = None) -> list[dict[str, Any]]:
    """The replays made before replays were recorded in the ledger: each such replay file has its
    lineage beside it (``<file>.lineage.json``, in ``<root>/replay``), as ``every_replay`` lists them.

    A lineage is a landing input like any other (anyone who lands files can write one): it is opened
    as ``Storage.open_landing`` opens landing files (no link followed below ``root``, a regular file
    only), at most ``LINEAGE_MAX_BYTES`` of it, and anything that does not parse as a lineage (any
    exception of the parser: ``[`` 40,000 times is a RecursionError) is refused (``strict``:
    UsageError) or left out and appended to ``bad`` as (lineage, its replay file, why)."""
    folder = join(root, REPLAY_DIR)
    if landing.is_link(folder):
        return []  # never followed (the landing listing notes the link)
    out = []
    for f in landing.list_files(folder, recursive=False):
        if not f.path.endswith(REPLAY_LINEAGE):
            continue
        file = f.path[:-len(".lineage.json")]
        try:
            out.append(_read_lineage(landing, f.path, root) | {"file": file})
        except Exception as e:  # noqa: BLE001 - a landing input: whatever its bytes raise, it is refused
            why = f"{type(e).__name__}: {str(e)[:300]}" if not isinstance(e, _BadLineage) else str(e)
            if strict:
                raise UsageError(f"{f.path} is not the lineage of a replay ({why}), so which records {file} "
                                 f"replayed is unknown; nothing replayed. Fix it, or remove it if {file} was never "
                                 f"a replay") from None
            if bad is not None:
                bad.append((f.path, file, why))
    return out


class _BadLineage(ValueError):
    """A lineage file that cannot be read as one (its message says why)."""


def _read_lineage(landing: Storage, path: str, root: str) -> dict[str, Any]:
    """``label``, ``records`` and ``batch_id`` (the origin) of the lineage at ``path`` (``_legacy_replays``)."""
    reader, info = landing.open_landing(path, root)
    with reader:
        if info.size > LINEAGE_MAX_BYTES:
            raise _BadLineage(f"{info.size} bytes, more than a lineage holds ({LINEAGE_MAX_BYTES}); not read")
        data = reader.read(LINEAGE_MAX_BYTES + 1)
    if len(data) > LINEAGE_MAX_BYTES:
        raise _BadLineage(f"more than {LINEAGE_MAX_BYTES} bytes; not read")
    records = json.loads(data)["records"]
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise _BadLineage("its records are not a list of records")
    origin = min((int(r["batch_id"]) for r in records), default=0)  # one batch's records
    for r in records:
        _key(r["source"], r["position"])  # each one names its source position
    return {"label": "an earlier replay", "records": records, "batch_id": origin}


def _write_landing_files(proto: Pipeline, records: list[JSON]) -> list[JSON]:
    """Write the landing file of each recorded replay that no batch read and that is not there
    (put-if-absent from its data, no link followed); the ones this call wrote. A file there is the
    replay's own (its name has a nonce nobody knew before the record), edited or not."""
    root = _landing(proto.cfg)
    landing, fs = storage_for(root), storage_for(proto.layout.ledger)
    read = proto.read_so_far()
    wrote = []
    for rec in live(records, proto.rewinds_in_effect())[0]:  # never a void one's
        path, name = rec["file"], f"replay {rec['replay']} ({proto.layout.replay(rec['replay'])})"
        if read.consumed(path) is not None or landing.stat(path) is not None:
            continue  # a batch read it (it may be gone since: never written again), or it waits for one
        try:
            data = fs.read_bytes(rec["data"])
        except FileNotFoundError:
            raise UsageError(f"{name} names its lines {rec['data']}, which is gone: its records are not "
                             f"replayed. Write the raw lines its record lists to {path} yourself") from None
        if hashlib.sha256(data).hexdigest() != rec["sha256"]:
            raise UsageError(f"{name}: {rec['data']} does not hold the lines its record names (sha256 "
                             f"differs); nothing written to {path}")
        if landing.put_if_absent(path, data, within=root):
            wrote.append({"replay": rec["replay"], "batch_id": rec["batch_id"], "records": len(rec["records"]),
                          "file": path})
    return wrote
