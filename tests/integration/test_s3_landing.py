"""A landing zone on the S3 server (S3Proxy on loopback), planned by the files source: the new
objects of a plan are measured (a HEAD and a GET each) a few at a time ahead of the walk that takes
them, and the plan is still exactly what one measured after the other would plan: the files in path
order up to the batch's bounds, each with its own records, an object gone since the listing held
back (the position stops before it) and planned by the next plan once it is there again, a large
object measured when the walk reaches it."""

from __future__ import annotations

import threading

import pytest
import yaml

from eobatch.pipelines.loader import load_pipeline
from eobatch.sources import source_for
from eobatch.sources.files import FilesSource
from support.services import S3Server

pytestmark = pytest.mark.integration

BUCKET = "landing"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = S3Server(str(tmp_path_factory.mktemp("s3"))).start()
    try:
        srv.create_bucket(BUCKET)
        with srv.in_environment():
            yield srv
    finally:
        srv.stop()


def _lines(prefix: str, n: int) -> bytes:
    return "".join(f'{{"order_id": "{prefix}-{i}"}}\n' for i in range(n)).encode()


def _cfg(tmp_path, prefix: str, max_files: int):
    path = tmp_path / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump({
        "name": prefix, "schema": "order_id STRING NOT NULL",
        "source": {"kind": "files", "path": f"s3a://{BUCKET}/{prefix}", "discovery": "lexical",
                   "max_files_per_batch": max_files},
        "sink": {"table": str(tmp_path / "lake" / prefix)}, "quarantine": {"table": str(tmp_path / "lake" / "bad")}}))
    return load_pipeline(str(path))


def test_objects_measured_ahead_plan_what_one_at_a_time_would(server, tmp_path, monkeypatch):
    client = server.client()
    sizes = {f"f{i:03d}.jsonl": 1 + i % 7 for i in range(30)}
    sizes["f005.jsonl"] = 40_000  # about 1.2 MiB: over what is measured ahead
    for name, n in sizes.items():
        client.put_object(Bucket=BUCKET, Key=f"ahead/{name}", Body=_lines(name, n))
    cfg = _cfg(tmp_path, "ahead", max_files=12)
    listing = FilesSource.list_landing

    def gone_after_the_listing(self, *a, **kw):  # f003 deleted between the listing and its measure
        files = listing(self, *a, **kw)
        client.delete_object(Bucket=BUCKET, Key="ahead/f003.jsonl")
        return files

    entry, measured_in = FilesSource._entry, {}

    def seen(self, f):
        measured_in[f.path.rsplit("/", 1)[1]] = threading.current_thread().name
        return entry(self, f)

    monkeypatch.setattr(FilesSource, "list_landing", gone_after_the_listing)
    monkeypatch.setattr(FilesSource, "_entry", seen)
    rng, records, _notes = source_for(cfg).next_range([], 10_000_000)
    monkeypatch.setattr(FilesSource, "list_landing", listing)
    # ahead, in threads, but the large one, measured when the walk reached it; none past the batch's room
    assert measured_in.pop("f005.jsonl") == threading.current_thread().name
    assert set(measured_in.values()) <= {f"eobatch-plan_{i}" for i in range(8)} and len(measured_in) <= 12 + 8
    names = [f["path"].rsplit("/", 1)[1] for f in rng["files"]]
    expected = [n for n in sorted(sizes) if n != "f003.jsonl"][:12]
    assert names == expected
    assert [f["records"] for f in rng["files"]] == [sizes[n] for n in expected] and records == sum(
        sizes[n] for n in expected)
    assert rng["listed_after"] == f"s3a://{BUCKET}/ahead/f002.jsonl"  # held back: before the gone object

    class Plan:  # what the planner reads of an earlier plan
        def __init__(self, r):
            self.range, self.batch_id, self.notes = r, 1, []

    client.put_object(Bucket=BUCKET, Key="ahead/f003.jsonl", Body=_lines("f003.jsonl", 3))
    rng2, records2, _ = source_for(cfg).next_range([Plan(rng)], 10_000_000)
    names2 = [f["path"].rsplit("/", 1)[1] for f in rng2["files"]]
    assert names2 == ["f003.jsonl"] + [n for n in sorted(sizes) if n not in expected and n != "f003.jsonl"][:11]
    assert records2 == sum(3 if n == "f003.jsonl" else sizes[n] for n in names2)
