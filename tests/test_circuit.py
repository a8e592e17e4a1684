"""perm_circuits.circuit: one Node and Edge type, one parser, the committed name forms kept exactly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perm_circuits.circuit import Edge, Node, is_component
from perm_circuits.discovery.graph import build_graph, graph_edges, head_of, promote_edge, split_edge

SRC = Path(__file__).resolve().parents[1] / "src" / "perm_circuits"


@pytest.mark.parametrize("name", ["embed", "tok_embed", "pos_embed", "logits", "L0H1", "L12H3", "L0MLP", "L1H0.q",
                                  "L1H0.k", "L3H2.v", "L0H1@last", "L2MLP@answer", "L1H0@p4"])
def test_every_name_round_trips(name):
    node = Node.parse(name)
    assert str(node) == name and Node.parse(node) is node
    assert Node.parse(f"  {name} ") == node  # surrounding spaces are not part of a name


def test_fields_and_the_two_names():
    head, mlp, port = Node.parse("L0H1@last"), Node.parse("L2MLP"), Node.parse("L1H0.k")
    assert (head.layer, head.head, head.where, head.port, head.kind) == (0, 1, "last", None, None)
    assert (mlp.layer, mlp.head, mlp.where) == (2, None, "all") and mlp.is_mlp and not mlp.is_head
    assert (port.layer, port.head, port.port) == (1, 0, "k") and port.owner() == Node(1, 0)
    assert Node.special("embed").is_embed and Node.parse("logits").is_logits
    # str is the edge graph's form; .name the IOI criteria's, class always written
    assert str(Node(0, 1)) == "L0H1" and Node(0, 1).name == "L0H1@all" and Node(0, None, "query").name == "L0MLP@query"
    assert Node(0, 1).at("last") == head.at("last") != head.at("all") and Node(1, 0).input("k") == port
    assert str(Node.parse("embed")) == Node.parse("embed").name == "embed"


@pytest.mark.parametrize(("text", "error", "match"), [
    ("L0X1", ValueError, "bad node 'L0X1'"),
    ("L0MLP.q", ValueError, "bad node"),  # an MLP has no q/k/v input
    ("embed@last", ValueError, "no position class"),
    ("L0H0.q@last", ValueError, "a head's input has no position class"),
    ("l0h1", ValueError, "bad node"),
    (3, TypeError, "a node must be a str like 'L0H1@last' or a Node"),
])
def test_bad_names_are_refused(text, error, match):
    with pytest.raises(error, match=match):
        Node.parse(text)


def test_bad_fields_are_refused():
    with pytest.raises(TypeError, match="Node head must be an int, got float 1.5|parameter 'head'"):
        Node(0, 1.5)
    with pytest.raises(ValueError, match="only a head has a 'q' input"):
        Node(0, None, port="q")
    with pytest.raises(ValueError, match="port must be one of"):
        Node(0, 0, port="z")
    with pytest.raises(ValueError, match="needs a layer"):
        Node()
    with pytest.raises(ValueError, match="kind must be one of"):
        Node(kind="unembed")
    with pytest.raises(ValueError, match="has no layer"):
        Node(0, kind="embed")


def test_edges_parse_promote_and_refuse():
    edge = Edge.parse("L0H0->L1H0.k")
    assert edge.sender == Node(0, 0) and edge.receiver == Node(1, 0, port="k")
    assert str(edge) == edge.name == "L0H0->L1H0.k" and Edge.of("L0H0", Node(1, 0).input("k")) == edge
    assert str(edge.promoted()) == "L0H0->L1H0" == promote_edge("L0H0->L1H0.k")
    assert split_edge(edge) == split_edge("L0H0->L1H0.k") == ("L0H0", "L1H0.k") and head_of("L1H0.k") == "L1H0"
    for bad, match in (("L0H0", "SENDER->RECEIVER"), ("a->b->c", "SENDER->RECEIVER"), ("logits->L1H0.q", "cannot send"),
                       ("L1H0.q->logits", "cannot send"), ("L0H0->embed", "cannot receive"), ("L0H0->L9X", "bad node")):
        with pytest.raises(ValueError, match=match):
            Edge.parse(bad)


@pytest.mark.parametrize(("layers", "heads", "mlp"), [(1, 2, True), (2, 2, True), (3, 1, False)])
def test_the_graphs_names_are_todays_and_sort_in_graph_order(layers, heads, mlp):
    graph = build_graph(layers, heads, has_mlp=mlp)
    assert graph.edges == graph_edges(layers, heads, mlp=mlp)
    assert len(graph.edges) == {(1, 2, True): 13, (2, 2, True): 46, (3, 1, False): 3 + 6 + 9 + 4}[(layers, heads, mlp)]
    assert [str(Edge.parse(e)) for e in graph.edges] == list(graph.edges)
    # receiver-major, senders in topological order: exactly the order of Node and Edge
    assert sorted(graph.edges, key=Edge.parse) == list(graph.edges)
    assert sorted(graph.senders, key=Node.parse) == list(graph.senders)
    assert sorted(graph.receivers, key=Node.parse) == list(graph.receivers)
    assert graph.node("L0H0.q") == Node(0, 0, port="q") and graph.edge(graph.edges[-1]) == Edge.parse(graph.edges[-1])
    with pytest.raises(KeyError, match="no node 'L9H0'"):
        graph.node("L9H0")
    if layers == 1:
        assert graph.edges[:4] == ("embed->L0H0.q", "embed->L0H0.k", "embed->L0H0.v", "embed->L0H1.q")
        assert graph.edges[-4:] == ("embed->logits", "L0H0->logits", "L0H1->logits", "L0MLP->logits")


def test_is_component():
    assert is_component("L0H1") and is_component("L10MLP")
    assert not any(is_component(t) for t in ("L0H1.q", "L0H1@last", "embed", "logits", "L0", "x", 3, " L0H1"))


def test_no_other_module_parses_a_component_name():
    """The one parser: no regex over component names anywhere in src/ but perm_circuits/circuit.py."""
    pattern = re.compile(r"""re\.(?:compile|match|fullmatch|search)\(\s*r?["'][^"']*L(?:\\d|\(\\d|\[0-9\])""")
    offenders = [str(path.relative_to(SRC)) for path in sorted(SRC.rglob("*.py"))
                 if path.name != "circuit.py" and pattern.search(path.read_text(encoding="utf-8"))]
    assert offenders == []
    assert pattern.search('_NAME = re.compile(r"^L(\\d+)(?:H(\\d+)|MLP)")')  # the test can fail
