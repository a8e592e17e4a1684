"""The computational graph of a TransformerLens 4 model: sender and receiver nodes, and the edges between them.

This is the graph that edge-level circuit discovery searches (ACDC, Conmy et al. 2023, "Towards
Automated Circuit Discovery for Mechanistic Interpretability"; edge attribution patching, Syed et
al. 2023; the auto-circuit library), with the positions merged: an edge stands for a sender's
contribution to a receiver's input at every position at once.

Nodes:

- **Senders** write to the residual stream: ``"embed"`` (token plus positional embedding, summed,
  as one node; with ``split_embed=True`` two nodes ``"tok_embed"`` and ``"pos_embed"`` instead),
  ``"L{l}H{h}"`` (head ``h`` of layer ``l``: its ``z @ W_O``, without the attention bias ``b_O``)
  and ``"L{l}MLP"`` (MLP ``l``'s output, without its output bias ``b_out``).
- **Receivers** read the residual stream: ``"L{l}H{h}.q"``, ``"L{l}H{h}.k"``, ``"L{l}H{h}.v"``
  (that head's query, key and value input, each through the layer's ``ln1``), ``"L{l}MLP"`` (MLP
  ``l``'s input, through ``ln2``) and ``"logits"`` (the final residual stream, through ``ln_final``
  and the unembedding).

Every bias (``b_O``, ``b_out``, ``b_Q``/``b_K``/``b_V``, ``b_in``, ``b_U``) is a constant of the model
and always kept: it is not a node.  Queries, keys and values are separate receivers because a
head can read one sender through its key (K-composition) and another through its query.

Edges ``"SENDER->RECEIVER"`` join each sender to every receiver downstream of it: the embedding
feeds every receiver, a layer-``l`` head feeds layer ``l``'s MLP and every receiver of later
layers, a layer-``l`` MLP feeds every receiver of later layers and the logits.  One layer with two
heads has 13 edges, two layers with one head 23, two layers with two heads 46.  Edges are listed
receiver by receiver in topological order (layer by layer: each head's q, k, v, then the MLP,
finally the logits), and within a receiver by sender in topological order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from perm_circuits.checks import check_int
from perm_circuits.circuit import INPUTS, Edge, Node

__all__ = [
    "Edge",
    "EdgeGraph",
    "Node",
    "build_graph",
    "check_edges",
    "circuit_graph_of",
    "edge_name",
    "graph_edges",
    "head_of",
    "promote_edge",
    "promote_edges",
    "receiver_nodes",
    "sender_nodes",
    "split_edge",
]

def edge_name(sender: Node | str, receiver: Node | str) -> str:
    """``"SENDER->RECEIVER"`` (:class:`~perm_circuits.circuit.Edge`'s name; Nodes or names)."""
    return str(Edge.of(sender, receiver))


def split_edge(edge: Edge | str) -> tuple[str, str]:
    """``(sender, receiver)`` names of an edge (:meth:`Edge.parse`); ValueError when it is not
    ``"SENDER->RECEIVER"`` of two component names."""
    parsed = Edge.parse(edge)
    return str(parsed.sender), str(parsed.receiver)


def head_of(receiver: Node | str) -> str:
    """The component a receiver belongs to: ``"L1H0.k"`` -> ``"L1H0"``; MLPs and logits unchanged."""
    return str(Node.parse(receiver).owner())


def promote_edge(edge: Edge | str) -> str:
    """An edge with its q/k/v receiver promoted to the whole head: ``"L0H0->L1H0.k"`` -> ``"L0H0->L1H0"``."""
    return str(Edge.parse(edge).promoted())


def promote_edges(edges: Iterable[str]) -> frozenset[str]:
    """A set of edges at head level (q, k and v of a head merged, as InterpBench scores circuits)."""
    return frozenset(promote_edge(edge) for edge in check_edges("edges", edges))


def check_edges(name: str, edges: Iterable[str]) -> Iterable[str]:
    """``edges`` itself, refusing a bare string (it would be read as its letters)."""
    if isinstance(edges, str):
        raise TypeError(f"{name} must be an iterable of 'SENDER->RECEIVER' strings, got the str {edges!r}; wrap it in a list")
    return edges


@dataclass(frozen=True)
class EdgeGraph:
    """Senders, receivers and edges of a model (module docstring): what edge-level discovery searches.

    Names are strings (the forms of :mod:`perm_circuits.circuit`); :meth:`node` and :meth:`edge`
    give the typed values.

    Attributes:
        senders: sender nodes in topological order.
        receivers: receiver nodes in topological order.
        edges: every ``"SENDER->RECEIVER"`` edge, receiver-major in topological order.
        n_layers, n_heads: the model's shape.
        has_mlp: whether the blocks have MLPs (``False`` for attention-only models).
        split_embed: token and positional embeddings as two senders.
    """

    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    edges: tuple[str, ...]
    n_layers: int
    n_heads: int
    has_mlp: bool = True
    split_embed: bool = False
    _index: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _pairs: list[tuple[str, str]] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update({edge: i for i, edge in enumerate(self.edges)})
        if len(self._index) != len(self.edges):
            raise ValueError("edges must be distinct")
        self._pairs.extend(split_edge(edge) for edge in self.edges)  # parsed once: the forward passes ask often

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """``(sender, receiver)`` of every edge, in :attr:`edges`' order."""
        return tuple(self._pairs)

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node name once (senders, then receivers not already named; MLP nodes are both)."""
        return tuple(dict.fromkeys((*self.senders, *self.receivers)))

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    def node(self, name: Node | str) -> Node:
        """The typed node of a name (KeyError when the graph has no such sender or receiver)."""
        text = str(Node.parse(name))
        if text not in self.senders and text not in self.receivers:
            raise KeyError(f"no node {text!r} in this graph; nodes are {self.nodes}")
        return Node.parse(text)

    def edge(self, name: Edge | str) -> Edge:
        """The typed edge of a name (KeyError when it is not in the graph)."""
        return Edge.parse(self.edges[self.edge_index(str(Edge.parse(name)))])

    def edge_index(self, edge: str) -> int:
        """Position of ``edge`` in :attr:`edges`; KeyError naming the edge when it is not in the graph."""
        try:
            return self._index[edge]
        except KeyError:
            raise KeyError(f"no edge {edge!r} in this graph ({self.n_edges} edges, e.g. {self.edges[0]!r})") from None

    def incoming(self, receiver: str) -> tuple[int, ...]:
        """Indices of the edges into ``receiver``, in sender order."""
        if receiver not in self.receivers:
            raise KeyError(f"no receiver {receiver!r}; receivers are {self.receivers}")
        return tuple(i for i, (_, r) in enumerate(self._pairs) if r == receiver)

    def outgoing(self, sender: str) -> tuple[int, ...]:
        """Indices of the edges out of ``sender``."""
        if sender not in self.senders:
            raise KeyError(f"no sender {sender!r}; senders are {self.senders}")
        return tuple(i for i, (s, _) in enumerate(self._pairs) if s == sender)

    def senders_into(self) -> dict[str, list[tuple[str, int]]]:
        """Per receiver, ``(sender, edge index)`` of each edge into it, in sender order."""
        table: dict[str, list[tuple[str, int]]] = {r: [] for r in self.receivers}
        for e, (sender, receiver) in enumerate(self._pairs):
            table[receiver].append((sender, e))
        return table

    def mask_of(self, edges: Iterable[str]) -> list[float]:
        """A 0/1 list over :attr:`edges`: 1 for the given edges (each must be in the graph)."""
        mask = [0.0] * self.n_edges
        for edge in edges:
            mask[self.edge_index(edge)] = 1.0
        return mask

    def edges_of(self, mask: Iterable[float]) -> frozenset[str]:
        """The edges whose mask entry is above 0.5."""
        values = list(mask)
        if len(values) != self.n_edges:
            raise ValueError(f"mask must have one entry per edge ({self.n_edges}), got {len(values)}")
        return frozenset(e for e, m in zip(self.edges, values) if float(m) > 0.5)


def build_graph(n_layers: int, n_heads: int, *, has_mlp: bool = True, split_embed: bool = False) -> EdgeGraph:
    """The graph of a model of this shape (module docstring)."""
    for name, value in (("n_layers", n_layers), ("n_heads", n_heads)):
        check_int(name, value, low=1)
    senders = [Node.special("tok_embed"), Node.special("pos_embed")] if split_embed else [Node.special("embed")]
    receivers: list[Node] = []
    edges: list[Edge] = []

    def receive(receiver: Node) -> None:  # from every sender so far
        receivers.append(receiver)
        edges.extend(Edge(s, receiver) for s in senders)

    for layer in range(n_layers):
        heads = [Node(layer, h) for h in range(n_heads)]
        for head in heads:
            for inp in INPUTS:
                receive(head.input(inp))
        senders += heads
        if has_mlp:
            receive(Node(layer))
            senders.append(Node(layer))
    receive(Node.special("logits"))
    return EdgeGraph(tuple(map(str, senders)), tuple(map(str, receivers)), tuple(map(str, edges)), n_layers, n_heads,
                     has_mlp, split_embed)


def graph_edges(n_layers: int, n_heads: int, *, mlp: bool = True, split_embed: bool = False) -> tuple[str, ...]:
    """Every edge ``"SENDER->RECEIVER"`` of a model of this shape, in the graph's order (module docstring)."""
    return build_graph(n_layers, n_heads, has_mlp=mlp, split_embed=split_embed).edges


def sender_nodes(n_layers: int, n_heads: int, *, mlp: bool = True, split_embed: bool = False) -> tuple[str, ...]:
    """Sender nodes in forward order: the embedding(s), then per layer its heads and its MLP."""
    return build_graph(n_layers, n_heads, has_mlp=mlp, split_embed=split_embed).senders


def receiver_nodes(n_layers: int, n_heads: int, *, mlp: bool = True) -> tuple[str, ...]:
    """Receiver nodes in forward order: per layer each head's q, k, v and the MLP input; then logits."""
    return build_graph(n_layers, n_heads, has_mlp=mlp).receivers


def circuit_graph_of(model, *, split_embed: bool = False) -> EdgeGraph:
    """The graph of a TransformerLens 4 model (read from ``model.cfg``: layers, heads, ``attn_only``)."""
    if not isinstance(split_embed, bool):
        raise TypeError(f"split_embed must be a bool, got {type(split_embed).__name__}")
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(cfg, "n_layers") or not hasattr(cfg, "n_heads"):
        raise TypeError("model must be a TransformerLens model with a cfg (n_layers, n_heads), got "
                        f"{type(model).__name__}")
    return build_graph(int(cfg.n_layers), int(cfg.n_heads), has_mlp=not bool(getattr(cfg, "attn_only", False)),
                       split_embed=split_embed)
