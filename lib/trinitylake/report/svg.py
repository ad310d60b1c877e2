"""Small inline-SVG chart helpers: scales, ticks, axes, lines and steps, marks, bars.

Everything returns SVG markup as strings; every piece of text goes through `esc`. No
JavaScript: hover details are SVG ``<title>`` elements, which browsers show as tooltips.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
AXIS = "#6b7280"
GRID = "#e5e7eb"
INK = "#111827"


def esc(s: object) -> str:
    """Text for HTML/SVG content and attribute values (quotes escaped too)."""
    return html.escape(str(s), quote=True)


def _f(x: float) -> str:
    """A coordinate, short."""
    return f"{x:.1f}".rstrip("0").rstrip(".") if math.isfinite(x) else "0"


# ---- number formatting -----------------------------------------------------------------------
def fmt_num(x: float | int | None) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and not x.is_integer():
        a = abs(x)
        if a >= 100:
            return f"{x:,.0f}"
        if a >= 1:
            return f"{x:,.2f}".rstrip("0").rstrip(".")
        return f"{x:.3g}"
    return f"{int(x):,}"


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "–"
    n = float(n)
    i = 0
    while abs(n) >= 1024 and i < len(_UNITS) - 1:
        n /= 1024
        i += 1
    if i == 0:
        return f"{int(n)} B"
    return f"{n:.1f} {_UNITS[i]}" if abs(n) < 100 else f"{n:.0f} {_UNITS[i]}"


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def fmt_metric(name: str, value: float) -> str:
    if name.startswith("bytes_") or name.endswith("_bytes"):
        return fmt_bytes(value)
    if name.startswith("seconds_") or name.endswith("_seconds"):
        return fmt_duration(value)
    return fmt_num(value)


def fmt_time(t: datetime | None, with_date: bool = True) -> str:
    if t is None:
        return "–"
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S") if with_date else t.strftime("%H:%M:%S")


# ---- ticks -----------------------------------------------------------------------------------
def nice_ticks(lo: float, hi: float, n: int = 5, integer: bool = False) -> list[float]:
    """About `n` round values covering [lo, hi] (1, 2, 5 x 10^k steps)."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1, round(step))
        if step == 2.5:
            step = 2
    start = math.floor(lo / step) * step
    out = []
    v = start
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            out.append(round(v, 10))
        v += step
    return out


def byte_ticks(hi: float, n: int = 5) -> list[tuple[float, str]]:
    """Ticks from 0 to `hi` bytes at round values of one unit (0, 5 KiB, 10 KiB, ...)."""
    hi = max(float(hi), 1.0)
    i = 0
    unit = 1.0
    while hi / unit >= 1024 and i < len(_UNITS) - 1:
        unit *= 1024
        i += 1
    return [(t * unit, f"{fmt_num(t)} {_UNITS[i]}") for t in nice_ticks(0, hi / unit, n)]


_TIME_STEPS_MS = [
    1, 2, 5, 10, 20, 50, 100, 200, 500,
    1_000, 2_000, 5_000, 10_000, 15_000, 30_000,
    60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
    3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
    86_400_000, 2 * 86_400_000, 7 * 86_400_000, 14 * 86_400_000, 30 * 86_400_000,
    91 * 86_400_000, 182 * 86_400_000, 365 * 86_400_000,
]


def time_ticks(lo_ms: float, hi_ms: float, n: int = 6) -> tuple[list[tuple[float, str]], str]:
    """Ticks over an epoch-millisecond range, and the axis caption (date range, UTC)."""
    if hi_ms <= lo_ms:
        hi_ms = lo_ms + 1000
    span = hi_ms - lo_ms
    step = next((s for s in _TIME_STEPS_MS if span / s <= n), _TIME_STEPS_MS[-1])
    t = math.ceil(lo_ms / step) * step
    out: list[tuple[float, str]] = []
    d0 = datetime.fromtimestamp(lo_ms / 1000, UTC)
    d1 = datetime.fromtimestamp(hi_ms / 1000, UTC)
    same_day = d0.date() == d1.date()
    while t <= hi_ms:
        d = datetime.fromtimestamp(t / 1000, UTC)
        if step < 1000:
            label = d.strftime("%H:%M:%S.") + f"{d.microsecond // 1000:03d}"
        elif step < 60_000:
            label = d.strftime("%H:%M:%S")
        elif step < 86_400_000:
            label = d.strftime("%H:%M") if same_day else d.strftime("%m-%d %H:%M")
        else:
            label = d.strftime("%Y-%m-%d")
        out.append((float(t), label))
        t += step
    caption = f"time (UTC), {d0:%Y-%m-%d}" if same_day else f"time (UTC), {d0:%Y-%m-%d} – {d1:%Y-%m-%d}"
    return out, caption


class TimeScale:
    """Epoch-millisecond times to pixels, with long idle gaps compressed.

    Versions often come in bursts (a batch of commits, then hours of nothing, then a job
    run): a plain linear axis squeezes each burst into a few pixels. A gap longer than
    `gap_frac` of the whole span and `gap_ratio` times the median gap between events is cut
    out and drawn as a fixed-width break; the remaining segments share the width in
    proportion to their duration (each at least `min_seg_px`).
    """

    def __init__(self, times: Sequence[float], left: float, right: float, *, gap_frac: float = 0.12,
                 gap_ratio: float = 8.0, break_px: float = 22.0, min_seg_px: float = 70.0, pad_px: float = 12.0):
        ts = sorted({float(t) for t in times}) or [0.0]
        span = ts[-1] - ts[0]
        gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
        pos = sorted(g for g in gaps if g > 0)
        median = pos[len(pos) // 2] if pos else 0.0
        segs: list[list[float]] = [[ts[0], ts[0]]]
        self.gaps: list[tuple[float, float]] = []  # (t_end of segment, t_start of next)
        for a, b in zip(ts, ts[1:], strict=False):
            g = b - a
            if span > 0 and g > gap_frac * span and g > gap_ratio * median and g >= 2000:
                self.gaps.append((a, b))
                segs.append([b, b])
            else:
                segs[-1][1] = b
        self.segments = [(a, b) for a, b in segs]
        n = len(self.segments)
        usable = (right - left) - break_px * (n - 1)
        durs = [b - a for a, b in self.segments]
        total = sum(durs)
        widths = [min_seg_px] * n
        rest = usable - min_seg_px * n
        if rest > 0:
            for i, d in enumerate(durs):
                widths[i] += rest * (d / total if total > 0 else 1 / n)
        else:
            widths = [usable / n] * n
        self.boxes: list[tuple[float, float]] = []  # pixel extent of each segment
        x = left
        for w in widths:
            self.boxes.append((x, x + w))
            x += w + break_px
        self.pad_px = pad_px
        self.break_px = break_px

    @property
    def lo(self) -> float:
        return self.segments[0][0]

    @property
    def hi(self) -> float:
        return self.segments[-1][1]

    def _seg(self, t: float) -> int:
        for i, (_a, b) in enumerate(self.segments):
            if t <= b:
                return i
            if i + 1 < len(self.segments) and t < self.segments[i + 1][0]:
                # inside a cut gap: snap to the nearer side
                return i if t - b <= self.segments[i + 1][0] - t else i + 1
        return len(self.segments) - 1

    def __call__(self, t: float) -> float:
        i = self._seg(t)
        a, b = self.segments[i]
        x0, x1 = self.boxes[i]
        x0p, x1p = x0 + self.pad_px, x1 - self.pad_px
        if b <= a:
            return (x0 + x1) / 2
        t = min(max(t, a), b)
        return x0p + (t - a) / (b - a) * (x1p - x0p)

    def ticks(self) -> tuple[list[tuple[float, str]], str]:
        """Ticks per segment (about one per 110 px) and the axis caption."""
        out: list[tuple[float, str]] = []
        for (a, b), (x0, x1) in zip(self.segments, self.boxes, strict=True):
            n = max(1, int((x1 - x0) // 110))
            if b <= a or (b - a < 1000 and n <= 2):
                out.append(((a + b) / 2, datetime.fromtimestamp((a + b) / 2000, UTC).strftime("%H:%M:%S")))
                continue
            seg_ticks, _ = time_ticks(a, b, n=n)
            out.extend(seg_ticks or [(a, datetime.fromtimestamp(a / 1000, UTC).strftime("%H:%M:%S"))])
        _, caption = time_ticks(self.lo, self.hi)
        if self.gaps:
            caption += f" · {len(self.gaps)} idle gap(s) cut out (//)"
        return out, caption

    def breaks(self) -> list[tuple[float, float, float]]:
        """(pixel x of each break's centre, gap start, gap end)."""
        return [((self.boxes[i][1] + self.boxes[i + 1][0]) / 2, a, b) for i, (a, b) in enumerate(self.gaps)]


def fmt_gap(ms: float) -> str:
    s = ms / 1000
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


# ---- marks -----------------------------------------------------------------------------------
def shape(kind: str, x: float, y: float, color: str, size: float = 5, hollow: bool = False, title: str | None = None,
          extra: str = "") -> str:
    """A marker centred on (x, y): circle, diamond, square, triangle, triangle-down or flag."""
    fill = "#fff" if hollow else color
    style = f'fill="{fill}" stroke="{color}" stroke-width="{1.6 if hollow else 1}"'
    s = size
    if kind == "diamond":
        s *= 1.3
        el = f'<path d="M{_f(x)} {_f(y - s)}L{_f(x + s)} {_f(y)}L{_f(x)} {_f(y + s)}L{_f(x - s)} {_f(y)}Z" {style}'
    elif kind == "square":
        el = f'<rect x="{_f(x - s)}" y="{_f(y - s)}" width="{_f(2 * s)}" height="{_f(2 * s)}" {style}'
    elif kind == "triangle":
        s *= 1.25
        el = f'<path d="M{_f(x)} {_f(y - s)}L{_f(x + s)} {_f(y + s * 0.8)}L{_f(x - s)} {_f(y + s * 0.8)}Z" {style}'
    elif kind == "triangle-down":
        s *= 1.25
        el = f'<path d="M{_f(x)} {_f(y + s)}L{_f(x + s)} {_f(y - s * 0.8)}L{_f(x - s)} {_f(y - s * 0.8)}Z" {style}'
    elif kind == "flag":
        el = (f'<path d="M{_f(x)} {_f(y)}V{_f(y - 3.2 * s)}h{_f(2.2 * s)}l-{_f(0.7 * s)} {_f(0.6 * s)}'
              f'l{_f(0.7 * s)} {_f(0.6 * s)}H{_f(x)}" fill="{color}" stroke="{color}" stroke-width="1.2" stroke-linejoin="round"')
    else:
        el = f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{_f(s)}" {style}'
    el += f" {extra}" if extra else ""
    if title is None:
        return el + "/>"
    return el + f"><title>{esc(title)}</title></{el[1:].split(' ', 1)[0]}>"


def swatch(kind: str, color: str, hollow: bool = False, dash: str | None = None) -> str:
    """A tiny SVG for legends: a marker, or a line (`kind` "line"/"band")."""
    if kind == "line":
        d = f' stroke-dasharray="{dash}"' if dash else ""
        body = f'<line x1="1" y1="8" x2="21" y2="8" stroke="{color}" stroke-width="2.2"{d}/>'
    elif kind == "band":
        body = f'<rect x="1" y="2" width="20" height="12" fill="{color}" stroke="#d1d5db"/>'
    elif kind == "flag":
        body = shape("flag", 8, 14, color, size=3.6)
    else:
        body = shape(kind, 11, 8, color, size=4.5, hollow=hollow)
    return f'<svg class="sw" width="22" height="16" viewBox="0 0 22 16" aria-hidden="true">{body}</svg>'


# ---- plots -----------------------------------------------------------------------------------
class Plot:
    """An x/y plot area with linear scales. Layers are drawn in order: bands, grid,
    series, marks, labels."""

    def __init__(self, x_range: tuple[float, float], y_range: tuple[float, float], *, width: int = 960,
                 height: int = 320, margin: tuple[int, int, int, int] = (18, 28, 46, 70),
                 xscale: Callable[[float], float] | None = None):
        self.w, self.h = width, height
        self.xscale = xscale  # a callable data x -> pixel x (e.g. TimeScale); linear when None
        self.mt, self.mr, self.mb, self.ml = margin
        x0, x1 = x_range
        y0, y1 = y_range
        if x1 <= x0:
            x0, x1 = x0 - 0.5, x0 + 0.5
        if y1 <= y0:
            y0, y1 = y0 - 0.5, y0 + 0.5
        self.x0, self.x1, self.y0, self.y1 = x0, x1, y0, y1
        self.layers: dict[str, list[str]] = {k: [] for k in ("bands", "grid", "series", "marks", "labels")}

    @property
    def left(self) -> float:
        return self.ml

    @property
    def right(self) -> float:
        return self.w - self.mr

    @property
    def top(self) -> float:
        return self.mt

    @property
    def bottom(self) -> float:
        return self.h - self.mb

    def sx(self, x: float) -> float:
        if self.xscale is not None:
            return self.xscale(x)
        return self.left + (x - self.x0) / (self.x1 - self.x0) * (self.right - self.left)

    def sy(self, y: float) -> float:
        return self.bottom - (y - self.y0) / (self.y1 - self.y0) * (self.bottom - self.top)

    def axes(self, x_ticks: Sequence[tuple[float, str]], y_ticks: Sequence[tuple[float, str]], x_label: str = "",
             y_label: str = "") -> None:
        g = self.layers["grid"]
        for v, label in y_ticks:
            if not self.y0 - 1e-9 <= v <= self.y1 + 1e-9:
                continue
            y = self.sy(v)
            g.append(f'<line x1="{_f(self.left)}" y1="{_f(y)}" x2="{_f(self.right)}" y2="{_f(y)}" stroke="{GRID}"/>')
            g.append(f'<text x="{_f(self.left - 8)}" y="{_f(y + 4)}" text-anchor="end" class="tick">{esc(label)}</text>')
        last_x = -1e9
        for v, label in x_ticks:
            if not self.x0 - 1e-9 <= v <= self.x1 + 1e-9:
                continue
            x = self.sx(v)
            g.append(f'<line x1="{_f(x)}" y1="{_f(self.bottom)}" x2="{_f(x)}" y2="{_f(self.bottom + 5)}" stroke="{AXIS}"/>')
            if x - last_x >= len(label) * 6.6 + 6:  # skip labels that would overlap
                g.append(f'<text x="{_f(x)}" y="{_f(self.bottom + 19)}" text-anchor="middle" class="tick">{esc(label)}</text>')
                last_x = x
        g.append(f'<line x1="{_f(self.left)}" y1="{_f(self.bottom)}" x2="{_f(self.right)}" y2="{_f(self.bottom)}" stroke="{AXIS}"/>')
        g.append(f'<line x1="{_f(self.left)}" y1="{_f(self.top)}" x2="{_f(self.left)}" y2="{_f(self.bottom)}" stroke="{AXIS}"/>')
        if x_label:
            g.append(f'<text x="{_f((self.left + self.right) / 2)}" y="{_f(self.h - 6)}" text-anchor="middle" '
                     f'class="axis">{esc(x_label)}</text>')
        if y_label:
            cy = (self.top + self.bottom) / 2
            g.append(f'<text transform="translate(14 {_f(cy)}) rotate(-90)" text-anchor="middle" class="axis">{esc(y_label)}</text>')

    def line(self, points: Sequence[tuple[float, float]], color: str, *, width: float = 2.0, dash: str | None = None,
             step: bool = False, step_to: float | None = None, area: bool = False, cls: str = "") -> None:
        """A polyline through data points; `step` draws a step-after line (held until the
        next point, and up to `step_to` after the last one); `area` fills down to y0."""
        if not points:
            return
        pts = [(self.sx(x), self.sy(y)) for x, y in points]
        if step:
            stepped = [pts[0]]
            for (_x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
                stepped.append((x1, y0))
                stepped.append((x1, y1))
            if step_to is not None:
                stepped.append((self.sx(step_to), pts[-1][1]))
            pts = stepped
        d = "M" + "L".join(f"{_f(x)} {_f(y)}" for x, y in pts)
        c = f' class="{esc(cls)}"' if cls else ""
        if area and len(pts) > 1:
            base = _f(self.bottom)
            self.layers["series"].append(
                f'<path d="{d}L{_f(pts[-1][0])} {base}L{_f(pts[0][0])} {base}Z" fill="{color}" fill-opacity="0.10" stroke="none"/>'
            )
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        self.layers["series"].append(
            f'<path d="{d}" fill="none" stroke="{color}" stroke-width="{width}" stroke-linejoin="round"{dash_attr}{c}/>'
        )

    def mark(self, x: float, y: float, kind: str, color: str, *, title: str | None = None, size: float = 4.5,
             hollow: bool = False, extra: str = "") -> None:
        self.layers["marks"].append(shape(kind, self.sx(x), self.sy(y), color, size, hollow, title, extra))

    def vline(self, x: float, color: str, *, label: str | None = None, title: str | None = None, dash: str = "5 4",
              row: int = 0) -> None:
        """A full-height marker line at data x, with a short label at the top (row 0, 1, ...
        staggers labels of nearby lines)."""
        px = self.sx(x)
        t = f"<title>{esc(title)}</title>" if title else ""
        self.layers["bands"].append(
            f'<g><line x1="{_f(px)}" y1="{_f(self.top)}" x2="{_f(px)}" y2="{_f(self.bottom)}" stroke="{color}" '
            f'stroke-width="1.5" stroke-dasharray="{dash}"/>'
            f'<rect x="{_f(px - 4)}" y="{_f(self.top)}" width="8" height="{_f(self.bottom - self.top)}" fill="transparent">'
            f"{t}</rect></g>"
        )
        if label:
            anchor = "end" if px > self.right - 60 else "start"
            dx = -4 if anchor == "end" else 4
            ly = self.top + 11 + 13 * row
            self.layers["labels"].append(
                f'<text x="{_f(px + dx)}" y="{_f(ly)}" text-anchor="{anchor}" class="vlabel" fill="{color}">{esc(label)}</text>'
            )

    def hband(self, y0: float, y1: float, fill: str, *, label: str | None = None, title: str | None = None) -> None:
        a, b = sorted((max(self.y0, y0), min(self.y1, y1)))
        if b <= a:
            return
        top, bot = self.sy(b), self.sy(a)
        t = f"<title>{esc(title)}</title>" if title else ""
        self.layers["bands"].insert(
            0,
            f'<rect x="{_f(self.left)}" y="{_f(top)}" width="{_f(self.right - self.left)}" height="{_f(bot - top)}" '
            f'fill="{fill}">{t}</rect>',
        )
        if label:
            self.layers["bands"].append(
                f'<text x="{_f(self.right - 6)}" y="{_f(bot - 6)}" text-anchor="end" class="bandlabel">{esc(label)}</text>'
            )

    def xbreak(self, px: float, title: str) -> None:
        """A cut in the x axis at pixel `px`: a light band and a double slash on the axis."""
        w = 10
        self.layers["bands"].append(
            f'<rect x="{_f(px - w / 2)}" y="{_f(self.top)}" width="{w}" height="{_f(self.bottom - self.top)}" '
            f'fill="#f3f4f6"><title>{esc(title)}</title></rect>'
        )
        y = self.bottom
        self.layers["labels"].append(
            f'<rect x="{_f(px - 7)}" y="{_f(y - 6)}" width="14" height="12" fill="#fff"/>'
            f'<path d="M{_f(px - 6)} {_f(y + 5)}L{_f(px - 1)} {_f(y - 5)}M{_f(px + 1)} {_f(y + 5)}L{_f(px + 6)} {_f(y - 5)}" '
            f'stroke="{AXIS}" stroke-width="1.3"><title>{esc(title)}</title></path>'
        )

    def text(self, x: float, y: float, s: str, *, color: str = INK, anchor: str = "start", dx: float = 0,
             dy: float = 0, cls: str = "note") -> None:
        self.layers["labels"].append(
            f'<text x="{_f(self.sx(x) + dx)}" y="{_f(self.sy(y) + dy)}" text-anchor="{anchor}" class="{cls}" '
            f'fill="{color}">{esc(s)}</text>'
        )

    def render(self, label: str) -> str:
        body = "".join("".join(self.layers[k]) for k in ("bands", "grid", "series", "marks", "labels"))
        return (
            f'<svg class="chart" viewBox="0 0 {self.w} {self.h}" width="{self.w}" height="{self.h}" role="img" '
            f'aria-label="{esc(label)}" font-family="{esc(FONT)}">'
            f"<title>{esc(label)}</title>{body}</svg>"
        )


# ---- bars ------------------------------------------------------------------------------------
def hbar_chart(rows: Sequence[tuple[str, str]], series: Sequence[tuple[str, str, Sequence[float | None]]], *,
               label: str, value_fmt: Callable[[float], str] = fmt_num, width: int = 960, bar_h: int = 13,
               axis_label: str = "", ticks_fn: Callable[[float], list[tuple[float, str]]] | None = None) -> str:
    """Horizontal grouped bars: one row per (label, tooltip) in `rows`, one bar per series
    (name, colour, values) in each row; values are printed at the bar ends."""
    n_series = max(1, len(series))
    label_w = min(300, max(90, int(max((len(r[0]) for r in rows), default=8) * 6.9) + 16))
    row_h = n_series * bar_h + 10
    top, bottom = 10, 34
    height = top + len(rows) * row_h + bottom
    hi = max((v for _, _, vals in series for v in vals if v is not None), default=0.0) or 1.0
    ticks = ticks_fn(hi) if ticks_fn else [(t, value_fmt(t)) for t in nice_ticks(0, hi, 5)]
    hi = max(hi, max((t for t, _ in ticks), default=hi))
    x0, x1 = label_w, width - 70
    parts: list[str] = []

    def sx(v: float) -> float:
        return x0 + v / hi * (x1 - x0)

    y_axis_bottom = top + len(rows) * row_h
    for t, tl in ticks:
        x = sx(t)
        parts.append(f'<line x1="{_f(x)}" y1="{top}" x2="{_f(x)}" y2="{y_axis_bottom}" stroke="{GRID}"/>')
        parts.append(f'<text x="{_f(x)}" y="{y_axis_bottom + 16}" text-anchor="middle" class="tick">{esc(tl)}</text>')
    for i, (rl, rt) in enumerate(rows):
        y = top + i * row_h + 5
        if i % 2 == 1:
            parts.append(f'<rect x="0" y="{y - 5}" width="{width}" height="{row_h}" fill="#f9fafb"/>')
        parts.append(
            f'<text x="{label_w - 10}" y="{_f(y + n_series * bar_h / 2 + 4)}" text-anchor="end" class="rowlabel">'
            f"<title>{esc(rt)}</title>{esc(rl)}</text>"
        )
        for j, (name, color, vals) in enumerate(series):
            v = vals[i] if i < len(vals) else None
            by = y + j * bar_h
            if v is None:
                continue
            w = max(0.0, sx(v) - x0)
            parts.append(
                f'<rect x="{x0}" y="{_f(by + 1)}" width="{_f(max(w, 1.5))}" height="{bar_h - 2}" rx="2" fill="{color}">'
                f"<title>{esc(rt)} · {esc(name)}: {esc(value_fmt(v))}</title></rect>"
            )
            parts.append(f'<text x="{_f(x0 + w + 5)}" y="{_f(by + bar_h - 3)}" class="barval">{esc(value_fmt(v))}</text>')
    parts.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{y_axis_bottom}" stroke="{AXIS}"/>')
    if axis_label:
        parts.append(f'<text x="{_f((x0 + x1) / 2)}" y="{height - 3}" text-anchor="middle" class="axis">{esc(axis_label)}</text>')
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(label)}" font-family="{esc(FONT)}">'
        f"<title>{esc(label)}</title>{''.join(parts)}</svg>"
    )
