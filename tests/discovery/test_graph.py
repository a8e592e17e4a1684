"""The edge graph: node names, edge counts and order, q/k/v promotion."""

from __future__ import annotations

import pytest

from perm_circuits.discovery import circuit_graph_of, promote_edge, promote_edges, split_edge
from perm_circuits.models import ModelConfig, build_model


def _model(layers: int, heads: int):
    return build_model(ModelConfig(d_model=16, n_heads=heads, n_layers=layers)).eval()


@pytest.mark.parametrize(("layers", "heads", "count"), [(1, 2, 13), (2, 1, 23), (2, 2, 46)])
def test_edge_counts(layers, heads, count):
    graph = circuit_graph_of(_model(layers, heads))
    assert graph.n_edges == count
    assert len(set(graph.edges)) == count
    assert (graph.n_layers, graph.n_heads, graph.has_mlp) == (layers, heads, True)


def test_one_layer_two_heads_edges_in_order():
    graph = circuit_graph_of(_model(1, 2))
    assert graph.senders == ("embed", "L0H0", "L0H1", "L0MLP")
    assert graph.receivers == ("L0H0.q", "L0H0.k", "L0H0.v", "L0H1.q", "L0H1.k", "L0H1.v", "L0MLP", "logits")
    assert graph.edges == (
        "embed->L0H0.q", "embed->L0H0.k", "embed->L0H0.v", "embed->L0H1.q", "embed->L0H1.k", "embed->L0H1.v",
        "embed->L0MLP", "L0H0->L0MLP", "L0H1->L0MLP",
        "embed->logits", "L0H0->logits", "L0H1->logits", "L0MLP->logits",
    )
    assert graph.edge_index("L0H1->L0MLP") == 8
    assert graph.incoming("logits") == (9, 10, 11, 12)
    assert graph.outgoing("L0H0") == (7, 10)
    assert graph.edges_of(graph.mask_of(["L0MLP->logits", "embed->L0H0.q"])) == {"L0MLP->logits", "embed->L0H0.q"}
    with pytest.raises(KeyError, match="L0H0->L0H1.q"):
        graph.edge_index("L0H0->L0H1.q")


def test_two_layer_edges_respect_layer_order():
    graph = circuit_graph_of(_model(2, 2))
    assert "L0H0->L1H0.k" in graph.edges and "L0MLP->L1H1.v" in graph.edges and "L1H1->L1MLP" in graph.edges
    assert "L0H0->L0H1.q" not in graph.edges and "L1H0->L1H1.q" not in graph.edges
    assert "L1MLP->L1H0.q" not in graph.edges
    # every sender feeds the logits; a receiver only reads senders listed before its own layer's heads
    assert len(graph.incoming("logits")) == 7
    assert len(graph.incoming("L1H0.k")) == 4  # embed, L0H0, L0H1, L0MLP


def test_split_embed():
    graph = circuit_graph_of(_model(1, 2), split_embed=True)
    assert graph.senders[:2] == ("tok_embed", "pos_embed")
    assert graph.n_edges == 13 + 8  # every embed edge twice
    assert "pos_embed->L0H1.k" in graph.edges and "embed->L0H1.k" not in graph.edges


def test_promotion_and_names():
    assert promote_edge("L0H0->L1H0.k") == "L0H0->L1H0"
    assert promote_edge("L0MLP->logits") == "L0MLP->logits"
    assert promote_edges(["L0H0->L1H0.k", "L0H0->L1H0.q", "embed->L1H0.v"]) == {"L0H0->L1H0", "embed->L1H0"}
    with pytest.raises(TypeError, match=r"edges must be an iterable of 'SENDER->RECEIVER' strings, got the str 'embed->logits'"):
        promote_edges("embed->logits")  # read as its letters before: "got 'e'"
    assert split_edge("embed->L0MLP") == ("embed", "L0MLP")
    with pytest.raises(ValueError, match="SENDER->RECEIVER"):
        split_edge("embed-L0MLP")
    with pytest.raises(TypeError, match="split_embed"):
        circuit_graph_of(_model(1, 1), split_embed=1)
