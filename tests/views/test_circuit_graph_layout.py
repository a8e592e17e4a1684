"""The circuit picture's layout: no edge drawn across a node it does not connect, legend, caption, result input.

The geometry is checked twice: here by sampling each path's segments in Python (fast), and in
Debian's chromium with ``SVGPathElement.getPointAtLength`` against every node's ``getBBox``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from perm_circuits.circuit import Edge
from perm_circuits.discovery import discover
from perm_circuits.discovery.graph import graph_edges
from perm_circuits.views.circuit_graph import circuit_graph
from perm_circuits.views.circuit_hero import circuit_hero

SVG = "{http://www.w3.org/2000/svg}"
SKIPS = ["embed->logits", "L0H0->logits", "L0H0->L1H0.k", "embed->L1MLP", "L0MLP->logits", "embed->L0H0.q",
         "L1H1->logits", "L0H1->L0MLP"]


def _boxes(root) -> dict[str, tuple[float, float, float, float]]:
    """Node -> (x0, y0, x1, y1): its box, and for a head the port circles hanging below it."""
    boxes = {}
    for g in root.iter(f"{SVG}g"):
        if "node" not in g.get("class", "").split():
            continue
        rect = g.find(f"{SVG}rect")
        x, y, w, h = (float(rect.get(k)) for k in ("x", "y", "width", "height"))
        ports = [float(c.get("cy")) + float(c.get("r")) for c in g.iter(f"{SVG}circle")]
        boxes[g.get("data-node")] = (x, y, x + w, max([y + h, *ports]))
    return boxes


def _points(d: str, per_segment: int = 40) -> list[tuple[float, float]]:
    """Points along a path of absolute M, L, Q and C commands (the forms the picture writes)."""
    points, here = [], (0.0, 0.0)
    for command, args in re.findall(r"([MLQC])([^MLQC]*)", d):
        xy = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", args)]
        ctrl = [here] + [(xy[i], xy[i + 1]) for i in range(0, len(xy), 2)]
        if command == "M":
            here = ctrl[-1]
            points.append(here)
            continue
        for step in range(1, per_segment + 1):
            t = step / per_segment
            pts = ctrl
            while len(pts) > 1:  # de Casteljau: any degree, L included
                pts = [((1 - t) * a[0] + t * b[0], (1 - t) * a[1] + t * b[1]) for a, b in zip(pts, pts[1:])]
            points.append(pts[0])
        here = ctrl[-1]
    return points


def _crossings(svg: str) -> list[tuple[str, str]]:
    """(edge, node) for every point of an edge strictly inside a node box it does not connect."""
    root = ET.fromstring(svg)
    boxes = _boxes(root)
    found = []
    for path in root.iter(f"{SVG}path"):
        if path.get("class") != "edge":
            continue
        edge = Edge.parse(path.get("data-edge"))
        own = {edge.sender.component, edge.receiver.component}
        for x, y in _points(path.get("d")):
            for node, (x0, y0, x1, y1) in boxes.items():
                if node not in own and x0 + 0.5 < x < x1 - 0.5 and y0 + 0.5 < y < y1 - 0.5:
                    found.append((str(edge), node))
    return sorted(set(found))


@pytest.mark.parametrize(("layers", "heads", "mlp"), [(2, 2, True), (3, 1, False), (1, 3, True)])
def test_no_edge_crosses_a_node_in_the_full_graph(layers, heads, mlp):
    edges = graph_edges(layers, heads, mlp=mlp)  # every edge at once: the densest picture
    svg = circuit_graph(edges, n_layers=layers, n_heads=heads, mlp=mlp, title="all edges").svg
    assert _crossings(svg) == []
    root = ET.fromstring(svg)
    routes = {p.get("data-edge"): p.get("data-route") for p in root.iter(f"{SVG}path") if p.get("class") == "edge"}
    assert len(routes) == len(edges)
    assert routes["embed->logits"] == "lane" and routes[f"L{layers - 1}H0->logits"] == ("lane" if mlp else "direct")
    assert routes["embed->L0H0.q"] == "direct"


def test_the_old_straight_drawing_would_fail_the_check():
    svg = circuit_graph(SKIPS, n_layers=2, n_heads=2, mlp=True).svg
    assert _crossings(svg) == []
    root = ET.fromstring(svg)
    boxes = _boxes(root)
    (ex, _, ex1, ey), (lx, ly, lx1, _) = boxes["embed"][:4], boxes["logits"][:4]
    straight = f"M{(ex + ex1) / 2},{ey} L{(lx + lx1) / 2},{ly}"  # one column, as before: through L0MLP and L1MLP
    bad = re.sub(r"(data-edge='embed-&gt;logits'[^>]*? d=')[^']*'", lambda m: m.group(1) + straight + "'", svg)
    assert bad != svg and ("embed->logits", "L0MLP") in _crossings(bad) and ("embed->logits", "L1MLP") in _crossings(bad)


def test_bad_arguments_are_refused_before_drawing():
    with pytest.raises(TypeError, match="title must be a str, got int 3|parameter 'title'"):
        circuit_graph(SKIPS, title=3)
    with pytest.raises(TypeError, match="got the str"):
        circuit_graph("embed->logits")
    with pytest.raises(ValueError, match="cannot send"):
        circuit_graph(["logits->L0H0.q"])
    with pytest.raises(ValueError, match="not edges of a 1-layer"):
        circuit_graph(["L0H0->L0H1.q"])  # heads of one layer do not read each other


def test_layout_rows_columns_and_determinism():
    first = circuit_graph(SKIPS, {"embed->logits": -1.0, "L0H0->L1H0.k": 2.0}, n_layers=2, n_heads=2, mlp=True)
    assert first.svg == circuit_graph(list(reversed(SKIPS)), {"L0H0->L1H0.k": 2.0, "embed->logits": -1.0},
                                      n_layers=2, n_heads=2, mlp=True).svg  # order of the input does not matter
    boxes = _boxes(ET.fromstring(first.svg))
    centre_y = {n: (b[1] + b[3]) / 2 for n, b in boxes.items()}
    # bottom up: embed, layer 0's heads side by side, its MLP, layer 1's heads, its MLP, logits
    assert centre_y["embed"] > centre_y["L0H0"] == centre_y["L0H1"] > centre_y["L0MLP"] > centre_y["L1H0"]
    assert centre_y["L1H0"] == centre_y["L1H1"] > centre_y["L1MLP"] > centre_y["logits"]
    assert boxes["L0H0"][2] < boxes["L0H1"][0]  # side by side, not overlapping


def test_legend_and_caption_from_a_discovery_result(pretrained):
    result = discover(pretrained("d32h2"), "eap", "resample", n=32, n_edges=3)
    assert result.graph is not None and (result.graph.n_layers, result.graph.n_heads, result.graph.has_mlp) == (1, 2, True)
    assert result.metric == "target log-prob"
    picture = circuit_graph(result, title="d32h2")
    assert picture.n_nodes == 5 and picture.n_edges == 3  # the model's whole frame, read from the result's graph
    assert picture.caption == f"EAP, resample ablation, metric: target log-prob; 3 of 13 edges, faithfulness {result.faithfulness:.2f}"
    root = ET.fromstring(picture.svg)
    caption = [t for t in root.iter(f"{SVG}text") if t.get("class") == "caption"]
    assert [t.text for t in caption] == [picture.caption]
    legend = "".join(next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend").itertext())
    top = max(abs(float(result.scores[e])) for e in result.circuit)
    assert "sign of the edge's score" in legend and "positive" in legend and "negative" in legend
    assert f"width: |score| (widest {top:.3g})" in legend
    widths = sorted(float(p.get("stroke-width")) for p in root.iter(f"{SVG}path") if p.get("class") == "edge")
    assert widths[-1] == 7.0 and _crossings(picture.svg) == []
    hero = circuit_hero({"recall": result}, ["a finding"])  # no shape given: the result's graph
    assert "recall: EAP, resample ablation, metric: target log-prob; 3 of 13 edges" in hero
    assert hero.count("class='node ") == 5


@pytest.mark.browser
def test_no_edge_crosses_a_node_in_chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    from .browser import CHROMIUM_ARGS, require_chromium

    chromium = require_chromium()
    full = circuit_graph(graph_edges(2, 2, mlp=True), n_layers=2, n_heads=2, mlp=True, title="all edges",
                         caption="every edge of a two-layer model")
    page = full.save(tmp_path / "full.html")
    check = """() => {
      const nodes = [...document.querySelectorAll('svg.circuit-graph g.node')].map(
        g => ({name: g.dataset.node, box: g.getBBox()}));
      const out = [];
      let total = 0;
      for (const path of document.querySelectorAll('svg.circuit-graph path.edge')) {
        const [sender, receiver] = path.dataset.edge.split('->');
        const own = [sender, receiver.split('.')[0]];
        const length = path.getTotalLength();
        for (let i = 0; i <= 200; i++) {
          const p = path.getPointAtLength(length * i / 200);
          total++;
          for (const {name, box} of nodes) {
            if (own.includes(name)) continue;
            if (p.x > box.x + 0.5 && p.x < box.x + box.width - 0.5 && p.y > box.y + 0.5 && p.y < box.y + box.height - 0.5)
              out.push(path.dataset.edge + ' x ' + name);
          }
        }
      }
      return {crossings: [...new Set(out)], points: total, edges: document.querySelectorAll('path.edge').length};
    }"""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            view = browser.new_page()
            view.goto(page.resolve().as_uri(), wait_until="load")
            result = view.evaluate(check)
            # the check itself: the old one-column drawing of embed->logits crosses the MLPs
            view.evaluate("""() => {
              const box = n => document.querySelector(`g.node[data-node="${n}"] rect`).getBBox();
              const e = box('embed'), l = box('logits');
              document.querySelector('path.edge[data-edge="embed->logits"]').setAttribute('d',
                `M${e.x + e.width / 2},${e.y} L${l.x + l.width / 2},${l.y + l.height}`);
            }""")
            broken = view.evaluate(check)
        finally:
            browser.close()
    assert result["edges"] == 46 and result["points"] == 46 * 201
    assert result["crossings"] == []
    assert "embed->logits x L0MLP" in broken["crossings"] and "embed->logits x L1MLP" in broken["crossings"]
