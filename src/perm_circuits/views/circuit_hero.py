"""The first screen of a report page: each skill's discovered circuit as a picture, then the findings.

Renders what :mod:`perm_circuits.analysis.report_data` computed (no computation here): one
:func:`~perm_circuits.views.circuit_graph.circuit_graph` per skill (edge width by the method's
score, colour by sign), side by side, and three to five one-line findings, each naming its
ablation mode.  Inline SVG, no JavaScript: it shows before anything else on the page has loaded.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perm_circuits.circuit import Edge
from perm_circuits.views.circuit_graph import circuit_graph, result_caption
from perm_circuits.views.html import Section

__all__ = ["HERO_CSS", "CollapsedViews", "circuit_hero", "collapsible"]

HERO_CSS = """
.pc-hero { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
.pc-hero figure { margin: 0; border: 1px solid #dee2e6; border-radius: 6px; padding: 6px; width: min-content; }
.pc-hero figcaption { font-size: 0.9em; color: #495057; text-align: center; }
.pc-findings li { margin: 4px 0; }
details.pc-details > summary { cursor: pointer; font-size: 1.15em; font-weight: 600; margin-top: 1.2em; }
details.pc-details > summary > h2 { display: inline-block; margin: 0.4em 0 0.2em; }
"""


def circuit_hero(skills: Mapping[str, Any], findings: Sequence[str], *, n_layers: int | None = None,
                 n_heads: int | None = None, labels: Mapping[str, str] | None = None) -> str:
    """HTML: the circuit of each skill (a ``DiscoveryResult``) and the findings list.

    Each picture's caption names the method, the ablation mode and the metric the circuit was found
    with (:func:`~perm_circuits.views.circuit_graph.result_caption`), so findings measured another way
    beside it are not read as contradicting it.  The model's shape is the result's graph's;
    ``n_layers`` / ``n_heads`` are for a result without one.
    """
    figures = []
    for skill, result in skills.items():
        shape: dict[str, Any] = {}
        if getattr(result, "graph", None) is None:  # the model's graph, not only the kept edges
            edges = [Edge.parse(e) for e in result.scores.index]
            shape = {"n_layers": n_layers, "n_heads": n_heads,
                     "mlp": any(node.is_mlp for e in edges for node in (e.sender, e.receiver))}
        picture = circuit_graph(result, labels=labels, title=f"{skill}", caption="", **shape)
        caption = f"{html.escape(skill)}: {html.escape(result_caption(result))}"
        figures.append(f'<figure class="pc-circuit">{picture.svg}<figcaption>{caption}</figcaption></figure>')
    if not figures:
        figures.append("<p>No circuit was discovered for this model.</p>")
    items = "".join(f"<li>{html.escape(line)}</li>" for line in findings)
    return (f'<div class="pc-hero">{"".join(figures)}</div>\n'
            f'<h3>Findings</h3>\n<ul class="pc-findings">{items}</ul>')


def collapsible(title: str, body: str, *, open_: bool = False, heading_id: str | None = None) -> str:
    """``<details>`` whose ``<summary>`` is the ``<h2>`` ``title``: long tables stay one click away.

    ``heading_id``: the heading's ``id`` (a table of contents' anchor); none by default.
    """
    flag = " open" if open_ else ""
    anchor = f' id="{html.escape(heading_id)}"' if heading_id else ""
    return (f'<details class="pc-details"{flag}><summary><h2{anchor}>{html.escape(title, quote=False)}</h2></summary>\n'
            f"{body}\n</details>")


def collapsible_section(title: str, body: str, heading_id: str | None = None) -> Section:
    """A page section shown collapsed (:func:`collapsible`)."""
    return Section("", collapsible(title, body, heading_id=heading_id))


@dataclass(frozen=True)
class CollapsedViews:
    """circuitsvis views (any ``mount_html(div_id)`` view) inside one :func:`collapsible` section.

    Give it to :func:`~perm_circuits.views.html.html_page` as ``Section("", CollapsedViews(...))``:
    the page then inlines the circuitsvis bundle and mounts every view, collapsed.
    """

    title: str
    views: tuple[Any, ...]
    note: str = ""

    def mount_html(self, div_id: str) -> str:
        body = self.note + "\n".join(view.mount_html(f"{div_id}-{index}") for index, view in enumerate(self.views))
        return collapsible(self.title, body)
