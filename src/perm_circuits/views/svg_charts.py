"""Small static SVG charts for the docs site: line charts and heatmaps, no JavaScript, no CDN.

The interactive figures are plotly (:mod:`perm_circuits.views.figures`); the documentation pages are
static markdown, so their figures are plain SVG text written next to the pages by
``scripts/build_results.py`` from the committed tables.  The output is deterministic (same input,
same bytes), so a test can compare a committed figure with a fresh rendering.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

__all__ = ["Series", "svg_heatmaps", "svg_line_chart"]

_FONT = 'font-family="Helvetica, Arial, sans-serif"'
PALETTE: tuple[str, ...] = ("#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599", "#c2255c",
                            "#5c940d", "#495057", "#364fc7")


@dataclass(frozen=True)
class Series:
    """One line: ``name``, its points (``x``, ``y``), colour (default: the palette by position) and shape."""

    name: str
    x: Sequence[float | int]
    y: Sequence[float | int]
    color: str | None = None
    step: bool = False
    dash: bool = False
    marks: Sequence[float | int] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y) or not len(self.x):
            raise ValueError(f"series {self.name!r} needs as many x as y values, at least one; got {len(self.x)} and {len(self.y)}")


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _tick_label(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _log_ticks(low: float, high: float) -> list[float]:
    ticks = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for m in (1, 2, 5):
            t = m * 10.0 ** exponent
            if low <= t <= high:
                ticks.append(t)
    return ticks


def svg_line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_log: bool = False,
    y_log: bool = False,
    y_range: tuple[float, float] | None = None,
    y_percent: bool = False,
    width: int = 720,
    height: int = 380,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """An SVG line chart of ``series`` (legend on the right; steps drawn as horizontal-then-vertical).

    ``x_log`` / ``y_log`` put an axis on a log10 scale (its values must be positive; ticks at 1, 2, 5 x 10^k).
    ``x_ticks``: where the x axis is labelled (default: six even steps, or 1-2-5 on a log axis).
    """
    if not series:
        raise ValueError("svg_line_chart needs at least one series")
    xs = [float(v) for s in series for v in s.x]
    ys = [float(v) for s in series for v in s.y if not math.isnan(float(v))]
    if x_log and min(xs) <= 0:
        raise ValueError(f"a log x axis needs positive x values, got minimum {min(xs)}")
    if y_log and min(y_range if y_range is not None else ys) <= 0:
        raise ValueError(f"a log y axis needs positive y values, got minimum {min(y_range if y_range is not None else ys)}")
    left, right, top, bottom = 64, 190, 40, 52
    plot_w, plot_h = width - left - right, height - top - bottom
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range if y_range is not None else (min(ys), max(ys))
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1

    def px(x: float) -> float:
        fraction = (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) if x_log else (x - x0) / (x1 - x0)
        return left + fraction * plot_w

    def py(y: float) -> float:
        fraction = (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) if y_log else (y - y0) / (y1 - y0)
        return top + (1 - fraction) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{escape(title)}">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15" {_FONT} fill="#212529">{escape(title)}</text>']
    if x_ticks is None:
        x_ticks = _log_ticks(x0, x1) if x_log else [x0 + i * (x1 - x0) / 5 for i in range(6)]
    y_ticks = _log_ticks(y0, y1) if y_log else [y0 + i * (y1 - y0) / 4 for i in range(5)]
    for t in x_ticks:
        out.append(f'<line x1="{_fmt(px(t))}" y1="{top}" x2="{_fmt(px(t))}" y2="{top + plot_h}" stroke="#e9ecef"/>')
        out.append(f'<text x="{_fmt(px(t))}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle" {_FONT} '
                   f'fill="#495057">{_tick_label(t)}</text>')
    for t in y_ticks:
        label = f"{t:.0%}" if y_percent else (_tick_label(t) if y_log else f"{t:g}")
        out.append(f'<line x1="{left}" y1="{_fmt(py(t))}" x2="{left + plot_w}" y2="{_fmt(py(t))}" stroke="#e9ecef"/>')
        out.append(f'<text x="{left - 6}" y="{_fmt(py(t) + 4)}" font-size="11" text-anchor="end" {_FONT} '
                   f'fill="#495057">{label}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#adb5bd"/>')
    out.append(f'<text x="{left + plot_w / 2}" y="{height - 12}" font-size="12" text-anchor="middle" {_FONT} '
               f'fill="#212529">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(16,{top + plot_h / 2}) rotate(-90)" font-size="12" text-anchor="middle" '
               f'{_FONT} fill="#212529">{escape(y_label)}</text>')
    for index, s in enumerate(series):
        color = s.color or PALETTE[index % len(PALETTE)]
        points = [(float(x), float(y)) for x, y in zip(s.x, s.y) if not math.isnan(float(y))]
        path = []
        for i, (x, y) in enumerate(points):
            if i and s.step:
                path.append(f"{_fmt(px(x))},{_fmt(py(points[i - 1][1]))}")
            path.append(f"{_fmt(px(x))},{_fmt(py(y))}")
        dash = ' stroke-dasharray="5,3"' if s.dash else ""
        out.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2"{dash} points="{" ".join(path)}">'
                   f'<title>{escape(s.name)}</title></polyline>')
        for x in s.marks:
            y = points[-1][1]
            out.append(f'<text x="{_fmt(px(float(x)))}" y="{_fmt(py(y) + 4)}" font-size="12" text-anchor="middle" '
                       f'fill="{color}" {_FONT}>x</text>')
        ly = top + 8 + 18 * index
        out.append(f'<line x1="{left + plot_w + 14}" y1="{ly}" x2="{left + plot_w + 34}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + plot_w + 40}" y="{ly + 4}" font-size="11" {_FONT} fill="#212529">{escape(s.name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _share_color(share: float) -> str:
    if math.isnan(share):
        return "#f1f3f5"
    # white -> blue
    r = round(255 - share * (255 - 28))
    g = round(255 - share * (255 - 126))
    b = round(255 - share * (255 - 214))
    return f"#{r:02x}{g:02x}{b:02x}"


def svg_heatmaps(
    panels: Sequence[tuple[str, Sequence[str], Sequence[str], Sequence[Sequence[tuple[float, str]]]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    cell: int = 64,
    note_size: int = 12,
) -> str:
    """Side-by-side heatmaps: each panel is ``(panel title, column labels, row labels, cells)``.

    ``cells[row][col]`` is ``(share in [0, 1] or NaN, annotation)``; colour goes from white (0)
    to blue (1), grey for NaN (no run).  Each cell is a square of side ``cell`` pixels; its
    annotation is printed in ``note_size`` px (an empty annotation prints nothing).
    """
    if not panels:
        raise ValueError("svg_heatmaps needs at least one panel")
    left, top, gap = 70, 58, 40
    widths = [len(columns) * cell for _, columns, _, _ in panels]
    rows = max(len(r) for _, _, r, _ in panels)
    width = left + sum(widths) + gap * (len(panels) - 1) + 20
    height = top + rows * cell + 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{escape(title)}">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="20" font-size="15" {_FONT} fill="#212529">{escape(title)}</text>']
    x = left
    for (name, columns, row_labels, cells), w in zip(panels, widths):
        out.append(f'<text x="{x + w / 2}" y="{top - 10}" font-size="12" text-anchor="middle" {_FONT} '
                   f'fill="#212529">{escape(name)}</text>')
        for r, label in enumerate(row_labels):
            if x == left:
                out.append(f'<text x="{left - 8}" y="{top + r * cell + cell / 2 + 4}" font-size="11" text-anchor="end" '
                           f'{_FONT} fill="#495057">{escape(label)}</text>')
            for c, (share, note) in enumerate(cells[r]):
                out.append(f'<rect class="cell" x="{x + c * cell}" y="{top + r * cell}" width="{cell - 2}" '
                           f'height="{cell - 2}" fill="{_share_color(float(share))}"><title>{escape(note)}</title></rect>')
                if not note:
                    continue
                ink = "white" if not math.isnan(float(share)) and share > 0.6 else "#212529"
                out.append(f'<text x="{x + c * cell + cell / 2 - 1}" y="{top + r * cell + cell / 2 + 4}" '
                           f'font-size="{note_size}" text-anchor="middle" {_FONT} fill="{ink}">{escape(note)}</text>')
        for c, label in enumerate(columns):
            out.append(f'<text x="{x + c * cell + cell / 2 - 1}" y="{top + rows * cell + 14}" font-size="11" '
                       f'text-anchor="middle" {_FONT} fill="#495057">{escape(label)}</text>')
        x += w + gap
    out.append(f'<text x="{left + (width - left) / 2}" y="{height - 10}" font-size="12" text-anchor="middle" {_FONT} '
               f'fill="#212529">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(16,{top + rows * cell / 2}) rotate(-90)" font-size="12" '
               f'text-anchor="middle" {_FONT} fill="#212529">{escape(y_label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
