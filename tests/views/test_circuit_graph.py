"""The circuit picture: valid offline SVG, one element per node and edge, widths by |score|, colours by sign.

The browser test renders it in Debian's chromium (screenshot in ``artifacts/circuit_graph.png``)
and counts the drawn nodes and edges in the live DOM.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from perm_circuits.views.circuit_graph import NEGATIVE, NEUTRAL, POSITIVE, CircuitPicture, circuit_graph

SVG = "{http://www.w3.org/2000/svg}"
INDUCTION = [
    "embed->L0H0.q", "embed->L0H0.k", "embed->L0H0.v", "embed->L1H0.q", "L0H0->L1H0.k", "embed->L1H0.v",
    "L1H0->logits", "L1H1->logits",
]
SCORES = {"L0H0->L1H0.k": 2.0, "L1H0->logits": 1.0, "L1H1->logits": -0.5, "embed->L1H1.q": 9.0}  # last: not drawn


def _parse(svg: str):
    root = ET.fromstring(svg)
    nodes = [g for g in root.iter(f"{SVG}g") if "node" in g.get("class", "").split()]
    edges = {p.get("data-edge"): p for p in root.iter(f"{SVG}path") if p.get("class") == "edge"}
    return root, nodes, edges


@pytest.fixture(scope="module")
def graph() -> CircuitPicture:
    return circuit_graph(
        INDUCTION, SCORES, {"L0H0": "previous token", "L1H1": "eliminator"},
        n_layers=2, n_heads=2, mlp=True, title="induction circuit",
    )


def test_svg_has_one_element_per_node_and_edge(graph):
    root, nodes, edges = _parse(graph.svg)
    assert root.tag == f"{SVG}svg"
    # embed, L0H0, L0H1, L0MLP, L1H0, L1H1, L1MLP, logits
    assert len(nodes) == graph.n_nodes == 8
    assert sorted(edges) == sorted(INDUCTION) and graph.n_edges == 8
    states = {g.get("data-node"): g.get("class").split()[1] for g in nodes}
    assert {n for n, s in states.items() if s == "idle"} == {"L0H1", "L0MLP", "L1MLP"}
    ports = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "port"]
    assert len(ports) == 4 * 3  # q, k, v on each of the four heads
    text = "".join(root.itertext())
    assert "L0H0: previous token" in text and "L1H1: eliminator" in text and "induction circuit" in text


def test_widths_follow_scores_and_colours_follow_signs(graph):
    _, _, edges = _parse(graph.svg)
    width = {e: float(p.get("stroke-width")) for e, p in edges.items()}
    # |score| / max drawn |score| (2.0; the 9.0 is not a drawn edge) -> 1 + 6 * ratio
    assert width["L0H0->L1H0.k"] == 7.0
    assert width["L1H0->logits"] == 4.0
    assert width["L1H1->logits"] == 2.5
    assert width["embed->L0H0.q"] == 1.5  # no score: thin
    assert edges["L1H0->logits"].get("stroke") == POSITIVE
    assert edges["L1H1->logits"].get("stroke") == NEGATIVE and edges["L1H1->logits"].get("data-sign") == "neg"
    assert edges["embed->L0H0.q"].get("stroke") == NEUTRAL
    assert float(edges["L1H1->logits"].get("data-score")) == -0.5


def test_shape_is_inferred_and_bad_input_refused():
    small = circuit_graph(["embed->L0H1.q", "L0H1->logits"])
    _, nodes, edges = _parse(small.svg)
    assert [g.get("data-node") for g in nodes] == ["embed", "L0H0", "L0H1", "logits"]  # 1 layer, 2 heads, no MLP
    assert len(edges) == 2
    with pytest.raises(ValueError, match="not edges"):
        circuit_graph(["L1H0->L0H0.q"])
    with pytest.raises(ValueError, match="unknown nodes"):
        circuit_graph(["embed->logits"], labels={"L5H0": "x"}, n_layers=1, n_heads=1)
    with pytest.raises(TypeError):  # ours says "must be a number"; a beartype hook may say it first
        circuit_graph(["embed->logits"], {"embed->logits": "big"}, n_layers=1, n_heads=1)


def test_save_and_notebook_forms(graph, tmp_path):
    svg_path = graph.save(tmp_path / "g.svg")
    root, nodes, _ = _parse(svg_path.read_text())
    assert len(nodes) == 8
    page = graph.save(tmp_path / "g.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and graph.svg in page
    assert "<script" not in page and "http" not in page.replace("http://www.w3.org/2000/svg", "")
    assert graph._repr_html_() == graph.svg
    with pytest.raises(ValueError, match=".svg or .html"):
        graph.save(tmp_path / "g.png")


@pytest.mark.browser
@pytest.mark.slow
def test_graph_renders_in_chromium(graph, tmp_path):
    from .browser import CHROMIUM_ARGS, open_page, require_chromium

    chromium = require_chromium()
    page = graph.save(tmp_path / "graph.html")
    artifacts = Path(__file__).resolve().parents[2] / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = artifacts / "circuit_graph.png"
    report = open_page(page, shot, timeout_s=30)
    assert report.ok and report.remote_requests == [] and report.console_errors == []
    assert shot.stat().st_size > 10_000

    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            view = browser.new_page()
            view.goto(page.resolve().as_uri(), wait_until="load")
            counts = view.evaluate(
                """() => ({
                  nodes: document.querySelectorAll('svg.circuit-graph .node').length,
                  edges: document.querySelectorAll('svg.circuit-graph .edge').length,
                  drawn: [...document.querySelectorAll('svg.circuit-graph .edge')]
                           .filter(p => p.getTotalLength() > 20).length,
                  width: document.querySelector('svg.circuit-graph').getBoundingClientRect().width,
                })"""
            )
        finally:
            browser.close()
    assert counts["nodes"] == 8 and counts["edges"] == 8 and counts["drawn"] == 8
    assert counts["width"] > 300


def test_nan_score_is_drawn_as_no_score_and_leaves_other_widths_alone():
    # NaN first: it once became the max |score| (so every edge went full width) and, as
    # NaN >= 0 is False, a full-width red "negative" edge.
    scores = {"embed->L0H0.q": float("nan"), "L0H0->L1H0.k": 2.0, "L1H0->logits": 1.0}
    _, _, edges = _parse(circuit_graph(INDUCTION, scores, n_layers=2, n_heads=2, mlp=True).svg)
    nan_edge = edges["embed->L0H0.q"]
    assert nan_edge.get("stroke") == NEUTRAL and nan_edge.get("data-sign") == "none"
    assert float(nan_edge.get("stroke-width")) == 1.5 and nan_edge.get("data-score") == ""
    assert float(edges["L0H0->L1H0.k"].get("stroke-width")) == 7.0
    assert float(edges["L1H0->logits"].get("stroke-width")) == 4.0
