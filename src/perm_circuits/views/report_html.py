"""HTML building blocks of the report pages: escaping, headings, notes, tables, figures, the TOC and CSS.

The per-model sections (:mod:`perm_circuits.views.model_page`) and the comparison page
(:mod:`perm_circuits.views.comparison_page`) are written with them.  Figures are embedded without
plotly.js (the page loads one shared copy) and with the local topojson setting: pages render offline.
"""

from __future__ import annotations

import html as _html
import math
import re
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from perm_circuits.views.html import TOPOJSON_LOCAL

_PLOTLY_CONFIG = {"displaylogo": False, "responsive": False, "topojsonURL": TOPOJSON_LOCAL}

REPORT_CSS = """
body { max-width: 1680px; line-height: 1.45; }
h2 { border-bottom: 1px solid #dee2e6; padding-bottom: 4px; }
h3 { font-size: 1.0em; margin: 1.2em 0 0.4em; }
p, li { max-width: 1100px; }
.pc-note { color: #495057; font-size: 0.92em; }
.pc-toc { columns: 3; max-width: 1100px; font-size: 0.95em; }
.pc-table { border-collapse: collapse; font-size: 0.88em; margin: 6px 0 14px; }
.pc-table th, .pc-table td { border: 1px solid #dee2e6; padding: 3px 8px; text-align: right; vertical-align: top; }
.pc-table th { background: #f1f3f5; }
.pc-table tbody tr:nth-child(even) { background: #f8f9fa; }
.pc-table td.pc-text, .pc-wide td { text-align: left; }
.pc-wide td { max-width: 560px; }
.pc-figure { overflow-x: auto; margin: 6px 0 18px; }
.pc-verdict { background: #f8f9fa; border-left: 4px solid #7048e8; padding: 8px 14px; max-width: 1200px; }
.pc-verdict ul { margin: 4px 0 8px; padding-left: 22px; }
.pc-verdict-line { font-weight: 600; }
.pc-status { display: inline-block; border-radius: 3px; padding: 0 6px; font-size: 0.85em; font-weight: 600; }
.pc-supported { background: #d3f9d8; color: #2b8a3e; }
.pc-contradicted { background: #ffe3e3; color: #c92a2a; }
.pc-inconclusive { background: #fff3bf; color: #e67700; }
pre.pc-command { background: #f1f3f5; padding: 8px 12px; white-space: pre-wrap; max-width: 1200px; }
.pc-view { margin-bottom: 8px; }
.pc-view[data-circuitsvis="AttentionHeads"] { max-width: 820px; }
.pc-scroll { overflow-x: auto; max-width: 100%; }
.pc-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 18px; }
.pc-grid .pc-verdict { font-size: 0.92em; }
"""


def esc(text: object) -> str:
    return _html.escape(str(text), quote=False)


def slug(text: str) -> str:
    return "s-" + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def h2_html(title: str) -> str:
    return f'<h2 id="{slug(title)}">{esc(title)}</h2>\n'


def html_note(text: str) -> str:
    return f'<p class="pc-note">{esc(text)}</p>\n'


def cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.6g}"
    return str(value)


def html_table(frame: pd.DataFrame, *, index: bool = True, digits: int = 4, wide: bool = False) -> str:
    """A DataFrame as an HTML table (``DataFrame.to_html``, escaped)."""
    classes = ["pc-table"] + (["pc-wide"] if wide else [])
    frame = frame.rename(columns=lambda c: str(c).replace("_", " "))
    if index and frame.index.name is not None and frame.columns.nlevels == 1:
        frame.columns.name, frame.index.name = frame.index.name, None  # one header row
    table = frame.to_html(classes=classes, border=0, index=index, na_rep="–", float_format=lambda v: f"{v:.{digits}f}",
        escape=True, justify="center")
    return f'<div class="pc-scroll">{table}</div>\n'


def kv_table(items: dict[str, object]) -> str:
    frame = pd.DataFrame({"value": [cell(v) for v in items.values()]}, index=list(items))
    return html_table(frame, wide=True)


class FigureHTML:
    """Embeds the plotly figures of one page (without plotly.js), numbering their divs (deterministic ids)."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.count = prefix, 0

    def __call__(self, fig: go.Figure) -> str:
        self.count += 1
        body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"{self.prefix}-fig-{self.count}",
                           config=_PLOTLY_CONFIG)
        return f'<div class="pc-figure">{body}</div>\n'


def html_toc(titles: Sequence[str]) -> str:
    items = "".join(f'<li><a href="#{slug(t)}">{esc(t)}</a></li>' for t in titles)
    return f'<ul class="pc-toc">{items}</ul>\n'


def verdict_html(summary: str) -> str:
    """``RoleVerdict.summary()`` as paragraphs and lists; claim statuses become badges."""
    parts, items = [], []

    def flush() -> None:
        if items:
            parts.append("<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>")
            items.clear()

    for line in summary.splitlines():
        if line.startswith("- "):
            text = line[2:]
            match = re.match(r"\[(supported|contradicted|inconclusive)\] (.*)", text, re.DOTALL)
            if match:
                status, rest = match.groups()
                items.append(f'<span class="pc-status pc-{status}">{status}</span> {esc(rest)}')
            else:
                items.append(esc(text))
            continue
        flush()
        if line.startswith("Verdict:"):
            parts.append(f'<p class="pc-verdict-line">{esc(line)}</p>')
        elif line.endswith(":") and len(line) < 24:
            parts.append(f"<p><b>{esc(line)}</b></p>")
        else:
            parts.append(f"<p>{esc(line)}</p>")
    flush()
    return '<div class="pc-verdict">' + "\n".join(parts) + "</div>\n"


def status_cells(table_html: str) -> str:
    for status in ("supported", "contradicted", "inconclusive"):
        table_html = table_html.replace(f"<td>{status}</td>",
            f'<td><span class="pc-status pc-{status}">{status}</span></td>')
    return table_html
