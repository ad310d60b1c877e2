"""The versions-over-time chart of the report page: one step line of the latest version, a
mark per version (commits, rollbacks, job commits, expired versions, exported snapshots),
the commit-density and job-run lanes under it, and its legend. Colors and shapes of the
version kinds live here; the page (`trinitylake.report.html`) places the chart."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from trinitylake.report.data import ReportData, VersionPoint
from trinitylake.report.lanes import STATE_COLORS, STATE_LABELS, LabelPlacer, density_lane, job_title, jobs_lane
from trinitylake.report.svg import Plot, TimeScale, esc, fmt_gap, fmt_num, fmt_time, nice_ticks, swatch

COLORS = {
    "init": "#111827",
    "commit": "#2563eb",
    "rollback": "#ea580c",
    "expire": "#dc2626",
    "export": "#059669",
    "expired": "#9ca3af",
    "snapshot": "#7c3aed",
    "other": "#6b7280",
    "files": "#2563eb",
    "nodes": "#0891b2",
    "defs": "#a855f7",
    "bytes": "#0f766e",
}
SHAPES = {"init": "square", "commit": "circle", "rollback": "diamond", "expire": "triangle-down", "export": "triangle",
          "expired": "circle"}
KIND_LABELS = {
    "init": "lakehouse created",
    "commit": "commit",
    "rollback": "rollback (roll forward to an older version)",
    "expire": "version committed by an expire run",
    "export": "version committed by an export run",
    "expired": "expired version (from the control table)",
}
TIMELINE_MARGIN = (24, 28, 48, 64)

# ---- versions over time ----------------------------------------------------------------------
def _version_title(p: VersionPoint) -> str:
    parts = [f"v{p.version}"]
    if p.created_at is not None:
        parts.append(fmt_time(p.created_at))
    if p.txn_seq is not None:
        parts.append(f"txn_seq {p.txn_seq}")
    if p.command:
        parts.append(p.command)
    if p.kind == "rollback":
        parts.append((f"rollback to v{p.rollback_to} " if p.rollback_to is not None else "rollback ") + f"(from v{p.rollback_from})")
    if p.corrupt:
        parts.append(f"corrupt: {p.corrupt}")
    if p.kind == "expired":
        parts.append("expired")
    if p.snapshots:
        parts.append("exported as " + ", ".join(p.snapshots))
    if p.changes:
        parts.append("; ".join(p.changes[:5]) + (f"; … {len(p.changes) - 5} more" if len(p.changes) > 5 else ""))
    return " · ".join(parts)


def fmt_time_ms(ms: float) -> str:
    return fmt_time(datetime.fromtimestamp(ms / 1000, UTC))


def _at(p: VersionPoint) -> int:
    """`created_at_millis` of a point the chart kept for having one."""
    return cast(int, p.created_at_millis)


def timeline_svg(d: ReportData) -> tuple[str, list[tuple[str, str]]]:
    """The versions-over-time step chart and its legend entries (swatch HTML, label)."""
    timed = [p for p in d.versions if p.created_at_millis is not None]
    job_times = [j.time.timestamp() * 1000 for j in d.jobs if j.time is not None]
    xs = [_at(p) for p in timed] + job_times
    if not xs:
        return '<div class="empty">No versions with a creation time.</div>', []
    hi = max(xs)
    v_lo = min(p.version for p in d.versions)
    v_hi = max(p.version for p in d.versions)
    y_ticks = nice_ticks(v_lo, v_hi, 6, integer=True)
    y_range = (min(v_lo, y_ticks[0]) - 0.5, max(v_hi, y_ticks[-1]) + 0.9)
    # The job lanes under the chart share its x scale, so their row labels ("export drop", ...)
    # sit in its left margin: wide enough for the longest (12px text, ~7px a character).
    longest = max((len(j.name) for j in d.jobs if j.time is not None), default=0)
    top, right, bottom, left = TIMELINE_MARGIN
    plot = Plot((min(xs), hi), y_range, height=360, margin=(top, right, bottom, max(left, 7 * longest + 16)))
    scale = TimeScale(xs, plot.left, plot.right)
    plot.xscale = scale
    tks, caption = scale.ticks()
    plot.axes(tks, [(t, fmt_num(t)) for t in y_ticks], caption, "version")
    for px, a, b in scale.breaks():
        plot.xbreak(px, f"{fmt_gap(b - a)} without versions or job runs, cut out ({fmt_time_ms(a)} – {fmt_time_ms(b)})")
    legend: list[tuple[str, str]] = []
    kinds_seen: set[str] = set()

    boundary = max(d.oldest_retained_version, d.oldest_version)
    if boundary > 0:
        plot.hband(y_range[0], boundary - 0.5, "#f3f4f6", label=f"expired: below oldest retained version {boundary}",
                   title=f"versions below {boundary} are expired")
        legend.append((swatch("band", "#f3f4f6"), f"expired range (below v{boundary})"))

    # Expired versions known from the control table: hollow points on a dashed step line.
    expired = [p for p in timed if not p.available]
    avail = [p for p in timed if p.available]
    if expired:
        line = [(_at(p), p.version) for p in expired]
        if avail:
            line.append((_at(avail[0]), avail[0].version))
        plot.line(line, COLORS["expired"], dash="4 3", step=True, width=1.6)
    if avail:
        plot.line([(_at(p), p.version) for p in avail], COLORS["commit"], step=True, step_to=hi, width=2.2,
                  cls="versions")
        legend.insert(0, (swatch("line", COLORS["commit"]), "latest version over time"))
    size = 4.5 if len(timed) <= 150 else 3.0 if len(timed) <= 600 else 2.0
    by_version = {p.version: p for p in timed}
    labels = LabelPlacer(plot)
    for p in timed:
        if p.kind != "commit":
            labels.reserve(plot.sx(_at(p)), plot.sy(p.version))
    # Ordinary commits first, so the rarer marks (rollbacks, job commits) stay on top.
    for p in sorted(timed, key=lambda p: (p.kind not in ("commit", "expired"), p.version)):
        kinds_seen.add(p.kind)
        color = COLORS[p.kind]
        attrs = f'data-version="{p.version}" data-kind="{esc(p.kind)}"'
        plot.mark(_at(p), p.version, SHAPES[p.kind], color, title=_version_title(p),
                  size=size * (1.15 if p.kind in ("rollback", "expire", "export", "init") else 1), hollow=p.kind == "expired",
                  extra=attrs)
        if p.kind == "rollback":
            target = by_version.get(p.rollback_to) if p.rollback_to is not None else None
            if target is not None:
                plot.line([(_at(target), target.version), (_at(p), p.version)], COLORS["rollback"],
                          dash="3 3", width=1.3)
            labels.place(_at(p), p.version, f"↺ v{p.rollback_to}" if p.rollback_to is not None else "↺",
                         color=COLORS["rollback"], dx=7, dy=16)
    last = max(avail, key=lambda p: p.version, default=None)
    if last is not None:
        labels.place(_at(last), last.version, f"v{last.version}", color=COLORS["commit"], anchor="middle",
                     dy=-10)
    for p in timed:
        if p.snapshots:
            plot.mark(_at(p), p.version, "flag", COLORS["snapshot"], size=4, title=f"exported snapshot(s) of v{p.version}: "
                      + ", ".join(p.snapshots), extra=f'data-snapshot-version="{p.version}"')
            labels.place(_at(p), p.version, "⚑ " + ", ".join(p.snapshots), color=COLORS["snapshot"],
                         anchor="end", dx=-7, dy=-7)
    for kind in ("init", "commit", "rollback", "expire", "export", "expired"):
        if kind in kinds_seen:
            legend.append((swatch(SHAPES[kind], COLORS[kind], hollow=kind == "expired"), KIND_LABELS[kind]))
    if any(p.snapshots for p in timed):
        legend.append((swatch("flag", COLORS["snapshot"]), "exported snapshot (pinned version)"))
    lanes = []
    density, summary = density_lane(d.versions, scale, width=plot.w, margin_lr=(plot.ml, plot.mr))
    if density:
        lanes.append(f'<div class="lane-title">Ordinary commits, as a density: {esc(summary)}</div>{density}')
    jobs_svg = jobs_lane(d.jobs, scale, width=plot.w, margin_lr=(plot.ml, plot.mr), title_fn=job_title)
    if jobs_svg:
        lanes.append('<div class="lane-title">Maintenance job runs (one row per job; hollow: changed nothing)</div>'
                     + jobs_svg)
        for state in STATE_LABELS:
            if any(j.state == state for j in d.jobs):
                legend.append((swatch("circle", STATE_COLORS[state], hollow=state in ("dry_run", "read")),
                               f"job run: {STATE_LABELS[state]}"))
    return plot.render("versions over time") + "".join(lanes), legend
