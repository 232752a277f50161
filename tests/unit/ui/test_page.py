"""eobatch.ui.page: the ledger page's HTML and its SVG timeline, from ledger rows (no I/O)."""

from __future__ import annotations

import html.parser
import xml.etree.ElementTree as ET

import pytest

from eobatch.ui.page import (
    MAX_PER_PAGE,
    TOP_LINKS_JS,
    Pager,
    PageView,
    esc,
    fmt_age,
    fmt_bytes,
    render_message,
    render_not_found,
    render_page,
    timeline_svg,
)

SVG = "{http://www.w3.org/2000/svg}"
EVIL = '<script>alert("x")</script>'


def row(b: int, state: str = "COMMITTED", **kw) -> dict:
    """A row as eobatch.cli.ledger_rows builds it."""
    r = {
        "batch_id": b, "state": state, "source_range": f"1 files [f{b}.jsonl]", "rows_in": 100 + b,
        "rows_published": 98 + b, "rows_quarantined": 2, "files": 2, "bytes": 4096, "delta_version": b,
        "quarantine_delta_version": b, "fingerprint": "ab" * 32, "attempts": 1, "aborted_attempts": 0,
        "plan_s": 0.02, "stage_s": 12.5, "verify_s": 0.3, "commit_s": 0.05, "recovered": False,
        "planned_at": "2026-11-23T10:00:00+00:00", "committed_at": "2026-11-23T10:00:20+00:00", "interval": None,
        "run_id": f"manual__2026-11-23T10:0{b % 10}:00+00:00", "notes": [],
        "offsets": {"files": [{"path": f"/landing/f{b}.jsonl", "size": 4096, "mtime_ms": 1, "records": 100 + b}]},
    }
    r.update(kw)
    if "source_kind" not in kw:  # the kind whose words the offsets are in (a delta range names its table)
        offsets = kw.get("offsets") or {}
        r["source_kind"] = "delta" if "table" in offsets else "kafka" if "topic" in offsets else "files"
    return r


def view(rows: list[dict], **kw) -> PageView:
    args: dict = dict(pipeline="orders", mode="continuous", source_kind="files", schedule=None,
                      pager=Pager.of(len(rows)), rows=sorted(rows, key=lambda r: -r["batch_id"]), chart_rows=rows,
                      backlog={"kind": "files", "files": 0, "bytes": 0, "records": 0, "unpublished": False,
                               "notes": []},
                      committed_versions={"sink": len(rows), "quarantine": len(rows)})
    args.update(kw)
    return PageView(**args)


class Tags(html.parser.HTMLParser):
    """Every start tag of a document, with its attributes, and the text outside tags."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


# -- escaping ----------------------------------------------------------------------------------------
def test_odd_file_names_notes_and_run_ids_are_text_never_markup():
    odd = row(1, source_range="1 files [<script>.jsonl]", notes=[f"changed {EVIL} after it was consumed"],
              run_id='manual__"><img src=x onerror=alert(1)>',
              offsets={"files": [{"path": "/landing/<script>.jsonl", "size": 10, "mtime_ms": 1, "records": 1}]})
    out = render_page(view([odd], description="orders & <b>refunds</b>"))
    assert out.count("<script") == 1 and f"<script>{TOP_LINKS_JS}</script>" in out  # only the page's own
    assert "<img" not in out and "<b>refunds" not in out and "<script>.jsonl" not in out
    assert "&lt;script&gt;.jsonl" in out and "orders &amp; &lt;b&gt;refunds&lt;/b&gt;" in out
    parsed = Tags(out)
    assert [t for t, _ in parsed.tags if t in ("script", "img")] == ["script"]
    text = "".join(parsed.text).replace(TOP_LINKS_JS, "")
    assert "/landing/<script>.jsonl" in text and f"changed {EVIL} after it was consumed" in text
    # the run id reaches the href percent-encoded, and the page text as it is
    link, = [a for t, a in parsed.tags if t == "a" and "/runs/" in a.get("href", "")]
    assert link["href"] == "/dags/orders/runs/manual__%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"
    assert link["target"] == "_top"  # out of the Airflow UI's iframe


def test_a_batchs_dropped_records_and_failed_expectations_are_shown():
    r = row(1, rows_dropped=1200, expectations={"positive_amount": 3, "known_customer": 1200, "zero_rule": 0})
    text = "".join(Tags(render_page(view([r, row(2)]))).text)
    assert "1,200 dropped by expectations" in text
    assert "expectations failed: known_customer 1,200, positive_amount 3" in text and "zero_rule" not in text


def test_a_merge_batchs_changes_to_the_sink_are_shown_per_kind_and_an_appends_are_not():
    merged = row(1, changes={"inserted": 100, "updated": 200, "deleted": 1, "ignored": 1})
    text = render_page(view([merged, row(2, changes=None), row(3)]))
    assert text.count('class="small muted changes"') == 1
    assert "100 inserted, 200 updated, 1 deleted, 1 ignored" in text


def test_the_last_maintenance_is_shown_or_how_to_run_one():
    text = "".join(Tags(render_page(view([row(1)], maintenance="last maintenance t (1 s): sink 9 -> 1 files"))).text)
    assert "last maintenance t (1 s): sink 9 -> 1 files" in text
    assert "No maintenance pass yet (the DAG orders_maintenance, or eobatch maintain orders)" in "".join(
        Tags(render_page(view([row(1)]))).text)


def test_svg_escapes_and_parses_as_xml():
    svg = timeline_svg([row(1, state=EVIL)])
    root = ET.fromstring(svg)  # well-formed: nothing unescaped broke it
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert f"batch 1: {EVIL}" in titles


def test_not_found_and_message_pages_escape_the_name():
    out = render_not_found(EVIL)
    assert EVIL not in out and out.count("<script") == 1 and "&lt;script&gt;" in out
    assert "orders" not in out  # no other pipeline is named
    assert "is not an eobatch pipeline" in out and "Not an eobatch pipeline" in out
    assert "include/pipelines" not in out and "PIPELINES_DIR" not in out  # no folder of a checkout or deployment
    assert 'href="/dags"' in out
    assert "&lt;b&gt;" in render_message("t", "<b>", ("/auth/login?next=%2F", "Log in"))
    assert esc(None) == "-"


# -- pagination ----------------------------------------------------------------------------------
@pytest.mark.parametrize("total,page,per_page,ids", [
    (0, 1, 25, []),
    (3, 1, 25, [3, 2, 1]),
    (60, 1, 25, list(range(60, 35, -1))),
    (60, 2, 25, list(range(35, 10, -1))),
    (60, 3, 25, list(range(10, 0, -1))),
    (60, 9, 25, list(range(10, 0, -1))),  # past the end: the last page
    (5, 1, 2, [5, 4]),
])
def test_pager_pages_newest_first(total, page, per_page, ids):
    p = Pager.of(total, page, per_page)
    assert p.batch_ids(total) == ids
    assert 1 <= p.page <= p.pages


def test_pager_bounds_and_page_of_a_batch():
    assert Pager.of(1000, 1, 10_000).per_page == MAX_PER_PAGE
    assert Pager.of(10, -3, 0).page == 1 and Pager.of(10, -3, 0).per_page == 1
    assert [Pager.page_of(60, b, 25) for b in (60, 36, 35, 11, 10, 1)] == [1, 1, 2, 2, 3, 3]


def test_pager_links_on_the_page():
    rows = [row(b) for b in range(1, 8)]
    out = render_page(view(rows[5:3:-1], pager=Pager.of(7, 2, 2)))
    hrefs = [a["href"] for t, a in Tags(out).tags if t == "a" and a.get("href", "").startswith("?")]
    assert hrefs[:4] == ["?page=1&per_page=2", "?page=1&per_page=2", "?page=3&per_page=2", "?page=4&per_page=2"]
    assert "page 2 of 4" in out and "batches 4..5 of 7, newest first" in out


# -- the page --------------------------------------------------------------------------------------
def test_the_batches_a_run_carried_are_highlighted_together():
    rows = [row(1, run_id="r-a"), row(2, run_id="r-b", run_first=2), row(3, run_id="r-b", run_first=2)]
    out = render_page(view(rows[::-1], run_id="r-b"))
    trs = [a for t, a in Tags(out).tags if t == "tr" and "data-batch" in a]
    assert [(a["data-batch"], a.get("class")) for a in trs] == [("3", "mark"), ("2", "mark"), ("1", None)]
    assert "planned batches 2, 3 (highlighted)" in out


def test_a_delta_sources_batch_links_the_upstream_batches_it_read_and_a_linked_batch_is_marked():
    up = {"table": "/lake/orders", "versions": [0, 3], "files": [], "upstream": {"orders": [4, 5], EVIL: [1]}}
    out = render_page(view([row(1), row(2, offsets=up, delta_versions={"sink": 2, "tombstones": 1})],
                           airflow_base="/af", batch=1))
    links = [a["href"] for t, a in Tags(out).tags if t == "a" and "batch=" in a.get("href", "")]
    assert "/af/eobatch/pipelines/orders?batch=4#batch-4" in links and "/af/eobatch/pipelines/orders?batch=5#batch-5" in links
    assert EVIL not in out
    trs = [a for t, a in Tags(out).tags if t == "tr" and "data-batch" in a]
    assert [(a["data-batch"], a.get("class")) for a in trs] == [("2", None), ("1", "mark")]
    assert 'title="sink 2, tombstones 1"' in out  # every table's version of the batch


def test_page_rows_newest_first_with_states_versions_and_links():
    rows = [row(1), row(2, state="PREPARED", delta_version=None, quarantine_delta_version=None, commit_s=None),
            row(3, state="PLANNED", rows_published=None, rows_quarantined=None, fingerprint=None, stage_s=None,
                verify_s=None, commit_s=None, delta_version=None)]
    out = render_page(view(rows, run_id=rows[1]["run_id"], airflow_base="/airflow"))
    trs = [a for t, a in Tags(out).tags if t == "tr" and "data-batch" in a]
    assert [(a["data-batch"], a["data-state"]) for a in trs] == [("3", "PLANNED"), ("2", "PREPARED"), ("1", "COMMITTED")]
    assert [a.get("class") for a in trs] == [None, "mark", None]  # the DAG run's batch is highlighted
    assert "planned batch 2 (highlighted)" in out
    assert 'href="/airflow/dags/orders"' in out and 'href="/airflow/eobatch/api/pipelines/orders/batches"' in out
    assert "plan 0.02 · stage 12.5 · verify 0.30 · commit 0.05" in out
    assert "abababababab" in out  # the fingerprint, shortened (the whole one in its title)


def test_rewinds_are_listed_and_escaped():
    out = render_page(view([row(1), row(2, state="REWOUND")], rewinds=[f"rewind at t (run {EVIL}): batches 2..2"]))
    assert f"rewind at t (run {EVIL}): batches 2..2" in "".join(Tags(out).text)
    assert 'data-batch="2" data-state="REWOUND"' in out


def test_empty_ledger_and_unreadable_backlog():
    out = render_page(view([], backlog={"error": "PermissionError: [Errno 13] /landing"}))
    assert "No batches yet" in out and "could not be read now" in out and "<svg" not in out


def test_backlog_cards():
    b = {"kind": "files", "files": 2, "bytes": 3 << 20, "records": None, "unpublished": True,
         "oldest_unpublished_at": "2026-11-23T10:00:00+00:00", "oldest_unpublished_age_s": 5400.0,
         "notes": ["records not counted: too many bytes"]}
    text = "".join(Tags(render_page(view([row(1)], backlog=b))).text)
    for want in ("files not yet planned2", "bytes not yet planned3.0 MiB", "records not yet plannednot counted",
                 "oldest unpublished90 min old", "modified at 2026-11-23T10:00:00+00:00"):
        assert want in text
    kafka = {"kind": "kafka", "records": 7, "partitions": {"0": 3, "1": 4}, "unpublished": None, "notes": []}
    text = "".join(Tags(render_page(view([row(1)], backlog=kafka))).text)
    assert "partitions0: 3, 1: 4" in text and "oldest unpublishednot known" in text


# -- the timeline ----------------------------------------------------------------------------------
def test_timeline_bars_per_phase_and_rows():
    rows = [row(1), row(2, state="PLANNED", rows_published=None, rows_quarantined=None, stage_s=None, verify_s=None,
                       commit_s=None)]
    root = ET.fromstring(timeline_svg(rows))
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert titles.count("batch 1: stage 12.5 s") == 1 and "batch 1: 99 rows published" in titles
    assert "batch 1: 2 rows quarantined" in titles
    assert "batch 2 (PLANNED): 102 rows planned" in titles  # in outline: not verified yet
    assert "batch 2: stage - s" not in titles  # no bar for a phase that has not run
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "1" in labels and "2" in labels and "seconds per phase" in labels
    # the bars fit the plot: heights are positive and inside the panel
    for rect in root.iter(f"{SVG}rect"):
        assert float(rect.get("height", 0)) >= 0


def test_timeline_labels_every_few_batches_when_many():
    root = ET.fromstring(timeline_svg([row(b) for b in range(1, 101)]))
    labels = {t.text for t in root.iter(f"{SVG}text")}
    assert {"1", "6", "96", "100"} <= labels and "2" not in labels


def test_timeline_without_rows():
    assert "No batches yet" in timeline_svg([])


def test_number_formats():
    assert [fmt_bytes(v) for v in (None, 0, 1023, 1536, 5 << 30)] == ["-", "0 B", "1023 B", "1.5 KiB", "5.0 GiB"]
    assert [fmt_age(v) for v in (None, 5, 600, 9000, 3 * 86400)] == ["-", "5 s", "10 min", "2 h 30 min", "3 days"]


def test_the_stuck_banner_shows_the_repair_and_an_error_quoting_markup_as_text():
    from eobatch.ui.page import stuck_html

    stuck = {"pipeline": "orders", "batch_id": 7, "state": "STAGED", "cause": "runs",
             "since": "2026-11-23T10:00:00.000+00:00", "runs": 4, "run_ids": ["manual__1", "manual__<b>2"],
             "attempts": 3, "aborted": 3, "why": "4 runs tried it and none committed it (limit 3 runs)",
             "last_error": f"ValueError: record {EVIL}", "last_error_at": "2026-11-23T11:00:00.000+00:00",
             "repair": {"name": "a batch that fails the same way in every run", "text": "fix it",
                        "command": "make reset-batch PIPELINE=orders BATCH=7"}}
    out = render_page(view([row(1)], stuck=stuck))
    assert out.count("<script") == 1 and "<b>2" not in out and "&lt;script&gt;alert" in out
    assert 'id="stuck" role="alert" data-batch="7"' in out
    assert "Stuck: batch 7 is STAGED since" in out and "2026-11-23 10:00:00 UTC" in out
    assert "<code>make reset-batch PIPELINE=orders BATCH=7</code>" in out
    assert "Repair: a batch that fails the same way in every run." in out
    assert stuck_html(None) == "" and 'id="stuck"' not in render_page(view([row(1)]))
    assert "could not read the ledger" in stuck_html({"error": "OSError: gone"})
