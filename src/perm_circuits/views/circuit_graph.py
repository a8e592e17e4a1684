"""A circuit drawn as a picture: components as nodes, causal edges as arrows, in plain inline SVG.

The graph is the edge graph of circuit discovery (``embed``, ``L{l}H{h}``, ``L{l}MLP`` send;
``L{l}H{h}.q|.k|.v``, ``L{l}MLP``, ``logits`` receive; an edge is ``"SENDER->RECEIVER"``), the way
ACDC (Conmy et al., NeurIPS 2023) and path patching (Wang et al., ICLR 2023) draw circuits. The
layout follows the forward pass from the bottom up: ``embed``, then per layer a row of heads (each
with small q, k, v ports on its lower edge where its input edges land) and a row with the MLP, then
``logits`` on top. An edge's width follows ``|score|`` (scaled to the largest drawn) and its colour
the score's sign (blue positive, red negative, grey without scores). Components outside the circuit
are drawn faint, so every picture of one model has the same frame.

The SVG is self-contained (no JavaScript, no fonts or scripts from the network): it renders in a
notebook (``_repr_html_``), in an HTML page and as an ``.svg`` file.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import SupportsFloat

from perm_circuits._util import atomic_write_text
from perm_circuits.discovery.graph import graph_edges, sender_nodes

__all__ = ["POSITIVE", "NEGATIVE", "NEUTRAL", "CircuitGraph", "circuit_graph"]

POSITIVE, NEGATIVE, NEUTRAL = "#2166ac", "#b2182b", "#555555"
_NODE_W, _NODE_H, _COL_W, _ROW_H, _MARGIN = 104, 34, 140, 92, 40
_MIN_WIDTH, _MAX_WIDTH = 1.0, 7.0
_NAME = re.compile(r"^L(\d+)(?:H(\d+)|MLP)")


@dataclass(frozen=True)
class CircuitGraph:
    """A drawn circuit: ``svg`` (inline SVG text), and how many nodes and edges it shows."""

    svg: str
    n_nodes: int
    n_edges: int
    title: str = ""

    def to_html(self) -> str:
        """A standalone offline HTML page holding the SVG (built by :func:`perm_circuits.views.html.html_page`)."""
        from perm_circuits.views.html import html_page

        return html_page(self.title or "circuit", [self.svg], heading=False,
                         css="body { margin: 16px; background: #fff; }")

    def save(self, path) -> Path:
        """Write ``.svg`` (the SVG alone) or ``.html`` (a page), atomically; returns the path."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".svg", ".html", ".htm"):
            raise ValueError(f"path must end in .svg or .html, got {str(path)!r}")
        text = "<?xml version='1.0' encoding='UTF-8'?>\n" + self.svg if suffix == ".svg" else self.to_html()
        return atomic_write_text(path, text)

    def _repr_html_(self) -> str:
        return self.svg


def _infer_shape(edges: Iterable[str]) -> tuple[int, int, bool]:
    layers, heads, mlp = 0, 0, False
    for edge in edges:
        for part in edge.split("->"):
            match = _NAME.match(part)
            if match:
                layers = max(layers, int(match.group(1)) + 1)
                if match.group(2) is not None:
                    heads = max(heads, int(match.group(2)) + 1)
                else:
                    mlp = True
    return max(layers, 1), max(heads, 1), mlp


def _layout(
    n_layers: int, n_heads: int, mlp: bool, col_w: int | float = _COL_W
) -> tuple[dict[str, tuple[float, float]], int, int]:
    """Node -> centre (x, y) in SVG coordinates (y grows downwards), and the canvas size."""
    rows = 2 + n_layers * (2 if mlp else 1)
    width = max(2 * _MARGIN + n_heads * col_w, 420)
    height = 2 * _MARGIN + 24 + (rows - 1) * _ROW_H
    centre_x = width / 2

    def y_of(row: int) -> float:
        return height - _MARGIN - (row * _ROW_H) - _NODE_H / 2

    pos = {"embed": (centre_x, y_of(0))}
    row = 1
    for layer in range(n_layers):
        first = centre_x - (n_heads - 1) * col_w / 2
        for h in range(n_heads):
            pos[f"L{layer}H{h}"] = (first + h * col_w, y_of(row))
        row += 1
        if mlp:
            pos[f"L{layer}MLP"] = (centre_x, y_of(row))
            row += 1
    pos["logits"] = (centre_x, y_of(row))
    return pos, int(width), int(height)


def _port_xy(pos, receiver: str) -> tuple[float, float]:
    """Where an edge into ``receiver`` ends: a head's q/k/v port, or the bottom of the node."""
    node, _, port = receiver.partition(".")
    x, y = pos[node]
    bottom = y + _NODE_H / 2
    if port:
        return x + {"q": -30, "k": 0, "v": 30}[port], bottom + 5
    return x, bottom


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def circuit_graph(
    edges: Iterable[str],
    scores: Mapping[str, SupportsFloat] | None = None,
    labels: Mapping[str, str] | None = None,
    *,
    n_layers: int | None = None,
    n_heads: int | None = None,
    mlp: bool | None = None,
    title: str = "",
) -> CircuitGraph:
    """Draw a circuit (module docstring) as inline SVG.

    Args:
        edges: the circuit's edges, ``"SENDER->RECEIVER"``.
        scores: optional edge -> effect; widths follow ``|score|``, colours its sign. Keys beyond
            ``edges`` are ignored; an edge without a score, or with a NaN one, is drawn thin and grey.
        labels: optional node -> role, shown as ``"L0H1: eliminator"``.
        n_layers: the model's layers (default: the fewest that hold ``edges``).
        n_heads: heads per layer (default: the fewest that hold ``edges``).
        mlp: whether the model has MLPs (default: whether any edge touches one).
        title: a caption drawn above the graph.

    Every component of the model is a ``<g class="node ...">`` (``in-circuit`` or ``idle``), every
    edge a ``<path class="edge">`` with ``data-edge``, ``data-score`` and ``data-sign``.
    """
    edges = list(dict.fromkeys(edges))
    if any(not isinstance(e, str) for e in edges):
        raise TypeError("edges must be strings 'SENDER->RECEIVER'")
    layers0, heads0, mlp0 = _infer_shape(edges)
    n_layers = layers0 if n_layers is None else n_layers
    n_heads = heads0 if n_heads is None else n_heads
    mlp = mlp0 if mlp is None else mlp
    valid = set(graph_edges(n_layers, n_heads, mlp=mlp))
    bad = [e for e in edges if e not in valid]
    if bad:
        raise ValueError(f"edges {bad[:5]} are not edges of a {n_layers}-layer {n_heads}-head graph (mlp={mlp})")
    scores = dict(scores or {})
    labels = dict(labels or {})
    nodes = list(sender_nodes(n_layers, n_heads, mlp=mlp)) + ["logits"]
    unknown = sorted(set(labels) - set(nodes))
    if unknown:
        raise ValueError(f"labels name unknown nodes {unknown}; nodes are {nodes}")
    for e in edges:
        if e in scores and (isinstance(scores[e], (str, bytes)) or not isinstance(scores[e], SupportsFloat)):
            raise TypeError(f"score of {e!r} must be a number, got {scores[e]!r}")
    scores = {e: scores[e] for e in edges if e in scores and not math.isnan(float(scores[e]))}  # NaN: no score (not a red edge)
    texts = {node: node + (f": {labels[node]}" if node in labels else "") for node in nodes}
    box_w = {node: max(_NODE_W, 7 * len(text) + 16) for node, text in texts.items()}
    pos, width, height = _layout(n_layers, n_heads, mlp, max(_COL_W, max(box_w.values()) + 24))
    used = {e.split("->")[0] for e in edges} | {e.split("->")[1].split(".")[0] for e in edges}
    top = max((abs(float(scores[e])) for e in edges if e in scores), default=0.0)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='circuit-graph' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' font-family='sans-serif' font-size='12' role='img'>",
        "<defs>",
    ]
    for name, colour in (("pos", POSITIVE), ("neg", NEGATIVE), ("none", NEUTRAL)):
        parts.append(
            f"<marker id='arrow-{name}' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='9' markerHeight='9' "
            f"markerUnits='userSpaceOnUse' "
            f"orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='{colour}'/></marker>"
        )
    parts.append("</defs>")
    parts.append(f"<rect width='{width}' height='{height}' fill='white'/>")
    if title:
        parts.append(f"<text class='title' x='{width / 2}' y='22' text-anchor='middle' font-size='15'>{html.escape(title)}</text>")

    parts.append("<g class='edges'>")
    for e in edges:
        sender, receiver = e.split("->")
        x0, y0 = pos[sender][0], pos[sender][1] - _NODE_H / 2
        x1, y1 = _port_xy(pos, receiver)
        if e in scores:
            value = float(scores[e])
            sign = "pos" if value >= 0 else "neg"
            stroke = _MIN_WIDTH + (_MAX_WIDTH - _MIN_WIDTH) * (abs(value) / top if top > 0 else 1.0)
            score_attr = f"{value:.6g}"
        else:
            sign, stroke, score_attr = "none", 1.5, ""
        colour = {"pos": POSITIVE, "neg": NEGATIVE, "none": NEUTRAL}[sign]
        bend = (y0 - y1) * 0.45
        d = f"M{_fmt(x0)},{_fmt(y0)} C{_fmt(x0)},{_fmt(y0 - bend)} {_fmt(x1)},{_fmt(y1 + bend)} {_fmt(x1)},{_fmt(y1)}"
        tip = html.escape(e + (f" (score {score_attr})" if score_attr else ""))
        parts.append(
            f"<path class='edge' data-edge='{html.escape(e)}' data-score='{score_attr}' data-sign='{sign}' d='{d}' "
            f"fill='none' stroke='{colour}' stroke-width='{stroke:.2f}' stroke-opacity='0.85' "
            f"marker-end='url(#arrow-{sign})'><title>{tip}</title></path>"
        )
    parts.append("</g>")

    parts.append("<g class='nodes'>")
    for node in nodes:
        x, y = pos[node]
        state = "in-circuit" if node in used else "idle"
        text, w = texts[node], box_w[node]
        fill = {"embed": "#e8f0e8", "logits": "#f3e8e8"}.get(node, "#fff7e0" if node.endswith("MLP") else "#eef3fb")
        ink = "#222" if state == "in-circuit" else "#bbb"  # idle: faint outline and text, opaque box
        fill = fill if state == "in-circuit" else "#fafafa"
        parts.append(
            f"<g class='node {state}' data-node='{node}'>"
            f"<rect x='{_fmt(x - w / 2)}' y='{_fmt(y - _NODE_H / 2)}' width='{w}' height='{_NODE_H}' rx='6' "
            f"fill='{fill}' stroke='{ink}' stroke-width='1'/>"
            f"<text x='{_fmt(x)}' y='{_fmt(y + 4)}' text-anchor='middle' fill='{ink}'>{html.escape(text)}</text>"
        )
        if _NAME.match(node) and not node.endswith("MLP"):
            for port in "qkv":
                px, py = _port_xy(pos, f"{node}.{port}")
                parts.append(
                    f"<circle class='port' data-port='{node}.{port}' cx='{_fmt(px)}' cy='{_fmt(py - 5)}' r='5' "
                    f"fill='white' stroke='{ink}'/><text x='{_fmt(px)}' y='{_fmt(py - 2)}' text-anchor='middle' "
                    f"font-size='8' fill='{ink}'>{port}</text>"
                )
        parts.append("</g>")
    parts.append("</g></svg>")
    return CircuitGraph("".join(parts), n_nodes=len(nodes), n_edges=len(edges), title=title)
