"""The strips under the versions chart, on its time axis: maintenance job runs as marks (one
row per job, shape by job, colour by what the run did) and ordinary commits as a density (bars
of commits per time bucket), plus a label placer that drops a label rather than overlap one.

Ordinary commits are many and small, job runs few and consequential: drawn the same way (a
labelled line per entry) a demo lakehouse's 50 commits buried its jobs under overlapping
labels. Here nothing carries a text label inside the chart; each mark's tooltip names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import cast

from trinitylake.report.data import JobRun, VersionPoint
from trinitylake.report.svg import Plot, esc, fmt_duration, fmt_metric, fmt_num, fmt_time

#: Colour of a run by its state (`trinitylake.control.records.run_state`).
STATE_COLORS = {
    "committed": "#2563eb",
    "deleted": "#c026d3",
    "dry_run": "#0891b2",
    "read": "#6b7280",
    "failed": "#dc2626",
    "recovered": "#d97706",
    "running": "#1d4ed8",
    "partial": "#ea580c",
}
STATE_LABELS = {
    "committed": "committed a version",
    "deleted": "deleted files",
    "dry_run": "dry run (changed nothing)",
    "read": "read only (changed nothing)",
    "failed": "failed",
    "recovered": "recovered",
    "running": "running / unfinished",
    "partial": "partial (skipped a damaged table)",
}
JOB_SHAPES = {"expire": "triangle-down", "export": "triangle", "orphans": "diamond", "walk": "square"}
LANE_H = 22
BUCKET_PX = 8  # commits closer than this on the axis share one density bar


def job_name(j: JobRun) -> str:
    return j.name


def jobs_lane(jobs: Sequence[JobRun], xscale: Callable[[float], float], *, width: int, margin_lr: tuple[int, int],
              title_fn: Callable[[JobRun], str]) -> str:
    """One row per job name, a mark per run at its time; returns the SVG ('' without runs)."""
    timed = [j for j in jobs if j.time is not None]
    if not timed:
        return ""
    names = sorted({job_name(j) for j in timed})
    top, bottom = 4, 6
    plot = Plot((0, 1), (0, len(names)), width=width, height=top + bottom + LANE_H * len(names),
                margin=(top, margin_lr[1], bottom, margin_lr[0]), xscale=xscale)
    for i, name in enumerate(names):
        y = plot.sy(len(names) - i - 0.5)
        plot.layers["grid"].append(
            f'<line x1="{plot.left}" y1="{y:.1f}" x2="{plot.right}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{plot.left - 8}" y="{y + 4:.1f}" text-anchor="end" class="rowlabel">{esc(name)}</text>')
    for j in timed:
        row = len(names) - names.index(job_name(j)) - 0.5
        color = STATE_COLORS.get(j.state, STATE_COLORS["read"])
        plot.mark(cast(datetime, j.time).timestamp() * 1000, row, JOB_SHAPES.get(job_name(j), "circle"), color, size=5.5,
                  hollow=j.state in ("dry_run", "read"), title=title_fn(j),
                  extra=f'data-job-run="{esc(j.txn_seq if j.txn_seq is not None else "")}" data-state="{esc(j.state)}"')
    return plot.render("maintenance job runs over time")


def commit_buckets(points: Sequence[VersionPoint], sx: Callable[[float], float]) -> list[tuple[float, float, int, int, int]]:
    """(pixel start, pixel end, commits, first ms, last ms) of the density bars, in time order."""
    times = sorted(p.created_at_millis for p in points if p.created_at_millis is not None)
    out: list[tuple[float, float, int, int, int]] = []
    for t in times:
        px = sx(t)
        if out and px - out[-1][0] < BUCKET_PX:
            a, _b, n, t0, _t1 = out[-1]
            out[-1] = (a, px, n + 1, t0, t)
        else:
            out.append((px, px, 1, t, t))
    return out


def density_lane(points: Sequence[VersionPoint], xscale: Callable[[float], float], *, width: int,
                 margin_lr: tuple[int, int]) -> tuple[str, str]:
    """Bars of ordinary commits per time bucket; returns (SVG, a one-line summary)."""
    commits = [p for p in points if p.kind in ("commit", "init", "rollback", "expired")]
    if not commits:
        return "", ""
    height, top, bottom = 58, 6, 14
    plot = Plot((0, 1), (0, 1), width=width, height=height, margin=(top, margin_lr[1], bottom, margin_lr[0]),
                xscale=xscale)
    buckets = commit_buckets(commits, plot.sx)
    hi = max(b[2] for b in buckets)
    base = plot.bottom
    for a, b, n, t0, t1 in buckets:
        h = max(2.0, (n / hi) * (plot.bottom - plot.top))
        x = a - BUCKET_PX / 2 + 1
        span = fmt_time(_dt(t0)) + ("" if t0 == t1 else f" – {fmt_time(_dt(t1))}")
        plot.layers["marks"].append(
            f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{max(b - a + BUCKET_PX - 2, 3):.1f}" height="{h:.1f}" '
            f'fill="#2563eb" fill-opacity="0.55" data-commits="{n}"><title>{n} commit(s) · {esc(span)}</title></rect>')
    plot.layers["grid"].append(
        f'<line x1="{plot.left}" y1="{base}" x2="{plot.right}" y2="{base}" stroke="#9ca3af"/>'
        f'<text x="{plot.left - 8}" y="{base - 2}" text-anchor="end" class="rowlabel">commits</text>'
        f'<text x="{plot.left - 8}" y="{plot.top + 9}" text-anchor="end" class="tick">{hi}</text>')
    timed = sorted(p.created_at_millis for p in commits if p.created_at_millis is not None)
    span_s = (timed[-1] - timed[0]) / 1000 if len(timed) > 1 else 0.0
    summary = f"{fmt_num(len(commits))} commit(s)"
    if span_s > 0:
        summary += f" over {fmt_duration(span_s)}, {_rate(len(timed), span_s)}"
    summary += f"; the tallest bar holds {hi}."
    return plot.render("commits over time (density)"), summary


def _rate(n: int, seconds: float) -> str:
    for unit, s in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= s or unit == "minute":
            r = n / (seconds / s)
            return f"≈ {fmt_num(round(r, 1) if r < 10 else round(r))} per {unit}"
    return ""


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class LabelPlacer:
    """Text labels of one plot that never overlap: a label whose box (estimated from its
    length) would intersect one already placed is moved down a row, up to `tries` rows, and
    else dropped (its mark keeps the full text in its tooltip). Returns whether it was drawn."""

    CHAR_W = 6.6
    LINE_H = 13.0

    def __init__(self, plot: Plot, tries: int = 2):
        self.plot = plot
        self.tries = tries
        self.boxes: list[tuple[float, float, float, float]] = []

    def _box(self, x: float, y: float, text: str, anchor: str) -> tuple[float, float, float, float]:
        w = len(text) * self.CHAR_W
        x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
        return (x0, y - self.LINE_H + 3, x0 + w, y + 3)

    def reserve(self, px: float, py: float, r: float = 6) -> None:
        """Keep labels off a mark at pixel (px, py)."""
        self.boxes.append((px - r, py - r, px + r, py + r))

    def place(self, x: float, y: float, text: str, *, color: str, anchor: str = "start", dx: float = 0,
              dy: float = 0) -> bool:
        px, py = self.plot.sx(x) + dx, self.plot.sy(y) + dy
        for i in range(self.tries + 1):
            b = self._box(px, py + i * self.LINE_H, text, anchor)
            if b[0] < 0 or b[2] > self.plot.w:
                continue
            if not any(b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3] for o in self.boxes):
                self.boxes.append(b)
                self.plot.text(x, y, text, color=color, anchor=anchor, dx=dx, dy=dy + i * self.LINE_H)
                return True
        return False


def job_label(j: JobRun) -> str:
    """A run's short label: its job, its txn_seq, and a mark when it failed or was a dry run."""
    seq = f" #{j.txn_seq}" if j.txn_seq is not None else ""
    return f"{job_name(j)}{seq}" + (" ✗" if j.state == "failed" else " (dry run)" if j.state == "dry_run" else "")


def job_title(j: JobRun) -> str:
    """A run's hover text: its label, state, start, duration and key metrics."""
    bits = [job_label(j), j.state, f"start {fmt_time(j.started_at)}", f"duration {fmt_duration(j.duration_s)}"]
    bits += [f"{k} {fmt_metric(k, v)}" for k, v in j.key_metrics()[:6]]
    if j.error:
        bits.append(j.error[:200])
    return " · ".join(bits)
