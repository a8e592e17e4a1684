"""Circuit components as typed values: one :class:`Node`, one :class:`Edge`, one parser for their names.

Every part of the library that names a component uses these: node-level circuits (the IOI-style
criteria of Wang et al. 2022, "Interpretability in the Wild": a head or MLP at a position class),
edge-level circuits (circuit discovery, Conmy et al. 2023 "Towards Automated Circuit Discovery";
edge attribution patching, Syed et al. 2023; the exhaustive oracle and the tracr ground truths),
and every view.  No other module builds a component name by hand or parses one back.

The names (the strings in committed tables and docs):

- ``"embed"`` (token plus positional embedding as one node), or ``"tok_embed"`` / ``"pos_embed"``;
- ``"L{l}H{h}"`` (head ``h`` of layer ``l``), ``"L{l}MLP"`` (MLP of layer ``l``);
- ``"L{l}H{h}.q"`` / ``.k`` / ``.v`` (a head's query, key or value input: a receiver of the edge graph);
- ``"logits"`` (the unembedding's input);
- ``"L{l}H{h}@{where}"`` (a head or MLP at a position class, :data:`~perm_circuits.analysis.circuits.nodes.POSITION_CLASSES`
  or ``p{k}``; without ``@`` the class is ``all``);
- an edge ``"SENDER->RECEIVER"``.

The module is standard library only, so the data path's lowest layers can import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from perm_circuits.checks import check_int

__all__ = ["EMBEDS", "INPUTS", "SPECIAL", "Edge", "Node", "as_edge", "as_node", "is_component"]

INPUTS: tuple[str, ...] = ("q", "k", "v")
"""A head's three inputs (receivers of the edge graph), in graph order."""
EMBEDS: tuple[str, ...] = ("embed", "tok_embed", "pos_embed")
"""The embedding senders: summed as one node, or token and position apart."""
SPECIAL: tuple[str, ...] = (*EMBEDS, "logits")
"""The nodes that are not a layer's component."""

_NAME = re.compile(r"^(?:(embed|tok_embed|pos_embed|logits)|L(\d+)(?:H(\d+)(?:\.([qkv]))?|MLP))(?:@(\S+))?$")
_EXPECTED = ("'L<layer>H<head>', 'L<layer>MLP', 'L<layer>H<head>.q|k|v', 'embed', 'tok_embed', 'pos_embed' "
             "or 'logits', optionally '@<position class>' after a head or MLP")


@dataclass(frozen=True)
class Node:
    """One component of a transformer: a head, an MLP, an embedding or the logits.

    ``Node(layer, head)`` is head ``L{layer}H{head}``, ``Node(layer)`` the MLP ``L{layer}MLP``,
    ``Node.special("embed")`` / ``Node.special("logits")`` the graph's ends.  ``port`` (``"q"``,
    ``"k"`` or ``"v"``) names one input of a head (an edge graph's receiver); ``where`` is the
    position class of a node-level circuit (``"all"``, the default, is every position).  Ordered in
    the forward pass's order: embeddings, then layer by layer the heads (each's q, k, v) before the
    MLP, then the logits; then by position class.  A negative layer or head counts from the end
    (:func:`~perm_circuits.analysis.circuits.nodes.parse_circuit` normalises it against a model).

    ``str(node)`` is the component's name (``"L0H1"``, ``"L0H1.k"``, ``"embed"``), with
    ``"@where"`` when the class is not ``all``; :attr:`name` always carries the class
    (``"L0H1@all"``), the form of the IOI criteria's tables.
    """

    layer: int | None = None
    head: int | None = None
    where: str = "all"
    port: str | None = None
    kind: str | None = None  # one of SPECIAL for embed / logits nodes, else None

    def __post_init__(self) -> None:
        if self.kind is not None:
            if self.kind not in SPECIAL:
                raise ValueError(f"Node kind must be one of {SPECIAL}, got {self.kind!r}")
            if self.layer is not None or self.head is not None or self.port is not None or self.where != "all":
                raise ValueError(f"the {self.kind!r} node has no layer, head, port or position class")
            return
        if self.layer is None:
            raise ValueError("a Node needs a layer (or use Node.special('embed' | 'logits'))")
        for name, value in (("layer", self.layer), ("head", self.head)):
            if value is not None:
                check_int(f"Node {name}", value)
        if not isinstance(self.where, str) or not self.where or any(c.isspace() for c in self.where):
            raise TypeError(f"Node where must be a non-empty str without spaces, got {self.where!r}")
        if self.port is not None:
            if self.port not in INPUTS:
                raise ValueError(f"Node port must be one of {INPUTS}, got {self.port!r}")
            if self.head is None:
                raise ValueError(f"only a head has a {self.port!r} input, not L{self.layer}MLP")

    # ------------------------------------------------------------------ constructors and parsing

    @classmethod
    def special(cls, kind: str) -> Node:
        """``"embed"``, ``"tok_embed"``, ``"pos_embed"`` or ``"logits"``."""
        return cls(kind=kind)

    @classmethod
    def parse(cls, text: object) -> Node:
        """The one parser of component names (module docstring): ``"L0H1"``, ``"L0MLP@answer"``,
        ``"L1H0.k"``, ``"embed"``, ``"logits"`` -> a Node (a Node is returned as it is)."""
        if isinstance(text, Node):
            return text
        if not isinstance(text, str):
            raise TypeError("a node must be a str like 'L0H1@last' or a Node (e.g. 'L0H1', 'L1H0.k', 'embed'), "
                            f"got {type(text).__name__} {text!r}")
        return _parse_node(text)

    @classmethod
    def _from_name(cls, text: str) -> Node:
        match = _NAME.match(text.strip())
        if match is None:
            raise ValueError(f"bad node {text!r}: expected {_EXPECTED}")
        kind, layer, head, port, where = match.groups()
        if kind is not None:
            if where is not None:
                raise ValueError(f"bad node {text!r}: {kind!r} has no position class")
            return cls(kind=kind)
        if port is not None and where is not None:
            raise ValueError(f"bad node {text!r}: a head's input has no position class")
        return cls(int(layer), int(head) if head is not None else None, where or "all", port)

    # ------------------------------------------------------------------ what it is

    @property
    def is_head(self) -> bool:
        return self.kind is None and self.head is not None

    @property
    def is_mlp(self) -> bool:
        return self.kind is None and self.head is None

    @property
    def is_embed(self) -> bool:
        return self.kind in EMBEDS

    @property
    def is_logits(self) -> bool:
        return self.kind == "logits"

    @property
    def component(self) -> str:
        """``"L0H1"``, ``"L0MLP"``, ``"embed"`` or ``"logits"``: the node without its port and class."""
        if self.kind is not None:
            return self.kind
        return f"L{self.layer}H{self.head}" if self.head is not None else f"L{self.layer}MLP"

    @property
    def name(self) -> str:
        """The IOI criteria's form, class always written: ``"L0H1@last"``, ``"L0MLP@all"``;
        ``str(node)`` for an embedding, the logits or a head's input."""
        if self.kind is not None or self.port is not None:
            return str(self)
        return f"{self.component}@{self.where}"

    def __str__(self) -> str:
        text = self.component
        if self.port is not None:
            text += f".{self.port}"
        if self.where != "all":
            text += f"@{self.where}"
        return text

    def owner(self) -> Node:
        """The component itself: ``L1H0.k`` -> ``L1H0`` (port and class dropped)."""
        if self.kind is not None:
            return self
        return Node(self.layer, self.head)

    def input(self, port: str) -> Node:
        """This head's ``"q"``, ``"k"`` or ``"v"`` input."""
        return Node(self.layer, self.head, port=port)

    def at(self, where: str) -> Node:
        """This head or MLP at position class ``where``."""
        return Node(self.layer, self.head, where, self.port, self.kind)

    # ------------------------------------------------------------------ order

    def _key(self) -> tuple:
        if self.kind in EMBEDS:
            return (0, 0, EMBEDS.index(self.kind), 0, 0, "")
        if self.kind == "logits":
            return (2, 0, 0, 0, 0, "")
        head = self.head if self.head is not None else 1 << 30  # the MLP after the heads of its layer
        port = 0 if self.port is None else 1 + INPUTS.index(self.port)
        return (1, self.layer, head, port, 0, self.where)

    def __lt__(self, other: Node) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return self._key() < other._key()


def is_component(text: object) -> bool:
    """Whether ``text`` names a head or an MLP exactly (``"L0H1"``, ``"L2MLP"``; not a port, a
    position class, an embedding or the logits): for reading component names out of column labels."""
    try:
        node = Node.parse(text)
    except (TypeError, ValueError):
        return False
    return node.kind is None and node.port is None and node.where == "all" and str(node) == text


def as_node(value: object) -> Node:
    """A Node from a Node or its name (:meth:`Node.parse`)."""
    return Node.parse(value)


@dataclass(frozen=True)
class Edge:
    """A sender's contribution to a receiver's input, at every position: ``"SENDER->RECEIVER"``.

    Senders are embeddings, heads and MLPs; receivers are heads' inputs (``L1H0.k``), whole heads
    (head-level circuits, as InterpBench scores them), MLPs and the logits.
    """

    sender: Node
    receiver: Node

    def __post_init__(self) -> None:
        for name, value in (("sender", self.sender), ("receiver", self.receiver)):
            if not isinstance(value, Node):
                raise TypeError(f"Edge {name} must be a Node, got {type(value).__name__} {value!r}")
        if self.sender.is_logits or self.sender.port is not None:
            raise ValueError(f"{self.sender} cannot send: senders are embeddings, heads and MLPs")
        if self.receiver.is_embed:
            raise ValueError(f"{self.receiver} cannot receive: it is the model's input")

    @classmethod
    def parse(cls, text: object) -> Edge:
        """``"L0H0->L1H0.k"`` -> an Edge (an Edge is returned as it is); ValueError otherwise."""
        if isinstance(text, Edge):
            return text
        if not isinstance(text, str) or text.count("->") != 1:
            raise ValueError(f"an edge is a string 'SENDER->RECEIVER', got {text!r}")
        return _parse_edge(text)

    @classmethod
    def of(cls, sender: Node | str, receiver: Node | str) -> Edge:
        """The edge from ``sender`` to ``receiver`` (Nodes or names)."""
        return cls(Node.parse(sender), Node.parse(receiver))

    @property
    def name(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return f"{self.sender}->{self.receiver}"

    def promoted(self) -> Edge:
        """The edge with its q/k/v receiver promoted to the whole head: ``L0H0->L1H0.k`` -> ``L0H0->L1H0``."""
        return Edge(self.sender, self.receiver.owner())

    def __lt__(self, other: Edge) -> bool:
        if not isinstance(other, Edge):
            return NotImplemented
        return (self.receiver._key(), self.sender._key()) < (other.receiver._key(), other.sender._key())


@lru_cache(maxsize=8192)
def _parse_node(text: str) -> Node:  # Nodes are frozen: one parse per name, shared
    return Node._from_name(text)


@lru_cache(maxsize=8192)
def _parse_edge(text: str) -> Edge:
    sender, receiver = text.split("->")
    return Edge(Node.parse(sender), Node.parse(receiver))


def as_edge(value: object) -> Edge:
    """An Edge from an Edge or its name (:meth:`Edge.parse`)."""
    return Edge.parse(value)
