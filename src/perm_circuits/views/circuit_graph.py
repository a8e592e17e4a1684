"""A circuit drawn as a picture: components as nodes, causal edges as arrows, in plain inline SVG.

The graph is the edge graph of circuit discovery (:mod:`perm_circuits.discovery.graph`; names and
parsing in :mod:`perm_circuits.circuit`), drawn the way ACDC (Conmy et al., NeurIPS 2023) and path
patching (Wang et al., ICLR 2023) draw circuits.

Layout, bottom up in the forward pass's order: ``embed``; per layer a row with its heads side by
side (each with small q, k, v ports on its lower edge where its input edges land), then a row with
its MLP; ``logits`` on top.  An edge between neighbouring rows is one curve inside the gap between
them.  An edge that skips rows (``embed->logits``, ``L0H0->L1H0.k`` past ``L0MLP``) is routed
around the nodes it passes: out of its sender into the gap above, along that gap to a lane left or
right of every node, up the lane and along the gap below its receiver into its port, with rounded
corners; each such edge has its own lane.  So no edge is drawn across a node it does not connect
(a browser test checks it), and a drawn line never reads as an edge that is not in the circuit.

An edge's width follows ``|score|`` (scaled to the largest drawn) and its colour the score's sign
(blue positive, red negative, grey without scores); a legend under the graph says so, with the
score of the widest edge.  Components outside the circuit are drawn faint, so every picture of one
model has the same frame.  Given a :class:`~perm_circuits.discovery.result.DiscoveryResult`, the
picture reads the model's shape from the result's graph and captions the method, the ablation mode
and the metric.

The SVG is self-contained (no JavaScript, no fonts or scripts from the network) and deterministic:
it renders in a notebook (``_repr_html_``), in an HTML page and as an ``.svg`` file.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, SupportsFloat

from perm_circuits._util import atomic_write_text
from perm_circuits.circuit import Edge, Node
from perm_circuits.discovery.graph import graph_edges, sender_nodes

__all__ = ["POSITIVE", "NEGATIVE", "NEUTRAL", "CircuitPicture", "circuit_graph", "result_caption"]

POSITIVE, NEGATIVE, NEUTRAL = "#2166ac", "#b2182b", "#555555"
_NODE_W, _NODE_H, _COL_W, _ROW_H, _MARGIN = 104, 34, 140, 92, 24
_PORT_R = 5  # port circles hang this far below a head's box
_LANE_GAP, _LANE_STEP = 18, 8  # first lane's distance from the nodes; spacing of the lanes
_RUN_FIRST, _RUN_STEP, _RUN_KINDS = 12, 5, 6  # a skip edge's horizontal run: depth into its gap
_CORNER = 8.0
_MIN_WIDTH, _MAX_WIDTH = 1.0, 7.0
_LEGEND_H = 46


@dataclass(frozen=True)
class CircuitPicture:
    """A drawn circuit: ``svg`` (inline SVG text), how many nodes and edges it shows, its title and caption."""

    svg: str
    n_nodes: int
    n_edges: int
    title: str = ""
    caption: str = ""

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


def result_caption(result: Any) -> str:
    """One line naming what a discovery result measured: method, ablation mode (and where the ablated values
    come from, when the result records it), metric, size, faithfulness."""
    metric = f", metric: {result.metric}" if getattr(result, "metric", "") else ""
    source = {"test": " (ablated values from the whole test set)",
              "skill": " (ablated values from the skill's own rows)"}.get(getattr(result, "params", {}).get("reference"), "")
    return (f"{result.method.upper()}, {result.how} ablation{source}{metric}; {result.n_edges} of {len(result.scores)} edges, "
            f"faithfulness {result.faithfulness:.2f}")


def _infer_shape(edges: Iterable[Edge]) -> tuple[int, int, bool]:
    layers, heads, mlp = 0, 0, False
    for edge in edges:
        for node in (edge.sender, edge.receiver):
            if node.kind is not None:
                continue
            layers = max(layers, node.layer + 1)
            if node.head is not None:
                heads = max(heads, node.head + 1)
            else:
                mlp = True
    return max(layers, 1), max(heads, 1), mlp


def _row(node: Node, mlp: bool, n_layers: int) -> int:
    """The node's row, 0 (``embed``) at the bottom."""
    per_layer = 2 if mlp else 1
    if node.is_embed:
        return 0
    if node.is_logits:
        return 1 + n_layers * per_layer
    return 1 + node.layer * per_layer + (0 if node.head is not None else 1)


@dataclass(frozen=True)
class _Frame:
    """Node centres (SVG coordinates, y down), box widths, rows, and the canvas."""

    pos: dict[str, tuple[float, float]]
    width_of: dict[str, float]
    row_of: dict[str, int]
    width: int
    height: int
    legend_y: float


def _fmt(value: float | int) -> str:
    return f"{value:.1f}"


def _bottom(frame: _Frame, node: Node) -> float:
    """The lowest point of a node's drawing: its box, or its port circles for a head."""
    y = frame.pos[node.component][1] + _NODE_H / 2
    return y + _PORT_R if node.is_head else y


def _end(frame: _Frame, receiver: Node) -> tuple[float, float]:
    """Where an edge into ``receiver`` ends: a head's q/k/v port, or the bottom of the node."""
    x, y = frame.pos[receiver.component]
    bottom = y + _NODE_H / 2
    if receiver.port is not None:
        return x + {"q": -30, "k": 0, "v": 30}[receiver.port], bottom + _PORT_R
    return x, bottom


def _rounded(points: list[tuple[float, float]]) -> str:
    """A path through ``points`` (axis-parallel segments) with quadratic rounded corners."""
    d = [f"M{_fmt(points[0][0])},{_fmt(points[0][1])}"]
    for i in range(1, len(points) - 1):
        (ax, ay), (bx, by), (cx, cy) = points[i - 1], points[i], points[i + 1]
        into = math.hypot(bx - ax, by - ay)
        out = math.hypot(cx - bx, cy - by)
        r = min(_CORNER, into / 2, out / 2)
        if r <= 0:
            continue
        sx, sy = bx - (bx - ax) / into * r, by - (by - ay) / into * r
        ex, ey = bx + (cx - bx) / out * r, by + (cy - by) / out * r
        d.append(f"L{_fmt(sx)},{_fmt(sy)} Q{_fmt(bx)},{_fmt(by)} {_fmt(ex)},{_fmt(ey)}")
    d.append(f"L{_fmt(points[-1][0])},{_fmt(points[-1][1])}")
    return " ".join(d)


def _spread(frame: _Frame, node: str, keyed: list[tuple[float, Edge]]) -> dict[Edge, float]:
    """x of each edge's end on ``node``'s top or bottom: spread over the box in the order of ``keyed``'s
    keys (where each edge's other end lies), so edges into or out of one node do not share a line."""
    x = frame.pos[node][0]
    n = len(keyed)
    step = min(12.0, 0.7 * frame.width_of[node] / max(n - 1, 1))
    ordered = sorted(keyed, key=lambda item: (item[0], item[1]))
    return {edge: x + (i - (n - 1) / 2) * step for i, (_, edge) in enumerate(ordered)}


def _routes(frame: _Frame, edges: list[Edge], left: float, right: float) -> tuple[dict[Edge, str], tuple[int, int]]:
    """Each edge's path ``d`` (module docstring): a curve between neighbouring rows, else a lane;
    and how many lanes run left and right of the nodes (``left``, ``right``: the nodes' extent)."""
    def row(node: Node) -> int:
        return frame.row_of[node.component]

    skips = [e for e in edges if row(e.receiver) != row(e.sender) + 1]
    # lanes: sides by where the edge's ends lie (ties to the emptier side), inner lanes to the shorter skips
    centre = (left + right) / 2
    lanes = {"left": 0, "right": 0}
    lane_x: dict[Edge, float] = {}
    depth: dict[Edge, float] = {}
    for k, edge in enumerate(sorted(skips, key=lambda e: (row(e.receiver) - row(e.sender), e))):
        lean = (frame.pos[edge.sender.component][0] + _end(frame, edge.receiver)[0]) / 2 - centre
        side = "left" if lean < 0 or (lean == 0 and lanes["left"] <= lanes["right"]) else "right"
        lane_x[edge] = (left - _LANE_GAP - _LANE_STEP * lanes[side] if side == "left"
                        else right + _LANE_GAP + _LANE_STEP * lanes[side])
        lanes[side] += 1
        depth[edge] = _RUN_FIRST + _RUN_STEP * (k % _RUN_KINDS)

    def toward(edge: Edge, x: float) -> float:  # where the edge heads off to, seen from one of its ends
        return lane_x.get(edge, x)

    outgoing: dict[str, list[tuple[float, Edge]]] = {}
    incoming: dict[str, list[tuple[float, Edge]]] = {}
    for edge in edges:
        outgoing.setdefault(edge.sender.component, []).append((toward(edge, _end(frame, edge.receiver)[0]), edge))
        if edge.receiver.port is None:
            incoming.setdefault(edge.receiver.component, []).append(
                (toward(edge, frame.pos[edge.sender.component][0]), edge))
    exit_x = {e: x for node, keyed in outgoing.items() for e, x in _spread(frame, node, keyed).items()}
    entry_x = {e: x for node, keyed in incoming.items() for e, x in _spread(frame, node, keyed).items()}

    paths: dict[Edge, str] = {}
    for edge in edges:
        x0, y0 = exit_x[edge], frame.pos[edge.sender.component][1] - _NODE_H / 2
        x1, y1 = _end(frame, edge.receiver)
        x1 = entry_x.get(edge, x1)
        if edge not in lane_x:
            bend = (y0 - y1) * 0.45  # y stays within [y1, y0]: the gap between the two rows
            paths[edge] = (f"M{_fmt(x0)},{_fmt(y0)} C{_fmt(x0)},{_fmt(y0 - bend)} {_fmt(x1)},{_fmt(y1 + bend)} "
                           f"{_fmt(x1)},{_fmt(y1)}")
        else:  # out into the gap above the sender's row, along it, up the lane, along the gap below the receiver
            lx, run_out, run_in = lane_x[edge], y0 - depth[edge], y1 + depth[edge]
            paths[edge] = _rounded([(x0, y0), (x0, run_out), (lx, run_out), (lx, run_in), (x1, run_in), (x1, y1)])
    return paths, (lanes["left"], lanes["right"])


def _frame(nodes: list[Node], texts: Mapping[str, str], n_layers: int, mlp: bool, n_lanes: tuple[int, int],
           top: float, min_width: float) -> _Frame:
    width_of = {str(n): float(max(_NODE_W, 7 * len(texts[str(n)]) + 16)) for n in nodes}
    col_w = max(_COL_W, max(width_of.values()) + 24)
    rows: dict[int, list[Node]] = {}
    for node in nodes:
        rows.setdefault(_row(node, mlp, n_layers), []).append(node)
    n_rows = max(rows) + 1
    span = max(len(row) for row in rows.values()) * col_w
    lanes_left = _LANE_GAP + _LANE_STEP * n_lanes[0] if n_lanes[0] else 0
    lanes_right = _LANE_GAP + _LANE_STEP * n_lanes[1] if n_lanes[1] else 0
    width = max(2 * _MARGIN + lanes_left + lanes_right + span, 440, min_width)
    centre_x = _MARGIN + lanes_left + (width - 2 * _MARGIN - lanes_left - lanes_right) / 2
    pos, row_of = {}, {}
    for index, row in rows.items():
        y = top + _NODE_H / 2 + (n_rows - 1 - index) * _ROW_H
        first = centre_x - (len(row) - 1) * col_w / 2
        for j, node in enumerate(row):
            pos[str(node)] = (first + j * col_w, y)
            row_of[str(node)] = index
    legend_y = top + (n_rows - 1) * _ROW_H + _NODE_H + 2 * _PORT_R + 16
    return _Frame(pos, width_of, row_of, int(math.ceil(width)), int(math.ceil(legend_y + _LEGEND_H)), legend_y)


def _legend(frame: _Frame, top_score: float, scored: bool) -> list[str]:
    """Colour (the score's sign) and width (``|score|``) keys, under the graph (fits 400 px)."""
    text = "<text x='{x}' y='{y}' font-size='11' fill='#333'>{label}</text>"
    parts = [f"<g class='legend' transform='translate({_fmt(_MARGIN)},{_fmt(frame.legend_y)})'>",
             text.format(x=0, y=10, label="colour: sign of the edge's score")]
    for i, (label, colour) in enumerate((("positive", POSITIVE), ("negative", NEGATIVE), ("no score", NEUTRAL))):
        kx = 180 + i * 76
        parts.append(f"<line x1='{kx}' y1='6' x2='{kx + 18}' y2='6' stroke='{colour}' stroke-width='3'/>"
                     + text.format(x=kx + 22, y=10, label=label))
    if scored:
        parts.append(text.format(x=0, y=32, label=f"width: |score| (widest {top_score:.3g})"))
        for i, share in enumerate((0.25, 0.5, 1.0)):
            kx = 180 + i * 76
            stroke = _MIN_WIDTH + (_MAX_WIDTH - _MIN_WIDTH) * share
            parts.append(f"<line x1='{kx}' y1='28' x2='{kx + 18}' y2='28' stroke='{NEUTRAL}' stroke-width='{stroke:.2f}'/>"
                         + text.format(x=kx + 22, y=32, label=f"{top_score * share:.2g}"))
    else:
        parts.append(text.format(x=0, y=32, label="width: no scores given (every edge thin)"))
    parts.append("</g>")
    return parts


def _shape_of(result: Any) -> tuple[int, int, bool] | None:
    graph = getattr(result, "graph", None)
    if graph is None:
        return None
    return int(graph.n_layers), int(graph.n_heads), bool(graph.has_mlp)


def circuit_graph(
    edges: Iterable[str | Edge] | Any,
    scores: Mapping[str, SupportsFloat] | None = None,
    labels: Mapping[str, str] | None = None,
    *,
    n_layers: int | None = None,
    n_heads: int | None = None,
    mlp: bool | None = None,
    title: str = "",
    caption: str | None = None,
) -> CircuitPicture:
    """Draw a circuit (module docstring) as inline SVG.

    Args:
        edges: the circuit's edges (``"SENDER->RECEIVER"`` names or :class:`~perm_circuits.circuit.Edge`),
            or a :class:`~perm_circuits.discovery.result.DiscoveryResult`: then its circuit, its scores
            (unless ``scores`` is given), the model's shape from its graph and a caption naming its
            method, ablation mode and metric (:func:`result_caption`).
        scores: optional edge -> effect; widths follow ``|score|``, colours its sign. Keys beyond
            ``edges`` are ignored; an edge without a score, or with a NaN one, is drawn thin and grey.
        labels: optional node -> role, shown as ``"L0H1: eliminator"``.
        n_layers: the model's layers (default: the result's graph, else the fewest that hold ``edges``).
        n_heads: heads per layer (same default).
        mlp: whether the model has MLPs (default: the result's graph, else whether any edge touches one).
        title: a caption drawn above the graph.
        caption: a second line under the title (default: :func:`result_caption` for a result, else none).

    Every component of the model is a ``<g class="node ...">`` (``in-circuit`` or ``idle``), every
    edge a ``<path class="edge">`` with ``data-edge``, ``data-score``, ``data-sign`` and ``data-route``
    (``"direct"`` between neighbouring rows, ``"lane"`` around the rows it skips).
    """
    for name, value in (("title", title), ("caption", caption)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    shape = None
    if hasattr(edges, "circuit") and hasattr(edges, "scores"):  # a DiscoveryResult
        result = edges
        shape = _shape_of(result)
        if scores is None:
            scores = {e: float(result.scores[e]) for e in result.circuit}
        if caption is None:
            caption = result_caption(result)
        edges = sorted(result.circuit)
    if isinstance(edges, (str, bytes)):
        raise TypeError(f"edges must be an iterable of 'SENDER->RECEIVER' names, got the str {edges!r}")
    parsed = []
    for e in edges:
        if not isinstance(e, (str, Edge)):
            raise TypeError(f"edges must be strings 'SENDER->RECEIVER' or Edges, got {type(e).__name__} {e!r}")
        parsed.append(Edge.parse(e))
    parsed = sorted(set(parsed))  # graph order: the picture does not depend on the order of the input
    names = [str(e) for e in parsed]
    layers0, heads0, mlp0 = shape if shape is not None else _infer_shape(parsed)
    n_layers = layers0 if n_layers is None else n_layers
    n_heads = heads0 if n_heads is None else n_heads
    mlp = mlp0 if mlp is None else mlp
    valid = set(graph_edges(n_layers, n_heads, mlp=mlp))
    bad = [e for e in names if e not in valid]
    if bad:
        raise ValueError(f"edges {bad[:5]} are not edges of a {n_layers}-layer {n_heads}-head graph (mlp={mlp})")
    scores = {str(Edge.parse(k)) if isinstance(k, Edge) else k: v for k, v in dict(scores or {}).items()}
    labels = {str(k): v for k, v in dict(labels or {}).items()}
    nodes = [Node.parse(n) for n in sender_nodes(n_layers, n_heads, mlp=mlp)] + [Node.special("logits")]
    node_names = [str(n) for n in nodes]
    unknown = sorted(set(labels) - set(node_names))
    if unknown:
        raise ValueError(f"labels name unknown nodes {unknown}; nodes are {node_names}")
    for e in names:
        if e in scores and (isinstance(scores[e], (str, bytes)) or not isinstance(scores[e], SupportsFloat)):
            raise TypeError(f"score of {e!r} must be a number, got {scores[e]!r}")
    scores = {e: scores[e] for e in names if e in scores and not math.isnan(float(scores[e]))}  # NaN: no score
    texts = {name: name + (f": {labels[name]}" if name in labels else "") for name in node_names}
    caption = caption or ""
    top = 1.0 * _MARGIN + (22 if title else 0) + (18 if caption else 0) + (8 if title or caption else 0)

    # the frame twice: once to know which edges need lanes and where they go, once with room for them
    min_width = 2 * _MARGIN + max(8.5 * len(title), 6.6 * len(caption))  # the title and caption fit
    lanes = (0, 0)
    for _ in range(2):
        frame = _frame(nodes, texts, n_layers, mlp, lanes, top, min_width)
        left = min(frame.pos[n][0] - frame.width_of[n] / 2 for n in node_names)
        right = max(frame.pos[n][0] + frame.width_of[n] / 2 for n in node_names)
        routes, lanes = _routes(frame, parsed, left, right)
    width, height = frame.width, frame.height
    used = {str(e.sender) for e in parsed} | {e.receiver.component for e in parsed}
    top_score = max((abs(float(scores[e])) for e in names if e in scores), default=0.0)

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
        parts.append(f"<text class='title' x='{width / 2}' y='{_MARGIN - 2}' text-anchor='middle' font-size='15'>"
                     f"{html.escape(title)}</text>")
    if caption:
        parts.append(f"<text class='caption' x='{width / 2}' y='{_MARGIN - 2 + (20 if title else 0)}' "
                     f"text-anchor='middle' font-size='12' fill='#444'>{html.escape(caption)}</text>")

    parts.append("<g class='edges'>")
    for edge, name in zip(parsed, names):
        if name in scores:
            value = float(scores[name])
            sign = "pos" if value >= 0 else "neg"
            stroke = _MIN_WIDTH + (_MAX_WIDTH - _MIN_WIDTH) * (abs(value) / top_score if top_score > 0 else 1.0)
            score_attr = f"{value:.6g}"
        else:
            sign, stroke, score_attr = "none", 1.5, ""
        colour = {"pos": POSITIVE, "neg": NEGATIVE, "none": NEUTRAL}[sign]
        route = "direct" if frame.row_of[edge.receiver.component] == frame.row_of[edge.sender.component] + 1 else "lane"
        tip = html.escape(name + (f" (score {score_attr})" if score_attr else ""))
        parts.append(
            f"<path class='edge' data-edge='{html.escape(name)}' data-score='{score_attr}' data-sign='{sign}' "
            f"data-route='{route}' d='{routes[edge]}' fill='none' stroke='{colour}' stroke-width='{stroke:.2f}' "
            f"stroke-opacity='0.85' marker-end='url(#arrow-{sign})'><title>{tip}</title></path>"
        )
    parts.append("</g>")

    parts.append("<g class='nodes'>")
    for node, name in zip(nodes, node_names):
        x, y = frame.pos[name]
        state = "in-circuit" if name in used else "idle"
        text, w = texts[name], frame.width_of[name]
        fill = {"embed": "#e8f0e8", "logits": "#f3e8e8"}.get(name, "#fff7e0" if node.is_mlp else "#eef3fb")
        ink = "#222" if state == "in-circuit" else "#bbb"  # idle: faint outline and text, opaque box
        fill = fill if state == "in-circuit" else "#fafafa"
        parts.append(
            f"<g class='node {state}' data-node='{name}'>"
            f"<rect x='{_fmt(x - w / 2)}' y='{_fmt(y - _NODE_H / 2)}' width='{w:g}' height='{_NODE_H}' rx='6' "
            f"fill='{fill}' stroke='{ink}' stroke-width='1'/>"
            f"<text x='{_fmt(x)}' y='{_fmt(y + 4)}' text-anchor='middle' fill='{ink}'>{html.escape(text)}</text>"
        )
        if node.is_head:
            for port in "qkv":
                px, py = _end(frame, node.input(port))
                parts.append(
                    f"<circle class='port' data-port='{name}.{port}' cx='{_fmt(px)}' cy='{_fmt(py - _PORT_R)}' "
                    f"r='{_PORT_R}' fill='white' stroke='{ink}'/><text x='{_fmt(px)}' y='{_fmt(py - 2)}' "
                    f"text-anchor='middle' font-size='8' fill='{ink}'>{port}</text>"
                )
        parts.append("</g>")
    parts.append("</g>")
    parts.extend(_legend(frame, top_score, bool(scores)))
    parts.append("</svg>")
    return CircuitPicture("".join(parts), n_nodes=len(nodes), n_edges=len(parsed), title=title, caption=caption)
