"""The per-model circuit figures of docs/how_models_compute.md: the best hypothesis's components, labelled."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from perm_circuits.pages.how_circuit_figures import best_hypothesis, circuit_figure, circuit_labels, figure_path
from perm_circuits.pages.how_models_compute import HOW_PAGE, MIN_GAP, MODELS, load_hypotheses

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table():
    return load_hypotheses(ROOT)


def test_the_best_hypothesis_is_the_highest_mean_informative_recovery(table):
    assert [best_hypothesis(table, m, MIN_GAP)[0] for m in MODELS] == ["shortcut_x5", "shortcut_x5", "shortcut_x5", "query_slot"]
    # d16h1l2-any: query_slot's whole recoveries on elimination, recall and recall_any (all informative)
    assert best_hypothesis(table, "d16h1l2-any", MIN_GAP)[1] == pytest.approx((0.999364 + 0.911345 + 0.445583) / 3, abs=1e-6)
    labels = circuit_labels(table, "d16h1l2-any", "query_slot")
    assert labels == {"embed": "x5", "L0H0": "matched slot k, x5", "L0MLP": "matched slot k, x5",
                      "L1H0": "y bound to x5, used y values, matched slot k, x5", "L1MLP": "answer, matched slot k"}
    with pytest.raises(ValueError, match="no informative"):
        best_hypothesis(table, "nope", MIN_GAP)


def test_the_page_references_each_figure_and_each_labelled_component_is_in_it(table):
    page = (ROOT / HOW_PAGE).read_text(encoding="utf-8")
    for model in MODELS:
        path = figure_path(model)
        assert f"](figures/{path.name})" in page.split(f"\n## {model}\n", 1)[1].split("\n## ", 1)[0]
        svg = (ROOT / path).read_text(encoding="utf-8")
        assert svg == circuit_figure(table, model, MIN_GAP).svg + "\n"
        hypothesis, _ = best_hypothesis(table, model, MIN_GAP)
        labels = circuit_labels(table, model, hypothesis)
        assert labels and f"hypothesis &#x27;{hypothesis}&#x27;" in svg
        for node, features in labels.items():
            group = re.search(rf"<g class='node ([a-z-]+)' data-node='{re.escape(node)}'>(.*?)</g>", svg)
            assert group and group.group(1) == "in-circuit", (model, node)
            assert html.escape(f"{node}: {features}") in group.group(2), (model, node)
        # the components the hypothesis leaves out are drawn faint (claimed irrelevant), logits is the output
        idle = set(re.findall(r"<g class='node idle' data-node='([^']+)'>", svg))
        assert not idle & set(labels) and "logits" not in idle


def test_edges_join_only_named_components(table):
    picture = circuit_figure(table, "d32h2", MIN_GAP)  # every component of the one-layer two-head model is named
    assert picture.n_nodes == 5 and picture.n_edges == 13
    edges = re.findall(r"data-edge='([^']+)'", picture.svg)
    assert "embed-&gt;logits" in edges and "L0MLP-&gt;logits" in edges and len(edges) == 13
