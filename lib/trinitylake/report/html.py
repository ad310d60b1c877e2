"""Rendering of `ReportData` as one self-contained HTML page (inline CSS and SVG, no scripts,
no external resources). Every string that comes from the lakehouse or the control table goes
through `esc`."""

from __future__ import annotations

import json

from trinitylake.options import JOB_OPTIONS
from trinitylake.report.data import IcebergTable, JobRun, Reach, ReportData, VersionPoint
from trinitylake.report.lanes import job_label, job_title
from trinitylake.report.svg import (
    Plot,
    byte_ticks,
    esc,
    fmt_bytes,
    fmt_duration,
    fmt_metric,
    fmt_num,
    fmt_time,
    hbar_chart,
    nice_ticks,
    swatch,
)
from trinitylake.report.timeline import COLORS, timeline_svg

STATE_CLASS = {"completed": "ok", "committed": "ok", "deleted": "del", "dry_run": "dry", "recovered": "warn",
               "failed": "bad", "running": "run", "read": "dim", "partial": "warn"}
MAX_BAR_ROWS = 15  # runs in the per-run bar charts (the newest)
VERSION_ROWS_SHOWN = 15  # newest versions shown open; older ones in collapsed pages of JOB_PAGE
MAX_TABLE_VERSIONS = 200
JOB_ROWS_SHOWN = 20  # newest runs shown open; older ones in collapsed pages of JOB_PAGE
JOB_PAGE = 50
MAX_JOB_ROWS = 500  # beyond this the page points to `tlake show --job`

CSS = """
:root { --ink:#111827; --muted:#6b7280; --line:#e5e7eb; --bg:#f3f4f6; --card:#ffffff; --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif; }
header { background:#0f172a; color:#f8fafc; padding:22px 32px 18px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:650; letter-spacing:.2px; }
header .uri { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:13px; color:#cbd5e1;
  word-break:break-all; }
header .gen { color:#94a3b8; font-size:12px; margin-top:4px; }
main { max-width:1060px; margin:0 auto; padding:20px 24px 40px; }
.tiles { display:grid; grid-template-columns:repeat(auto-fill, minmax(200px, 1fr)); gap:12px; margin:0 0 18px; }
.tile { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:10px 14px; }
.tile .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.5px; }
.tile .v { font-size:22px; font-weight:650; margin-top:2px; }
.tile .s { color:var(--muted); font-size:12px; }
section { background:var(--card); border:1px solid var(--line); border-radius:12px; padding:16px 20px 18px;
  margin:0 0 18px; }
section h2 { margin:0 0 4px; font-size:17px; }
section p.lead { margin:0 0 10px; color:var(--muted); font-size:13px; }
.note { background:#fffbeb; border:1px solid #fde68a; color:#92400e; border-radius:8px; padding:8px 12px;
  margin:0 0 12px; font-size:13px; }
.chart { width:100%; height:auto; display:block; margin:6px 0 2px; }
.chart .tick { font-size:11px; fill:#6b7280; }
.chart .axis { font-size:12px; fill:#374151; }
.chart .vlabel { font-size:11px; font-weight:600; }
.chart .bandlabel { font-size:11px; fill:#6b7280; font-style:italic; }
.chart .note { font-size:11px; font-weight:600; }
.chart .rowlabel { font-size:12px; fill:#374151; }
.chart .barval { font-size:11px; fill:#374151; }
.legend { display:flex; flex-wrap:wrap; gap:6px 18px; margin:6px 0 4px; font-size:12.5px; color:#374151; }
.legend span { display:inline-flex; align-items:center; gap:6px; }
.sw { flex:none; }
h3 { font-size:14px; margin:16px 0 2px; }
table { border-collapse:collapse; width:100%; font-size:12.5px; margin-top:8px; }
th { text-align:left; color:var(--muted); font-weight:600; border-bottom:2px solid var(--line); padding:6px 8px;
  white-space:nowrap; }
td { border-bottom:1px solid var(--line); padding:6px 8px; vertical-align:top; }
td.num, th.num { text-align:right; font-variant-numeric: tabular-nums; white-space:nowrap; }
td.nowrap { white-space:nowrap; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12px; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:11.5px; font-weight:600;
  background:#e5e7eb; color:#374151; white-space:nowrap; }
.badge.ok { background:#dcfce7; color:#166534; } .badge.bad { background:#fee2e2; color:#991b1b; }
.badge.warn { background:#fef3c7; color:#92400e; } .badge.run { background:#dbeafe; color:#1e40af; }
.badge.dim { background:#f3f4f6; color:#6b7280; }
.badge.del { background:#fae8ff; color:#86198f; } .badge.dry { background:#cffafe; color:#155e75; }
details.metrics summary, details.page summary { cursor:pointer; color:#374151; font-size:12px; }
details.metrics[open] summary { margin-bottom:4px; }
details.page { margin-top:8px; }
.lane-title { font-size:12px; color:var(--muted); margin:10px 0 0; }
.badge.k-rollback { background:#ffedd5; color:#9a3412; } .badge.k-expire { background:#fee2e2; color:#991b1b; }
.badge.k-export { background:#d1fae5; color:#065f46; } .badge.k-init { background:#e5e7eb; color:#111827; }
.badge.k-expired { background:#f3f4f6; color:#6b7280; } .badge.k-commit { background:#dbeafe; color:#1e40af; }
.chips { display:flex; flex-wrap:wrap; gap:4px; }
.chip { background:#f3f4f6; border-radius:6px; padding:1px 6px; white-space:nowrap; font-size:11.5px; }
.chip b { font-weight:600; }
td.job { min-width:250px; max-width:360px; }
.err { color:#991b1b; font-size:12px; margin-top:3px; word-break:break-word; }
.args { color:var(--muted); word-break:break-all; }
.changes { color:#374151; }
.muted { color:var(--muted); }
footer { color:var(--muted); font-size:12px; text-align:center; padding:0 0 30px; }
.empty { color:var(--muted); font-style:italic; padding:8px 0; }
.grid2 { display:grid; grid-template-columns:1fr; gap:4px; }
"""


def render(data: ReportData) -> str:
    """The whole page."""
    title = f"TrinityLake report · {data.uri}"
    body = "".join(
        [
            _header(data),
            "<main>",
            _tiles(data),
            "".join(f'<div class="note">{esc(n)}</div>' for n in data.notes),
            _timeline_section(data),
            _jobs_section(data),
            _reach_section(data),
            _versions_section(data),
            _iceberg_section(data),
            _snapshots_section(data),
            "</main>",
            f"<footer>Generated by <code>tlake report</code> at {esc(fmt_time(data.generated_at))} UTC · "
            f"self-contained page: no scripts, no external resources.</footer>",
        ]
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n"
    )


# ---- header ----------------------------------------------------------------------------------
def _header(d: ReportData) -> str:
    return (
        "<header><h1>TrinityLake lakehouse report</h1>"
        f'<div class="uri">{esc(d.uri)}</div>'
        f'<div class="gen">generated {esc(fmt_time(d.generated_at))} UTC · control table '
        f'<span class="mono">{esc(d.control_uri)}</span> ({esc(d.audit_state)})</div></header>'
    )


def _tile(k: str, v: str, s: str = "") -> str:
    return f'<div class="tile"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div><div class="s">{esc(s)}</div></div>'


def _tiles(d: ReportData) -> str:
    avail = d.available_versions
    last = d.reach[-1] if d.reach else None
    failed = sum(1 for j in d.jobs if j.state == "failed")
    tiles = [
        _tile("latest version", str(d.latest_version),
              f"created {fmt_time(avail[-1].created_at)}" if avail and avail[-1].created_at else ""),
        _tile("available versions", fmt_num(len(avail)), f"v{d.oldest_version} … v{d.latest_version}"),
        _tile("oldest retained", str(d.oldest_retained_version),
              f"{len(d.expired_versions)} expired version(s) in the audit log" if d.expired_versions else "nothing expired yet"
              if d.oldest_retained_version == 0 else ""),
        _tile("namespaces", fmt_num(d.namespaces), "at the latest version"),
        _tile("tables", fmt_num(d.tables), f"{fmt_num(d.views)} view(s)" if d.views else "at the latest version"),
        _tile("job runs", fmt_num(len(d.jobs)), f"{failed} failed" if failed else "none failed" if d.jobs else ""),
        _tile("exported snapshots", fmt_num(len(d.snapshots)), ", ".join(s.name for s in d.snapshots[:3])
              + (" …" if len(d.snapshots) > 3 else "")),
        _tile("files at latest", fmt_num(last.files) if last else "–", fmt_bytes(last.bytes) if last else ""),
    ]
    return f'<div class="tiles">{"".join(tiles)}</div>'


def _legend(items: list[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f"<span>{sw}{esc(t)}</span>" for sw, t in items) + "</div>"


def _timeline_section(d: ReportData) -> str:
    svg, legend = timeline_svg(d)
    rb = [p for p in d.versions if p.kind == "rollback"]
    lead = (f"{len(d.available_versions)} available version(s)"
            + (f", {len(d.expired_versions)} expired version(s) known from the control table" if d.expired_versions else "")
            + (f", {len(rb)} rollback(s)" if rb else "")
            + ". Hover a mark for its transaction and changes.")
    return f'<section id="timeline"><h2>Versions over time</h2><p class="lead">{esc(lead)}</p>{svg}{_legend(legend)}</section>'


# ---- job runs --------------------------------------------------------------------------------
def _metrics_chips(j: JobRun) -> str:
    """The run's key metrics in a line, every metric behind a collapsed <details> (a run
    records 30-45 of them: shown open, they made each row a wall of chips)."""
    ms = j.key_metrics()
    if not ms:
        return '<span class="muted">–</span>'
    key = ", ".join(f"{k.removeprefix('files_').removeprefix('bytes_')} {fmt_metric(k, v)}" for k, v in ms[:3])
    return (f'<details class="metrics"><summary>{esc(key)} · {len(ms)} metrics</summary><div class="chips">'
            + "".join(f'<span class="chip" title="{esc(k)} = {esc(repr(v))}">{esc(k)} <b>{esc(fmt_metric(k, v))}</b></span>'
                      for k, v in ms)
            + "</div></details>")


def _arg_text(v: object) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)


_MS_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s"))


def _ms_text(ms: int) -> str:
    """A duration option's stored milliseconds in the largest unit that keeps it exact, as the
    command line takes it (``1000`` -> ``1s``, ``604800000`` -> ``7d``)."""
    for size, unit in _MS_UNITS:
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _shown_value(job: str, key: str, v: object) -> str:
    opt = (JOB_OPTIONS.get(job) or {}).get(key)
    if opt is not None and opt.kind == "duration" and isinstance(v, int) and not isinstance(v, bool):
        return _ms_text(v)
    return _arg_text(v)


def _args(j: JobRun) -> str:
    """The run's non-default arguments as ``key=value`` (every argument in the tooltip);
    durations with their unit (they are stored in milliseconds)."""
    shown = j.shown_arguments()
    if not shown:
        return ""
    text = " ".join(f"{k}={_shown_value(j.name, k, v)}" for k, v in shown.items())
    every = json.dumps(j.arguments, sort_keys=True, default=str, ensure_ascii=False)
    return f'<div class="args mono" title="{esc(every[:2000])}">{esc(text)}</div>'


def _jobs_section(d: ReportData) -> str:
    if not d.jobs:
        why = "" if d.audit_state == "ok" else " (the control table was not read)"
        return (f'<section id="jobs"><h2>Job runs</h2><div class="empty">No job runs recorded{esc(why)}.</div></section>')
    runs = d.jobs[-MAX_BAR_ROWS:]
    rows = [(job_label(j), job_title(j)) for j in runs]
    parts = ['<section id="jobs"><h2>Job runs</h2>',
             f'<p class="lead">{len(d.jobs)} run(s) of maintenance and export jobs'
             + (f"; the charts show the newest {len(runs)}" if len(runs) < len(d.jobs) else "") + ".</p>"]
    durations = [j.duration_s for j in runs]
    if any(v is not None for v in durations):
        parts.append("<h3>Duration per run</h3>")
        parts.append(hbar_chart(rows, [("duration", "#2563eb", durations)], label="job run durations",
                                value_fmt=fmt_duration, axis_label="seconds",
                                ticks_fn=lambda hi: [(t, fmt_num(t)) for t in nice_ticks(0, hi, 5)]))
    count_series = []
    for key, name, color in (("files_deleted", "files deleted", COLORS["expire"]), ("files_copied", "files copied", COLORS["export"])):
        vals = [j.metrics.get(key) for j in runs]
        if any(v is not None for v in vals):
            count_series.append((name, color, vals))
    if count_series:
        with_counts = [i for i, _ in enumerate(runs) if any(s[2][i] is not None for s in count_series)]
        parts.append("<h3>Files deleted / copied per run</h3>")
        parts.append(_legend([(swatch("band", c), n) for n, c, _ in count_series]))
        parts.append(hbar_chart([rows[i] for i in with_counts], [(n, c, [v[i] for i in with_counts]) for n, c, v in count_series],
                                label="files deleted and copied per job run", axis_label="files"))
    newest_first = list(reversed(d.jobs))[:MAX_JOB_ROWS]
    parts.append("<h3>All runs (newest first)</h3>")
    parts.append(_job_table(newest_first[:JOB_ROWS_SHOWN]))
    for start in range(JOB_ROWS_SHOWN, len(newest_first), JOB_PAGE):
        page = newest_first[start:start + JOB_PAGE]
        parts.append(f'<details class="page"><summary>older runs {start + 1}–{start + len(page)} of {len(d.jobs)}'
                     f'</summary>{_job_table(page)}</details>')
    if len(d.jobs) > MAX_JOB_ROWS:
        parts.append(f'<p class="lead">{len(d.jobs) - MAX_JOB_ROWS} older run(s) not listed here: '
                     f'<code>tlake show --job NAME</code> lists every run.</p>')
    parts.append("</section>")
    return "".join(parts)


def _job_table(runs: list[JobRun]) -> str:
    parts = ['<table><thead><tr><th>job</th><th class="num">txn_seq</th><th>state</th>'
             '<th>start (UTC)</th><th class="num">duration</th><th>versions</th><th>metrics</th></tr></thead><tbody>']
    for j in runs:
        versions = ""
        if j.commits:
            versions = ", ".join(f"v{v}" for v in sorted(set(j.commits)))
        elif j.version_before is not None:
            versions = f"at v{j.version_before}"
        err = f'<div class="err">{esc(j.error[:600])}</div>' if j.error else ""
        parts.append(
            f'<tr data-job="{esc(j.job)}" data-state="{esc(j.state)}"><td class="job"><b>{esc(j.label)}</b>{_args(j)}{err}</td>'
            f'<td class="num">{esc("" if j.txn_seq is None else j.txn_seq)}</td>'
            f'<td><span class="badge {STATE_CLASS.get(j.state, "")}">{esc(j.state)}</span></td>'
            f'<td class="nowrap">{esc(fmt_time(j.started_at))}</td>'
            f'<td class="num">{esc(fmt_duration(j.duration_s))}</td>'
            f'<td class="nowrap">{esc(versions)}</td><td>{_metrics_chips(j)}</td></tr>'
        )
    parts.append("</tbody></table>")
    return "".join(parts)


# ---- reachable files -------------------------------------------------------------------------
def reach_svgs(d: ReportData) -> tuple[str, str]:
    r = d.reach
    xs = [x.version for x in r]
    x_range = (min(xs) - 0.5, max(xs) + 0.5) if len(xs) > 1 else (xs[0] - 1, xs[0] + 1)
    x_ticks = [(t, fmt_num(t)) for t in nice_ticks(x_range[0], x_range[1], 10, integer=True)]
    size = 3.5 if len(r) <= 80 else 2.2 if len(r) <= 250 else 0
    # files
    f_hi = max(x.files for x in r) or 1
    f_ticks = nice_ticks(0, f_hi * 1.08, 5, integer=True)
    p1 = Plot(x_range, (0, max(f_ticks[-1], f_hi)), height=260)
    p1.axes(x_ticks, [(t, fmt_num(t)) for t in f_ticks], "version", "files")
    for key, color, attr in (("files", COLORS["files"], "files"), ("nodes", COLORS["nodes"], "node_files"),
                             ("defs", COLORS["defs"], "def_files")):
        pts = [(x.version, getattr(x, attr)) for x in r]
        p1.line(pts, color, width=2.2 if key == "files" else 1.6, area=key == "files")
        if size:
            for x in r:
                p1.mark(x.version, getattr(x, attr), "circle", color, size=size if key == "files" else size * 0.8,
                        title=_reach_title(x), extra=f'data-version="{x.version}"' if key == "files" else "")
    # bytes
    b_hi = max(x.bytes for x in r) or 1
    b_ticks = byte_ticks(b_hi * 1.08, 5)
    p2 = Plot(x_range, (0, max(b_ticks[-1][0], b_hi)), height=260)
    p2.axes(x_ticks, b_ticks, "version", "bytes")
    for key, color, attr in (("bytes", COLORS["bytes"], "bytes"), ("nodes", COLORS["nodes"], "node_bytes"),
                             ("defs", COLORS["defs"], "def_bytes")):
        p2.line([(x.version, getattr(x, attr)) for x in r], color, width=2.2 if key == "bytes" else 1.6,
                area=key == "bytes", dash=None if key == "bytes" else "5 3")
        if size and key == "bytes":
            for x in r:
                p2.mark(x.version, x.bytes, "circle", color, size=size, title=_reach_title(x))
    return p1.render("files reachable per version"), p2.render("bytes reachable per version")


def _reach_title(x: Reach) -> str:
    return (f"v{x.version} · {x.files:,} files ({x.node_files:,} node, {x.def_files:,} definition) · "
            f"{fmt_bytes(x.bytes)} · {x.new_files:,} new" + (f" · {x.missing} missing" if x.missing else ""))


def _reach_section(d: ReportData) -> str:
    if not d.reach:
        return '<section id="reach"><h2>Files and bytes reachable per version</h2><div class="empty">No versions walked.</div></section>'
    f_svg, b_svg = reach_svgs(d)
    first, last = d.reach[0].version, d.reach[-1].version
    cap = (f"Capped: the newest {len(d.reach)} of {d.reach_available} available versions are walked "
           f"(--max-versions {d.max_versions}). " if d.reach_capped else f"All {len(d.reach)} available version(s) walked. ")
    lead = (f"Node files (the root included) and definition files (the lakehouse definition included) reachable from "
            f"each root, v{first} … v{last}. {cap}{fmt_num(d.node_reads)} node file(s) read for this report "
            f"(walk {d.walk_seconds:.2f} s); nodes shared between versions are read once.")
    return (
        '<section id="reach"><h2>Files and bytes reachable per version</h2>'
        f'<p class="lead">{esc(lead)}</p>'
        + _legend([(swatch("line", COLORS["files"]), "all files"), (swatch("line", COLORS["nodes"]), "node files"),
                   (swatch("line", COLORS["defs"]), "definition files")])
        + f_svg
        + _legend([(swatch("line", COLORS["bytes"]), "all bytes"), (swatch("line", COLORS["nodes"], dash="5 3"), "node bytes"),
                   (swatch("line", COLORS["defs"], dash="5 3"), "definition bytes")])
        + b_svg + "</section>"
    )


# ---- tables ----------------------------------------------------------------------------------
def _versions_section(d: ReportData) -> str:
    pts = list(reversed(d.versions))[:MAX_TABLE_VERSIONS]
    more = len(d.versions) - len(pts)
    out = ['<section id="versions"><h2>Versions (newest first)</h2>']
    if more > 0:
        out.append(f'<p class="lead">The newest {len(pts)} of {len(d.versions)} versions.</p>')
    out.append(_versions_table(d, pts[:VERSION_ROWS_SHOWN]))
    for start in range(VERSION_ROWS_SHOWN, len(pts), JOB_PAGE):
        page = pts[start:start + JOB_PAGE]
        out.append(f'<details class="page"><summary>older versions v{page[-1].version}–v{page[0].version}</summary>'
                   f'{_versions_table(d, page)}</details>')
    out.append("</section>")
    return "".join(out)


def _versions_table(d: ReportData, pts: list[VersionPoint]) -> str:
    reach = {r.version: r for r in d.reach}
    out = []
    out.append('<table><thead><tr><th class="num">version</th><th>created (UTC)</th><th class="num">txn_seq</th><th>kind</th>'
               '<th>command</th><th>changes</th><th class="num">files</th><th class="num">bytes</th></tr></thead><tbody>')
    for p in pts:
        r = reach.get(p.version)
        kind = p.kind + (f" → v{p.rollback_to}" if p.kind == "rollback" and p.rollback_to is not None else "")
        ch = "; ".join(p.changes[:4]) + (f"; … {len(p.changes) - 4} more" if len(p.changes) > 4 else "")
        if p.corrupt:
            ch = f"corrupt: {p.corrupt}" + (f"; {ch}" if ch else "")
        snaps = "".join(f' <span class="badge" style="background:#ede9fe;color:#5b21b6">⚑ {esc(s)}</span>' for s in p.snapshots)
        out.append(
            f'<tr data-version="{p.version}"><td class="num"><b>{p.version}</b></td>'
            f'<td class="nowrap">{esc(fmt_time(p.created_at))}</td>'
            f'<td class="num">{esc("" if p.txn_seq is None else p.txn_seq)}</td>'
            f'<td><span class="badge k-{esc(p.kind)}">{esc(kind)}</span>{snaps}</td>'
            f"<td>{esc(p.command)}</td><td class=\"changes\">{esc(ch)}</td>"
            f'<td class="num">{esc(fmt_num(r.files) if r else "")}</td><td class="num">{esc(fmt_bytes(r.bytes) if r else "")}</td></tr>'
        )
    out.append("</tbody></table>")
    return "".join(out)


def _iceberg_section(d: ReportData) -> str:
    """Iceberg tables of the latest version: snapshot count and current snapshot from each
    table's metadata; the readable ones first, then one line per reason why others cannot be
    read (`unreadable_groups`: 278 tables whose metadata file is missing make one line)."""
    out = ['<section id="iceberg-tables"><h2>Iceberg tables (latest version)</h2>']
    ok = [t for t in d.iceberg_tables if not t.error]
    bad = [t for t in d.iceberg_tables if t.error]
    lead = [f"{fmt_num(len(ok))} table(s) with readable metadata, {fmt_num(sum(t.snapshots or 0 for t in ok))} "
            f"snapshot(s) in all"]
    if bad:
        lead.append(f"{fmt_num(len(bad))} whose metadata cannot be read")
    if d.other_format_tables:
        lead.append(f"{fmt_num(d.other_format_tables)} table(s) of another format not shown")
    if d.tables_left_out:
        lead.append(f"{fmt_num(d.tables_left_out)} table(s) past the first {fmt_num(len(d.iceberg_tables))} not read")
    if not d.iceberg_tables:
        out.append('<div class="empty">No Iceberg tables at the latest version.</div></section>')
        return "".join(out)
    out.append(f'<p class="lead">{esc("; ".join(lead))}.</p>')
    if ok:
        out.append(_iceberg_table(ok[:MAX_TABLE_VERSIONS]))
        if len(ok) > MAX_TABLE_VERSIONS:
            out.append(f'<p class="lead">… and {fmt_num(len(ok) - MAX_TABLE_VERSIONS)} more.</p>')
    if bad:
        out.append('<table><thead><tr><th>cannot be read</th><th>why</th></tr></thead><tbody>')
        for reason, tables in unreadable_groups(bad):
            names = ", ".join(t.name for t in tables[:3]) + (", …" if len(tables) > 3 else "")
            who = tables[0].name if len(tables) == 1 else f"{fmt_num(len(tables))} tables ({names})"
            out.append(f'<tr class="table-error"><td><b>{esc(who)}</b></td><td class="changes">'
                       f'error: {esc(reason)}</td></tr>')
        out.append("</tbody></table>")
    out.append("</section>")
    return "".join(out)


def unreadable_groups(bad: list[IcebergTable]) -> list[tuple[str, list[IcebergTable]]]:
    """Unreadable tables grouped by why: each error with the table's own metadata location
    replaced by ``<metadata_location>`` (so every table whose metadata file is missing gives
    one reason), most tables first; a group of one keeps its error as it was."""
    groups: dict[str, list[IcebergTable]] = {}
    for t in bad:
        err = t.error or ""
        key = err.replace(t.metadata_location, "<metadata_location>") if t.metadata_location else err
        groups.setdefault(key, []).append(t)
    out = [(k if len(ts) > 1 else (ts[0].error or k), ts) for k, ts in groups.items()]
    return sorted(out, key=lambda g: -len(g[1]))


def _iceberg_table(rows: list[IcebergTable]) -> str:
    out = ['<table><thead><tr><th>table</th><th class="num">snapshots</th><th class="num">current snapshot</th>'
           '<th class="num">rows</th><th>metadata</th></tr></thead><tbody>']
    for t in rows:
        out.append(f'<tr><td><b>{esc(t.name)}</b></td><td class="num">{esc(fmt_num(t.snapshots or 0))}</td>'
                   f'<td class="num mono">{esc("–" if t.current_snapshot_id is None else t.current_snapshot_id)}</td>'
                   f'<td class="num">{esc("" if t.total_records is None else fmt_num(t.total_records))}</td>'
                   f'<td class="mono">{esc(t.metadata_location or "")}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _snapshots_section(d: ReportData) -> str:
    out = ['<section id="snapshots"><h2>Exported snapshots</h2>']
    if not d.snapshots:
        out.append('<div class="empty">No exported snapshots recorded in the lakehouse definition.</div></section>')
        return "".join(out)
    out.append('<table><thead><tr><th>name</th><th class="num">version</th><th>location</th></tr></thead><tbody>')
    for s in d.snapshots:
        out.append(f'<tr><td><b>{esc(s.name)}</b></td><td class="num">{esc("" if s.version is None else s.version)}</td>'
                   f'<td class="mono">{esc(s.uri)}</td></tr>')
    out.append("</tbody></table></section>")
    return "".join(out)


__all__ = ["render", "reach_svgs", "timeline_svg"]
