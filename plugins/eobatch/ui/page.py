"""HTML of the ledger page and its timeline chart (inline SVG drawn here: no JavaScript build; one
inline script, ``TOP_LINKS_JS``, lets links leave Airflow's iframe).

Pure functions of ledger rows (``eobatch.cli.ledger_rows``), the backlog (``eobatch.protocol.backlog``)
and a few facts about the pipeline. Every string that comes from the ledger, the landing zone
or the request (file names, notes, run ids) is escaped here, once, with ``esc``.
"""

from __future__ import annotations

import html
import math
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.formats import changes_text
from ..sources import range_detail
from ..sources.base import RangeDetail

PHASES = (("plan_s", "plan", "#8e7cc3"), ("stage_s", "stage", "#3d85c6"), ("verify_s", "verify", "#e69138"),
          ("commit_s", "commit", "#6aa84f"))
STATE_COLOURS = {"COMMITTED": "#2e7d32", "PREPARED": "#1565c0", "STAGED": "#ef6c00", "PLANNED": "#f9a825",
                 "ABANDONED": "#757575", "REWOUND": "#6a1b9a"}
STATE_MEANING = {
    "PLANNED": "its source range is recorded, nothing is published yet",
    "STAGED": "the Spark job wrote its files, invisible to readers",
    "PREPARED": "verified: it will be committed, never aborted",
    "COMMITTED": "published in the tables, exactly once",
    "ABANDONED": "interval mode: given up, its interval can run again",
    "REWOUND": "taken back by a rewind; its records are read again by later batches",
}
MAX_PER_PAGE = 200
CHART_BATCHES = 30


def esc(value: Any) -> str:
    """Text for HTML or SVG (content and attribute values): None is shown as "-"."""
    return html.escape("-" if value is None else str(value), quote=True)


def url_path(*parts: str) -> str:
    """Path segments, each percent-encoded (a run id may hold ``:`` and ``+``)."""
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


# -- pagination ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pager:
    """Page ``page`` (from 1) of ``total`` batches, newest first, ``per_page`` a page."""

    total: int
    page: int
    per_page: int

    @classmethod
    def of(cls, total: int, page: int = 1, per_page: int = 25) -> Pager:
        per_page = max(1, min(MAX_PER_PAGE, per_page))
        pages = max(1, math.ceil(total / per_page))
        return cls(total, max(1, min(page, pages)), per_page)

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per_page))

    def batch_ids(self, latest: int) -> list[int]:
        """The batch ids of this page, newest first (ids are 1..latest, without gaps)."""
        hi = latest - (self.page - 1) * self.per_page
        return list(range(hi, max(0, hi - self.per_page), -1))

    @staticmethod
    def page_of(latest: int, batch_id: int, per_page: int) -> int:
        """The page that shows ``batch_id``."""
        return max(1, (latest - batch_id) // max(1, per_page) + 1)


# -- numbers ---------------------------------------------------------------------------------------
def fmt_int(v: Any) -> str:
    return "-" if v is None else f"{int(v):,}"


def fmt_s(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def fmt_bytes(v: Any) -> str:
    if v is None:
        return "-"
    n = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{v} B"


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} days"


# -- the timeline chart ----------------------------------------------------------------------------
def _nice_max(v: float) -> float:
    """A round upper bound for an axis (1, 2, 5 times a power of ten)."""
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if v <= m * exp:
            return float(m * exp)
    return float(10 * exp)


def _legend(x0: float, y1: float, y2: float) -> list[str]:
    """The timeline's legends: the phases above the first panel, the rows above the second."""
    out: list[str] = []
    lx = x0
    for _key, name, colour in PHASES:
        out.append(f'<rect x="{lx}" y="{y1 - 17}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="{y1 - 8}">{esc(name)}</text>')
        lx += 70
    lx = x0
    for name, colour in (("published", "#43a047"), ("quarantined", "#e53935")):
        out.append(f'<rect x="{lx}" y="{y2 - 17}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="{y2 - 8}">{esc(name)}</text>')
        lx += 100
    return out


def timeline_svg(rows: Sequence[dict], width: int = 960) -> str:
    """Two panels over the same batches (oldest left): seconds per phase (stacked) and rows
    published / quarantined (stacked; a batch not yet verified shows its planned rows in
    outline). Each bar has a ``<title>`` (the browser's tooltip). Empty rows: a short note."""
    rows = sorted(rows, key=lambda r: r["batch_id"])
    if not rows:
        return '<p class="muted">No batches yet: the chart appears after the first run.</p>'
    left, right, panel_h, gap, top = 56, 12, 120, 46, 26
    height = top + panel_h + gap + panel_h + 40
    plot_w = width - left - right
    slot = plot_w / len(rows)
    bar_w = max(2.0, min(28.0, slot * 0.7))
    secs = [sum((r.get(k) or 0.0) for k, _, _ in PHASES) for r in rows]
    counts = [max((r.get("rows_published") or 0) + (r.get("rows_quarantined") or 0), r.get("rows_in") or 0)
              for r in rows]
    s_max, r_max = _nice_max(max(secs)), _nice_max(max(counts))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" '
           f'style="width:100%;max-width:{width}px;height:auto" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of the last {len(rows)} batches: '
           f'seconds per phase and rows">',
           '<style>text{font:11px sans-serif;fill:#333}.ax{stroke:#999;stroke-width:1}'
           '.grid{stroke:#e5e5e5;stroke-width:1}</style>']
    y1, y2 = top, top + panel_h + gap  # panel tops

    def axis(y0: float, vmax: float, label: str, fmt) -> None:
        out.append(f'<text x="{left}" y="{y0 - 8:.0f}" style="font-weight:bold">{esc(label)}</text>')
        for i in range(3):
            v = vmax * i / 2
            y = y0 + panel_h - panel_h * i / 2
            out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{esc(fmt(v))}</text>')
        out.append(f'<line class="ax" x1="{left}" x2="{left}" y1="{y0}" y2="{y0 + panel_h}"/>')

    axis(y1, s_max, "seconds per phase", lambda v: f"{v:g}")
    axis(y2, r_max, "rows (published + quarantined)", lambda v: f"{v:,.0f}")
    label_every = max(1, math.ceil(len(rows) / 20))
    for i, r in enumerate(rows):
        x = left + slot * i + (slot - bar_w) / 2
        b = r["batch_id"]
        # seconds per phase, stacked from the bottom: plan, stage, verify, commit
        y = float(y1 + panel_h)
        for key, name, colour in PHASES:
            v = r.get(key) or 0.0
            h = panel_h * v / s_max
            if h > 0:
                y -= h
                out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{colour}">'
                           f'<title>batch {esc(b)}: {esc(name)} {esc(fmt_s(v))} s</title></rect>')
        # rows: published then quarantined; planned rows (not verified yet) in outline
        pub, bad = r.get("rows_published"), r.get("rows_quarantined")
        base = y2 + panel_h
        if pub is None and bad is None:
            n = r.get("rows_in") or 0
            h = panel_h * n / r_max
            out.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="none" '
                       f'stroke="#888" stroke-dasharray="3 2"><title>batch {esc(b)} ({esc(r.get("state"))}): '
                       f'{esc(fmt_int(n))} rows planned</title></rect>')
        else:
            y = float(base)
            for v, name, colour in ((pub or 0, "published", "#43a047"), (bad or 0, "quarantined", "#e53935")):
                h = panel_h * v / r_max
                if h > 0:
                    y -= h
                    out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                               f'fill="{colour}"><title>batch {esc(b)}: {esc(fmt_int(v))} rows {name}</title></rect>')
        # the batch's state as a small square under the axis, its id below every few bars
        colour = STATE_COLOURS.get(str(r.get("state")), "#000")
        out.append(f'<rect x="{x:.1f}" y="{base + 4}" width="{bar_w:.1f}" height="5" fill="{colour}">'
                   f'<title>batch {esc(b)}: {esc(r.get("state"))}</title></rect>')
        if i % label_every == 0 or i == len(rows) - 1:
            out.append(f'<text x="{x + bar_w / 2:.1f}" y="{base + 22}" text-anchor="middle">{esc(b)}</text>')
    out += _legend(left + 260, y1, y2)
    out.append(f'<text x="{width - right}" y="{height - 4}" text-anchor="end">batch id</text>')
    out.append("</svg>")
    return "\n".join(out)


# -- the page --------------------------------------------------------------------------------------
@dataclass
class PageView:
    """Everything the page shows. ``rows``: the page's batches, newest first; ``chart_rows``: the
    recent batches of the chart; ``airflow_base``: the Airflow UI's root path ("" at /)."""

    pipeline: str
    mode: str
    source_kind: str
    schedule: str | None
    pager: Pager
    rows: list[dict]
    chart_rows: list[dict]
    backlog: dict
    committed_versions: dict = field(default_factory=dict)
    run_id: str | None = None  # a DAG run's batches to mark (the link from a DAG run)
    batch: int | None = None  # a batch to mark (the link from a downstream pipeline's batch that read it)
    airflow_base: str = ""
    description: str | None = None
    rewinds: list[str] = field(default_factory=list)  # one line per rewind of the ledger
    maintenance: str | None = None  # the last maintenance pass, one line (eobatch.protocol.maintenance.summary_line)
    stuck: dict | None = None  # the stuck detector's finding (eobatch.core.stuck.Stuck.to_json), or None


# In Airflow's "Batch ledger" tab this page is an iframe sandboxed without allow-top-navigation: a
# link of it may not navigate the window around it (a target="_top" link does nothing). Its
# sandbox allows scripts and the same origin, so a click on such a link is handed to that window,
# which follows it itself. Opened directly (not in a frame), the links work as they are.
TOP_LINKS_JS = """document.addEventListener("click", function (e) {
  var a = e.target.closest ? e.target.closest("a[target=_top]") : null;
  if (!a || window.top === window) return;
  try {
    var doc = window.top.document, link = doc.createElement("a");
    link.href = a.href; doc.body.appendChild(link); link.click(); link.remove();
    e.preventDefault();
  } catch (err) { /* another origin: the browser follows the link as it may */ }
});"""

CSS = """
body{font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,sans-serif;margin:16px;color:#222;
background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 6px}
.muted{color:#666}.small{font-size:12px}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #e3e3e3;padding:4px 6px;text-align:left;
vertical-align:top}th{background:#f6f6f6;font-weight:600}td.num{text-align:right;
white-space:nowrap}tr.mark td{background:#fff8d6}
.state{display:inline-block;padding:1px 6px;border-radius:9px;color:#fff;font-size:12px;font-weight:600}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid #e3e3e3;border-radius:6px;padding:8px 12px;
min-width:150px}.card b{display:block;font-size:18px}
details summary{cursor:pointer}ul.notes{margin:0;padding-left:16px}.pager a,.pager span{margin-right:8px}
dl.states{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;margin:0}
.scroll{overflow-x:auto}a.run{word-break:break-all}
.stuck{border:2px solid #c62828;background:#fdecea;border-radius:6px;padding:8px 12px;margin:10px 0}
.stuck h2{margin:0 0 4px;color:#c62828}.stuck pre{background:#fff;padding:6px;margin:4px 0;white-space:pre-wrap}
"""


def _state(s: Any) -> str:
    return (f'<span class="state" style="background:{STATE_COLOURS.get(str(s), "#000")}">{esc(s)}</span>'
            if s else "-")


MAX_UPSTREAM_LINKS = 20  # per upstream pipeline, in one batch's range


def _range_cell(r: dict, airflow_base: str = "") -> str:
    """The batch's range: its one-line summary, then every file or partition in a <details>; a
    delta source's batch links each upstream batch it read to that batch in the upstream's ledger."""
    rng = r.get("offsets") or {}
    detail = range_detail(str(r.get("source_kind")), rng) if isinstance(rng, dict) else RangeDetail()
    items: list[str] = []
    for up, ids in detail.upstream:
        links = [f'<a href="{esc(airflow_base)}/eobatch/pipelines/{esc(url_path(up))}?batch={int(b)}#batch-{int(b)}">'
                 f'{int(b)}</a>' for b in list(ids)[:MAX_UPSTREAM_LINKS]]
        more = f" and {len(ids) - MAX_UPSTREAM_LINKS} more" if len(ids) > MAX_UPSTREAM_LINKS else ""
        items.append(f'<li>read upstream <span class="mono">{esc(up)}</span> batch{"es" if len(ids) > 1 else ""} '
                     f'{", ".join(links)}{more}</li>')
    for f in detail.files:
        items.append(f'<li><span class="mono">{esc(f.path)}</span> '
                     f'<span class="muted">({esc(fmt_int(f.records))} records, '
                     f'{esc(fmt_bytes(f.size))})</span></li>')
    if isinstance(rng, dict) and rng.get("files_not_shown"):  # the page lists a few (eobatch.ui.view.PAGE_FILES)
        items.append(f'<li class="muted">... and {esc(fmt_int(rng["files_not_shown"]))} more files (the JSON lists '
                     f'them all)</li>')
    for topic, p, first, end in detail.partitions:
        items.append(f'<li>topic <span class="mono">{esc(topic)}</span> partition {esc(p)}: '
                     f'offsets [{esc(first)}, {esc(end)})</li>')
    summary = esc(r.get("source_range"))
    if not items:
        return summary
    return f'<details><summary>{summary}</summary><ul class="notes small">{"".join(items)}</ul></details>'


def _when(iso: Any) -> str:
    """"2026-11-23T14:22:37.123+00:00" as "2026-11-23 14:22:37" (UTC; the full value is the title)."""
    return str(iso)[:19].replace("T", " ") if iso else "-"


def _run_link(view: PageView, run_id: str | None) -> str:
    if not run_id:
        return '<span class="muted">-</span>'
    href = f"{view.airflow_base}/dags/{url_path(view.pipeline)}/runs/{url_path(run_id)}"
    return (f'<a class="run" href="{esc(href)}" target="_top" title="this batch\'s DAG run in Airflow">'
            f'{esc(run_id)}</a>')


def _changes_html(changes: dict | None) -> str:
    """What a batch's commit did to the sink table per kind of change (a merge sink), under its
    published count."""
    text = changes_text(changes)
    return f'<div class="small muted changes">{esc(text)}</div>' if text else ""


def _row_html(view: PageView, r: dict) -> str:
    cut = r.get("delta_versions") or {}  # every table's version: the pipeline as of this batch (`eobatch as-of`)
    versions = "-" if r.get("delta_version") is None else (
        f'<span title="{esc(", ".join(f"{k} {v}" for k, v in sorted(cut.items())))}">{esc(r["delta_version"])}'
        f'<span class="muted"> / {esc(r.get("quarantine_delta_version"))}</span></span>')
    phases = " · ".join(f'{name} {fmt_s(r.get(k))}' for k, name, _ in PHASES)
    attempts = esc(r.get("attempts")) + (f' <span class="muted">({esc(r["aborted_attempts"])} aborted)</span>'
                                         if r.get("aborted_attempts") else "")
    notes = r.get("notes") or []
    notes_html = (f'<ul class="notes small">{"".join(f"<li>{esc(n)}</li>" for n in notes)}</ul>' if notes else "")
    extra = []
    if r.get("rows_dropped"):
        extra.append(f"{r['rows_dropped']:,} dropped by expectations")
    failed = {k: v for k, v in (r.get("expectations") or {}).items() if v}
    if failed:
        extra.append("expectations failed: " + ", ".join(f"{k} {v:,}" for k, v in sorted(failed.items())))
    if r.get("recovered"):
        extra.append("committed by recovery")
    if r.get("interval"):
        iv = r["interval"]
        extra.append(f"interval {iv.get('start')} / {iv.get('end')}")
    if extra:
        notes_html = f'<div class="small muted">{esc("; ".join(extra))}</div>' + notes_html
    mark = ' class="mark"' if (view.run_id and r.get("run_id") == view.run_id) or r["batch_id"] == view.batch else ""
    fp = r.get("fingerprint")
    return (f'<tr id="batch-{esc(r["batch_id"])}"{mark} data-batch="{esc(r["batch_id"])}" data-state="{esc(r.get("state"))}">'
            f'<td class="num"><b>{esc(r["batch_id"])}</b></td><td>{_state(r.get("state"))}</td>'
            f'<td>{_range_cell(r, view.airflow_base)}</td>'
            f'<td class="num">{fmt_int(r.get("rows_in"))}</td><td class="num">{fmt_int(r.get("rows_published"))}'
            f'{_changes_html(r.get("changes"))}</td>'
            f'<td class="num">{fmt_int(r.get("rows_quarantined"))}</td>'
            f'<td class="num">{versions}</td>'
            f'<td><span class="mono" title="{esc(fp)}">{esc(fp[:8] if fp else None)}</span></td>'
            f'<td class="num">{attempts}</td><td class="small">{esc(phases)}</td>'
            f'<td class="small"><span title="{esc(r.get("planned_at"))}">{esc(_when(r.get("planned_at")))}</span>'
            f'<br>{_run_link(view, r.get("run_id"))}</td>'
            f'<td>{notes_html}</td></tr>')


def _backlog_html(b: dict) -> str:
    if b.get("error"):
        return f'<p>The backlog could not be read now: <span class="mono">{esc(b["error"])}</span></p>'
    cards = []
    if b.get("files") is not None:
        cards.append(("files not yet planned", fmt_int(b["files"])))
        cards.append(("bytes not yet planned", fmt_bytes(b.get("bytes"))))
    cards.append(("records not yet planned", fmt_int(b.get("records")) if b.get("records") is not None
                  else "not counted"))
    if b.get("not_taken"):  # visible landing files never read: their names source.include does not take
        cards.append(("files not taken (names)", fmt_int(b["not_taken"])))
    if b.get("partitions"):
        cards.append(("partitions", ", ".join(f"{p}: {n:,}" for p, n in sorted(b["partitions"].items()))))
    age = b.get("oldest_unpublished_age_s")
    cards.append(("oldest unpublished", f"{fmt_age(age)} old" if age is not None else
                  "nothing unpublished" if b.get("unpublished") is False else "not known"))
    html_cards = "".join(f'<div class="card"><span class="muted small">{esc(k)}</span><b>{esc(v)}</b></div>'
                         for k, v in cards)
    since = (f'<p class="small">Oldest unpublished landing file: modified at {esc(b["oldest_unpublished_at"])}.</p>'
             if b.get("oldest_unpublished_at") else "")
    notes = "".join(f"<li>{esc(n)}</li>" for n in b.get("notes") or [])
    return f'<div class="cards">{html_cards}</div>{since}<ul class="notes small muted">{notes}</ul>'


def stuck_html(s: dict | None) -> str:
    """The banner of a stuck pipeline (``eobatch.core.stuck``): the batch, since when, the runs and
    attempts that tried it, the last error and the one repair with its command; "" when none."""
    if not s:
        return ""
    if s.get("error"):
        return (f'<div class="stuck" id="stuck" role="alert"><h2>Stuck or not: not known now</h2><p>The stuck '
                f'detector could not read the ledger: <span class="mono">{esc(s["error"])}</span></p></div>')
    rep = s.get("repair") or {}
    if s.get("last_error"):
        at = f" ({esc(_when(s['last_error_at']))} UTC)" if s.get("last_error_at") else ""
        error = f'<p>Last error{at}: <span class="mono">{esc(s["last_error"])}</span></p>'
    else:
        error = "<p class=\"muted\">No error recorded in the ledger: see the log of the last run's failed task.</p>"
    runs = ", ".join(str(r) for r in s.get("run_ids") or [])
    runs = f' (<span class="mono">{esc(runs)}</span>)' if runs else ""
    command = f"<pre><code>{esc(rep['command'])}</code></pre>" if rep.get("command") else ""
    return (f'<div class="stuck" id="stuck" role="alert" data-batch="{esc(s.get("batch_id"))}">'
            f'<h2>Stuck: batch {esc(s.get("batch_id"))} is {esc(s.get("state"))} since '
            f'<span title="{esc(s.get("since"))}">{esc(_when(s.get("since")))} UTC</span></h2>'
            f'<p>{esc(s.get("why"))}. Tried by {esc(s.get("runs"))} run(s){runs}, {esc(s.get("attempts"))} stage '
            f'attempt(s), {esc(s.get("aborted"))} aborted.</p>{error}'
            f'<p><b>Repair: {esc(rep.get("name"))}.</b> {esc(rep.get("text"))}</p>{command}</div>')


def _pager_html(view: PageView) -> str:
    p = view.pager
    if p.pages <= 1:
        return ""

    def link(n: int, text: str) -> str:
        q = urllib.parse.urlencode({"page": n, "per_page": p.per_page})
        return f'<a href="?{esc(q)}">{esc(text)}</a>'

    parts = [link(1, "« newest")] if p.page > 1 else []
    if p.page > 1:
        parts.append(link(p.page - 1, "‹ newer"))
    parts.append(f"<span>page {p.page} of {p.pages}</span>")
    if p.page < p.pages:
        parts += [link(p.page + 1, "older ›"), link(p.pages, "oldest »")]
    return f'<p class="pager">{"".join(parts)}</p>'


def render_page(view: PageView) -> str:
    """The whole ledger page of one pipeline."""
    p = view.pager
    dag_href = f"{view.airflow_base}/dags/{url_path(view.pipeline)}"
    json_href = f"{view.airflow_base}/eobatch/api/pipelines/{url_path(view.pipeline)}/batches"
    first = (p.page - 1) * p.per_page
    shown = (f"batches {p.total - first - len(view.rows) + 1}..{p.total - first} of {p.total}, newest first"
             if view.rows else "no batches yet")
    mark = ""
    if view.run_id:
        hits = [r["batch_id"] for r in view.rows if r.get("run_id") == view.run_id]
        mark = (f'<p>DAG run <span class="mono">{esc(view.run_id)}</span> planned batch{"es" if len(hits) > 1 else ""} '
                f'{", ".join(esc(b) for b in sorted(hits))} (highlighted).</p>' if hits else
                f'<p>DAG run <span class="mono">{esc(view.run_id)}</span> planned no batch on this page (a run '
                f'that found nothing new, or failed before its plan, plans none).</p>')
    head = ["batch", "state", "source range", "rows in", "published", "quarantined", "Delta version sink / bad",
            "fingerprint", "attempts", "seconds per phase", "planned, by DAG run", "notes"]
    rows_html = "".join(_row_html(view, r) for r in view.rows)
    table = (f'<div class="scroll"><table id="batches"><thead><tr>{"".join(f"<th>{esc(h)}</th>" for h in head)}'
             f'</tr></thead><tbody>{rows_html}</tbody></table></div>' if view.rows else
             '<p>No batches yet. Trigger the DAG (the ▶ button): each run plans, stages, verifies and commits '
             'one batch of what has landed.</p>')
    states = "".join(f'<dt>{_state(s)}</dt><dd class="small" style="margin:0">{esc(m)}</dd>'
                     for s, m in STATE_MEANING.items())
    versions = ", ".join(f"{esc(k)}: {esc(v)}" for k, v in sorted(view.committed_versions.items()))
    desc = f'<p>{esc(view.description)}</p>' if view.description else ""
    rewinds = (f'<ul class="notes small">{"".join(f"<li>{esc(r)}</li>" for r in view.rewinds)}</ul>'
               if view.rewinds else "")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(view.pipeline)}: batch ledger</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>
<body>
<h1>Batch ledger of <span class="mono" style="font-size:20px">{esc(view.pipeline)}</span></h1>
{stuck_html(view.stuck)}
<p class="muted">{esc(view.mode)} mode, source {esc(view.source_kind)}, schedule {esc(view.schedule or "none (manual runs)")}
 · batches committed in every table up to txn {esc(min(view.committed_versions.values()) if view.committed_versions else None)}
 ({versions}) · <a href="{esc(dag_href)}" target="_top">the DAG in Airflow</a>
 · <a href="{esc(json_href)}">JSON</a></p>
{desc}
<p class="small">Each run of the DAG handles one micro-batch: it records the batch's source range (plan), the
Spark job writes its files (stage), they are checked (verify) and published in one Delta commit per table
(commit). A batch's records reach the tables exactly once, whatever fails.</p>
<h2>Backlog</h2>
{_backlog_html(view.backlog)}
<p class="small">{esc(view.maintenance or "No maintenance pass yet (the DAG " + view.pipeline + "_maintenance, or eobatch maintain " + view.pipeline + ").")}</p>
<h2>Timeline of the last {len(view.chart_rows)} batches</h2>
{timeline_svg(view.chart_rows)}
<h2>Batches</h2>
{rewinds}<p class="small muted">{esc(shown)}</p>
{mark}{_pager_html(view)}{table}{_pager_html(view)}
<details class="small" style="margin-top:14px"><summary>What the states mean</summary><dl class="states">{states}</dl>
</details>
<script>{TOP_LINKS_JS}</script>
</body></html>
"""


def render_message(title: str, message: str, link: tuple[str, str] | None = None) -> str:
    """A small page for a refusal or an unknown pipeline: the title, the message, one link."""
    a = f'<p><a href="{esc(link[0])}" target="_top">{esc(link[1])}</a></p>' if link else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<style>{CSS}</style></head><body><h1>{esc(title)}</h1><p>{esc(message)}</p>{a}'
            f'<script>{TOP_LINKS_JS}</script></body></html>\n')


NOT_A_PIPELINE = "Not an eobatch pipeline"


def render_not_found(name: str, airflow_base: str = "") -> str:
    """The page of a DAG that is not a pipeline: Airflow shows the "Batch ledger" tab on every DAG
    (its plugins' tabs have no per-DAG condition, ``plugin``), so the tab of any other DAG lands
    here. It says so, names no other pipeline (the user may read only this DAG) and no folder of
    the deployment."""
    return render_message(
        NOT_A_PIPELINE,
        f"The DAG {name!r} is not an eobatch pipeline, so it has no batch ledger. Airflow shows the "
        f"Batch ledger tab on every DAG; on the DAG of an eobatch pipeline it shows the pipeline's batches.",
        (f"{airflow_base}/dags", "All DAGs"))
