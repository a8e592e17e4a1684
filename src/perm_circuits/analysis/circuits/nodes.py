"""Circuit nodes (a head or MLP at a position class) and the metric F of the IOI-style criteria
(Wang et al. 2022, "Interpretability in the Wild"), defined in full in
:mod:`perm_circuits.analysis.circuits.criteria`.

The node itself is :class:`perm_circuits.circuit.Node` (re-exported here), the one component type
of the library; this module adds what a node-level circuit needs: position classes and validation
against a model (:func:`parse_circuit`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_head, check_layer
from perm_circuits.circuit import Node
from perm_circuits.metric import target_logprob
from perm_circuits.model_shape import model_shape
from perm_circuits.tasks.base import TaskBatch, model_task

__all__ = [
    "POSITION_CLASSES",
    "SUBGROUPS",
    "Node",
    "GENERAL_CLASSES",
    "class_positions",
    "parse_circuit",
    "positions_in",
    "skill_logit_diff",
    "target_logprob_gain",
]

POSITION_CLASSES: tuple[str, ...] = ("all", "query", "answer", "last", "context")
"""Named position classes (plus ``p{k}`` for a single position ``k``); see the module docstring."""

SUBGROUPS: tuple[str, ...] = ("elimination", "recall")
"""The subgroups F is reported on for the permutation task (the last query new / repeated)."""

GENERAL_CLASSES: tuple[str, ...] = ("all", "last", "context")
"""The position classes of any task's sequences (plus ``p{k}``; ``query`` / ``answer`` are the study's)."""

def _positions(where: str, seq_len: int, named: Mapping[str, Iterable[int]], expected: str) -> tuple[int, ...]:
    """The positions of ``all``, ``last``, ``context``, ``p{k}`` or one of ``named`` in ``seq_len`` tokens."""
    named = {"all": range(seq_len), "last": (seq_len - 1,), "context": range(seq_len - 1), **named}
    if where in named:
        return tuple(named[where])
    match = re.fullmatch(r"p(\d+)", where) if isinstance(where, str) else None
    if match is None:
        raise ValueError(f"unknown position class {where!r}{expected}")
    k = int(match.group(1))
    if k >= seq_len:
        raise ValueError(f"position class {where!r} out of range: sequences have positions 0..{seq_len - 1}")
    return (k,)


def class_positions(where: str, V: int) -> tuple[int, ...]:
    """The positions of class ``where`` in sequences of ``2V - 1`` tokens (ValueError if unknown)."""
    x_and_y = {"query": range(0, 2 * V - 1, 2), "answer": range(1, 2 * V - 2, 2)}
    return _positions(where, 2 * V - 1, x_and_y, f": expected one of {POSITION_CLASSES} or 'p<k>'")


def positions_in(where: str, seq_len: int) -> tuple[int, ...]:
    """The positions of class ``where`` (:data:`GENERAL_CLASSES` or ``p{k}``; ValueError otherwise)
    in sequences of ``seq_len`` tokens of any task."""
    return _positions(where, seq_len, {}, f" on a task's sequences: expected one of {GENERAL_CLASSES} or 'p<k>' "
                      "(query/answer are the permutation task's)")


def parse_circuit(model, circuit: Node | str | Iterable, seq_len: int | None = None) -> tuple[Node, ...]:
    """A circuit (a node, a node string, or an iterable of them) validated against ``model``, in
    canonical order; position classes for sequences of ``seq_len`` tokens on any task
    (:func:`positions_in`), default the classes the model's task names (``named_positions``: the
    permutation task's query/answer in ``2V - 1`` tokens, :func:`class_positions`, on a study bridge)."""
    task = None if seq_len is not None else model_task(model)
    named = getattr(task, "named_positions", None)
    general = named is None
    shape = model_shape(model)
    items = [circuit] if isinstance(circuit, (Node, str)) else circuit
    if not isinstance(items, Iterable) or isinstance(items, Mapping):
        raise TypeError(f"circuit must be a Node, a str or an iterable of them, got {type(circuit).__name__}")
    nodes = []
    for item in items:
        node = Node.parse(item)
        if node.kind is not None or node.port is not None:
            raise ValueError(f"a node-level circuit holds heads and MLPs ('L0H1@last', 'L0MLP'), got {str(node)!r}")
        try:
            layer = check_layer(model, node.layer)
            head = check_head(model, node.head) if node.head is not None else None
            if general:
                if head is None and not shape.mlp(layer):
                    raise ValueError(f"the model has no MLP output (blocks.{layer}.hook_mlp_out) at layer {layer}")
                if seq_len is not None:
                    positions_in(node.where, seq_len)
            else:
                _positions(node.where, task.n_ctx, named, f": expected one of {POSITION_CLASSES} or 'p<k>'")
        except ValueError as error:
            raise ValueError(f"node {node.name}: {error}") from None
        nodes.append(Node(layer, head, node.where))
    if len(set(nodes)) != len(nodes):
        repeated = sorted({n.name for n in nodes if nodes.count(n) > 1})
        raise ValueError(f"circuit has repeated nodes {repeated}")
    return tuple(sorted(nodes))


# ----------------------------------------------------------------------------- the metric F


def skill_logit_diff(
    logits: Float[Tensor, "batch seq vocab"], batch: TaskBatch
) -> Float[Tensor, " batch"]:
    """F per row at the last position (float64): the answer's margin over the strongest other
    value on elimination rows, ``logit(answer) - logit(unused y)`` on recall (repeated) rows."""
    V = batch.extras["ys"].shape[1]
    values = logits[:, -1, 1 : V + 1].double()
    answer = batch.extras["ys"][:, -1] - 1
    ys = batch.extras["ys"]
    seen = (ys[:, : V - 1, None] == torch.arange(1, V + 1, device=ys.device)).any(dim=1)  # [batch, V]
    unused = (~seen).float().argmax(dim=1)
    own = values.gather(1, answer[:, None])[:, 0]
    others = values.scatter(1, answer[:, None], -math.inf).amax(dim=1)
    rival = torch.where(batch.extras["repeated"], values.gather(1, unused[:, None])[:, 0], others)
    return own - rival


def target_logprob_gain(batch: TaskBatch) -> Callable[[Tensor], Tensor]:
    """F on any task: per row, the ``mask``-weighted mean over its loss positions of ``log p(target) +
    log n_out`` (nan for a row without one), in nats above a uniform guess over the ``n_out`` logits:
    0 for a model that says nothing (every logit equal, e.g. all writers zero-ablated).  ``F(C) /
    F(M)`` is then the share of the model's gain over chance a circuit keeps: the IOI paper's
    faithfulness (Wang et al. 2022) with log-probability in place of its logit difference.
    """
    rows = target_logprob(batch, empty="nan")  # the library's one target log-prob (perm_circuits.metric)

    def metric(logits: Float[Tensor, "batch seq vocab"]) -> Float[Tensor, " batch"]:
        return rows(logits) + math.log(logits.shape[-1])

    return metric
