"""Ground-truth circuits that nobody tuned: read off the weights of compiled and weight-built models.

The graph is the discovery methods' (:mod:`~perm_circuits.discovery.graph`): edges ``"S->R"`` from
senders ``embed``, ``L{l}H{h}``, ``L{l}MLP`` to receivers ``L{l}H{h}.q|.k|.v``, ``L{l}MLP``,
``logits``, as in path patching (Wang et al., "Interpretability in the Wild", ICLR 2023) and ACDC
(Conmy et al., NeurIPS 2023).

The rule (:func:`weight_circuit`), from the weights alone:

- **zero ablation.** An edge is in the circuit when the sender's write matrix composed with the
  receiver's read matrix is not zero (``W_E``/``W_pos`` rows, ``W_O[l, h]`` or ``W_out[l]``, times
  ``W_Q W_K^T``, ``W_K W_Q^T``, ``W_V W_O`` of head ``(l, h)``, ``W_in[l]`` or ``W_U``: a query or
  key input counts only if it can change an attention score, a value input only if it can change
  the head's output), and the edge lies on a path to ``logits`` through such edges (a component
  with no input edge still sends its bias-made output). Removing such an edge (replacing what it
  carries by zero) can change what the receiver computes.
- **resample and mean ablation** (corrupted inputs of the same length, with the given tokens
  possible at each position). Only what differs between inputs can matter: ``embed`` carries the
  differences of the token embeddings possible at each position (positional embeddings and a token
  fixed at a position, like tracr's BOS, are the same in every input); a head or MLP carries a
  difference when one of its inputs does. An edge is in the circuit when it carries a difference
  that the receiver reads, on a path to ``logits``. This is why the ground truth depends on the
  ablation mode (Miller, Chughtai, Saunders, "Transformer Circuit Faithfulness Metrics are not
  Robust", COLM 2024): e.g. a head that reads positions only is in the zero-ablation circuit and not
  in the resample one.

Both rules are structural (a non-zero composition could still be functionally idle: zeroing
tracr ``reverse``'s length head reads as the largest length, right by chance on full-length inputs
and wrong on shorter ones); on tracr models every weight outside a RASP operation's spaces is
exactly zero, so the structure is the program's. :func:`tracr_ground_truths` also names the RASP
variables each edge carries (from tracr's residual labels).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial

import torch

from perm_circuits.circuit import Node
from perm_circuits.discovery.graph import graph_edges, head_of, receiver_nodes, sender_nodes, split_edge
from perm_circuits.discovery.tracr_models import BOS, TRACR_PROGRAMS, build_tracr_model, tracr_available
from perm_circuits.handbuilt import build_induction_model

ABLATION_MODES = ("zero", "mean", "resample")

__all__ = [
    "ABLATION_MODES",
    "FunctionalTruth",
    "GroundTruth",
    "TracrProgram",
    "all_edges",
    "birth_ground_truth",
    "edge_receiver_node",
    "functional_truth",
    "ground_truth_models",
    "induction_ground_truths",
    "receiver_nodes",
    "sender_nodes",
    "tracr_ground_truths",
    "tracr_program",
    "weight_circuit",
]


edge_receiver_node = head_of
"""The component a receiver belongs to: ``"L1H0.k" -> "L1H0"``, ``"L0MLP" -> "L0MLP"`` (graph's ``head_of``)."""

all_edges = graph_edges
"""Every edge of the graph (:func:`perm_circuits.discovery.graph.graph_edges`; kept under this name)."""


@dataclass(frozen=True)
class GroundTruth:
    """A circuit known by construction: which model, which edges, under which ablation modes.

    ``carries`` names, per edge, what it carries (RASP variables for tracr models) where known.
    """

    model: str
    edges: AbstractSet
    modes: tuple
    n_layers: int
    n_heads: int
    mlp: bool = True
    how: str = ""
    carries: tuple = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "edges", frozenset(self.edges))
        bad_modes = [m for m in self.modes if m not in ABLATION_MODES]
        if bad_modes or not self.modes:
            raise ValueError(f"modes must be a non-empty subset of {ABLATION_MODES}, got {self.modes!r}")
        valid = set(all_edges(self.n_layers, self.n_heads, mlp=self.mlp))
        bad = sorted(self.edges - valid)
        if bad:
            raise ValueError(f"edges {bad} are not edges of a {self.n_layers}-layer {self.n_heads}-head graph")

    @property
    def all_edges(self) -> tuple[str, ...]:
        """Every edge of this model's graph."""
        return all_edges(self.n_layers, self.n_heads, mlp=self.mlp)

    def label(self, edge: str) -> bool:
        """Whether ``edge`` is in the circuit (``ValueError`` if it is no edge of the graph)."""
        if edge not in set(self.all_edges):
            raise ValueError(f"{edge!r} is not an edge of this model's graph")
        return edge in self.edges


def _has_mlp(model) -> bool:
    return not getattr(model.cfg, "attn_only", False)


def _matrices(model, varying_tokens) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Receiver -> read matrix ``[d_model, k]`` and sender -> write rows ``[k, d_model]`` (module docstring;
    ``embed`` writes every embedding row, or only the differences between the ``varying_tokens``)."""
    cfg = model.cfg
    W_E, W_pos, W_Q, W_K, W_V, W_O = (w.detach() for w in (model.W_E, model.W_pos, model.W_Q, model.W_K, model.W_V,
                                                            model.W_O))
    if varying_tokens is None:
        embed = torch.cat([W_E, W_pos])
    else:
        diffs = [W_E[list(ids)] - W_E[list(ids)[0]] for ids in varying_tokens if len(ids) > 1]
        embed = torch.cat(diffs) if diffs else torch.zeros(1, cfg.d_model, device=W_E.device)
    reads, writes = {"logits": model.W_U.detach()}, {"embed": embed}
    for layer in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            reads[str(Node(layer, h, port="q"))] = W_Q[layer, h] @ W_K[layer, h].T
            reads[str(Node(layer, h, port="k"))] = W_K[layer, h] @ W_Q[layer, h].T
            reads[str(Node(layer, h, port="v"))] = W_V[layer, h] @ W_O[layer, h]
            writes[str(Node(layer, h))] = W_O[layer, h]
        if _has_mlp(model):
            reads[str(Node(layer))], writes[str(Node(layer))] = model.W_in[layer].detach(), model.W_out[layer].detach()
    return reads, writes


def _prune_to_paths(edges: set[str], *, from_embed: bool) -> frozenset:
    """Keep the edges on some path to ``logits`` (and, with ``from_embed``, from ``embed``)."""
    while True:
        pairs = {e: split_edge(e) for e in edges}
        senders = {s for s, _ in pairs.values()}
        fed = {"embed"} | {head_of(r) for _, r in pairs.values()}
        kept = {e for e, (s, r) in pairs.items()
                if (not from_embed or s in fed) and (r == "logits" or head_of(r) in senders)}
        if kept == edges:
            return frozenset(kept)
        edges = kept


@torch.no_grad()
def weight_circuit(model, *, varying_tokens=None, tol: float = 1e-6) -> frozenset:
    """The circuit a model's weights imply (module docstring): zero ablation, or resample/mean.

    Args:
        model: a TransformerLens 4 bridge without LayerNorm (``W_Q`` ... ``W_U`` properties).
        varying_tokens: ``None`` for the zero-ablation circuit; for the resample/mean circuit, per
            position the token ids that inputs can hold there (one id where the token is fixed).
        tol: a composition with largest absolute entry at most ``tol`` counts as zero.
    """
    if getattr(model.cfg, "normalization_type", None) is not None:
        raise ValueError(
            f"weight_circuit needs a model without LayerNorm, got normalization_type={model.cfg.normalization_type!r}"
        )
    if varying_tokens is not None:
        n_ctx = model.cfg.n_ctx
        if not isinstance(varying_tokens, (list, tuple)) or not 1 <= len(varying_tokens) <= n_ctx:
            raise ValueError(f"varying_tokens must be a list of 1..{n_ctx} token-id lists, got {varying_tokens!r}")
        for ids in varying_tokens:
            if not ids or any(not 0 <= int(i) < model.cfg.d_vocab for i in ids):
                raise ValueError(f"varying_tokens entries must be non-empty lists of ids in [0, {model.cfg.d_vocab})")
    cfg = model.cfg
    reads, writes = _matrices(model, varying_tokens)
    candidates = all_edges(cfg.n_layers, cfg.n_heads, mlp=_has_mlp(model))
    if varying_tokens is None:  # zero ablation: every output counts, biases included
        live = set(sender_nodes(cfg.n_layers, cfg.n_heads, mlp=_has_mlp(model)))
    else:  # resample/mean: only what differs between inputs
        live = {"embed"} if bool((writes["embed"].abs() > tol).any()) else set()
    edges: set[str] = set()
    for edge in candidates:  # forward order: a sender's liveness is settled before it sends
        sender, receiver = split_edge(edge)
        if sender not in live:
            continue
        if (writes[sender] @ reads[receiver]).abs().max() > tol:
            edges.add(edge)
            live.add(head_of(receiver))
    return _prune_to_paths(edges, from_embed=varying_tokens is not None)


def _carried(edge: str, labels: list[str], reads: dict, writes: dict, tol: float = 1e-6) -> tuple[str, ...]:
    """Residual labels (tracr variables) that the sender writes and the receiver reads."""
    sender, receiver = split_edge(edge)
    written = (writes[sender].abs() > tol).any(0)
    read = (reads[receiver].abs() > tol).any(1)
    names = []
    for index in torch.nonzero(written & read).flatten().tolist():
        name = labels[index].rpartition(":")[0] or labels[index]
        name = name.removesuffix("_selector_width_attn_output")
        if name not in names:
            names.append(name)
    return tuple(names)


def _weight_truths(name: str, model, varying_tokens,
                   labels: list[str] | None = None) -> tuple[GroundTruth, GroundTruth]:
    """The zero-ablation and the resample/mean :func:`weight_circuit` of ``model``, with what each
    edge carries when the residual ``labels`` are given."""
    out = []
    reads, writes = _matrices(model, None)
    for modes, tokens, how in (
        (("zero",), None, "non-zero weight compositions on paths to logits"),
        (("mean", "resample"), varying_tokens, "compositions carrying input differences (same-length inputs)"),
    ):
        edges = weight_circuit(model, varying_tokens=tokens)
        carries = () if labels is None else tuple((e, _carried(e, labels, reads, writes)) for e in sorted(edges))
        out.append(GroundTruth(name, edges, modes, model.cfg.n_layers, model.cfg.n_heads, True, how, carries))
    return out[0], out[1]


def tracr_ground_truths(tracr_model, *, mixed_lengths: bool = False) -> tuple[GroundTruth, GroundTruth]:
    """The zero-ablation and the resample/mean circuits of a compiled RASP program.

    ``tracr_model`` is a :class:`~perm_circuits.discovery.tracr_models.TracrModel`. The resample
    circuit is for inputs of length ``max_seq_len`` (BOS fixed at position 0, any vocabulary token
    elsewhere): e.g. ``reverse``'s ``length`` and ``opp_idx`` are then the same in every input, and
    only the aggregating head that copies tokens stays.  ``mixed_lengths``: for a batch of several
    lengths resampled across them (:mod:`~perm_circuits.discovery.padding`), where a head's
    attention span itself differs between inputs, so any component can carry a difference: the
    resample/mean circuit is then the zero-ablation one (every non-zero composition on a path to
    ``logits``), a superset that :func:`functional_truth` prunes on the batch.
    """
    if not isinstance(mixed_lengths, bool):
        raise TypeError(f"mixed_lengths must be a bool, got {mixed_lengths!r}")
    bridge = tracr_model.bridge
    table = tracr_model.assembled.input_encoder.encoding_map
    varying = [[table[BOS]]] + [[table[t] for t in tracr_model.vocab]] * tracr_model.max_seq_len
    labels = list(tracr_model.assembled.residual_labels)
    zero, resample = _weight_truths(f"tracr:{tracr_model.name}", bridge, varying, labels)
    if mixed_lengths:
        resample = GroundTruth(resample.model, zero.edges, resample.modes, zero.n_layers, zero.n_heads, zero.mlp,
                               "non-zero weight compositions on paths to logits (inputs of several lengths)",
                               zero.carries)
    return zero, resample


def induction_ground_truths(V: int = 5, *, eliminate: bool = True) -> tuple[GroundTruth, GroundTruth]:
    """Zero-ablation and resample/mean circuits of ``perm_circuits.handbuilt.build_induction_model``.

    By construction (Elhage et al. 2021; Olsson et al. 2022): L0H0's query and key read positions
    and its value tokens; L1H0's query reads tokens and the x-slot flag, its key what L0H0 wrote
    (K-composition) and the flag, its value tokens; the elimination head L1H1 (``eliminate``)
    attends by the flag and copies tokens; L1H0 and L1H1 write the logits. Under resample/mean
    ablation the position-only reads (L0H0.q, L0H0.k, the flag) drop out. Every token 1..V can sit
    at every position.
    """
    name = f"perm_circuits.handbuilt.build_induction_model(V={V}, eliminate={eliminate})"
    return _weight_truths(name, build_induction_model(V, eliminate=eliminate), [list(range(1, V + 1))] * (2 * V - 1))


BIRTH_EDGES = frozenset(
    {
        # not "embed->L0H0.q"/"embed->L0H0.k": the previous-token attention (W_Q^1 = I, W_K^1 =
        # beta sum_t p_{t-1} p_t^T) reads positions only, the same in every resampled input, so under
        # resample ablation those edges carry nothing (as build_induction_model's L0H0.q/.k)
        "embed->L0H0.v",  # W_V^1 copies the token embedding ...
        "embed->L1H0.q",  # query = the current token's embedding (W_Q^2 = I)
        "L0H0->L1H0.k",  # ... whose image w_1(k) the induction key matches
        "embed->L1H0.v",  # the attended token's embedding
        "L1H0->logits",  # W_O^2 maps it to its unembedding
    }
)


def birth_ground_truth() -> GroundTruth:
    """The induction mechanism of ``perm_circuits.systems.birth_model.handbuilt_induction_model``.

    Bietti, Cabannes, Bouchacourt, Jegou, Bottou, "Birth of a Transformer: A Memory Viewpoint"
    (NeurIPS 2023), eq. 8: the trainable matrices are set to the associative memories of the
    previous-token head (``W_K^1``) and the induction head (``W_K^2`` reading ``w_1(k)``, ``W_O^2``
    copying to ``w_U``). Declared by construction (the 5 edges of :data:`BIRTH_EDGES`; the previous-token head's
    query and key read positions only, which resampling leaves unchanged); its frozen
    matrices are random and dense, so other edges carry small cross-talk that the mechanism does not
    use, and the claim is made for resample ablation only.
    """
    return GroundTruth(
        "perm_circuits.systems.birth_model.handbuilt_induction_model",
        BIRTH_EDGES,
        ("resample",),
        2,
        1,
        False,
        "declared from the construction (eq. 8 memories)",
    )


def _induction_entry(eliminate: bool):
    return build_induction_model(5, eliminate=eliminate), induction_ground_truths(5, eliminate=eliminate)


def _birth_entry():
    from perm_circuits.systems.birth_model import handbuilt_induction_model  # the seed-paper systems load on use

    return handbuilt_induction_model(), (birth_ground_truth(),)


def _tracr_entry(name: str):
    model = build_tracr_model(name)
    return model.bridge, tracr_ground_truths(model)


def ground_truth_models(*, include_tracr: bool | None = None) -> dict:
    """Every model with a ground truth: name -> a function returning ``(bridge, truths)``.

    ``induction`` and ``induction_bare`` (``build_induction_model(5)`` with and without the
    elimination head), ``birth`` (the Birth model's eq. 8 construction) and, when tracr imports
    (``include_tracr=None``) or on request, ``tracr:reverse``, ``tracr:frac_prevs``, ``tracr:sort``.
    Building is deferred: compiling a tracr program takes seconds.
    """
    if include_tracr is None:
        include_tracr = tracr_available()
    if not isinstance(include_tracr, bool):
        raise TypeError(f"include_tracr must be a bool or None, got {include_tracr!r}")
    out = {"induction": partial(_induction_entry, True), "induction_bare": partial(_induction_entry, False),
           "birth": _birth_entry}
    if include_tracr:
        out.update({f"tracr:{name}": partial(_tracr_entry, name) for name in TRACR_PROGRAMS})
    return out


@dataclass(frozen=True)
class FunctionalTruth:
    """A ground truth checked by intervention on one batch and ablation mode (:func:`functional_truth`).

    Attributes:
        edges: the functional truth: the structural truth less its idle edges.
        idle: structural truth edges whose ablation (from the functional truth, the rest ablated)
            changes the metric by less than ``eps`` of its total change on this batch: e.g. a query
            input that the selector ignores, or a length head on inputs of full length.
        effects: per edge of ``edges``, ``|metric(truth) - metric(truth without e)| / |metric(all) - metric(none)|``.
        faithfulness: the faithfulness of ``edges`` with every other edge ablated together.
        how: the ablation mode.
    """

    edges: frozenset
    idle: frozenset
    effects: dict
    faithfulness: float
    how: str

    @property
    def checked(self) -> bool:
        """Both properties hold: every edge changes the metric (``effects >= eps``, by construction) and
        the truth alone keeps faithfulness >= 0.99."""
        return self.faithfulness >= 0.99


def functional_truth(intervention, structural, *, eps: float = 1e-3) -> FunctionalTruth:
    """The functional truth on an intervention's batch and mode, from a structural truth, checked by intervention.

    Start from ``structural`` (e.g. :func:`tracr_ground_truths`' edges for the mode) with every other
    edge ablated; measure each kept edge's effect (its ablation from that circuit, relative to the
    metric's total change ``|metric(all) - metric(none)|``); drop the edge with the smallest effect
    when it is below ``eps``, and repeat until every kept edge's effect is at least ``eps``.
    Returns the edges, the dropped (idle) ones, the effects and the faithfulness of the result with
    every non-truth edge ablated together (:attr:`FunctionalTruth.checked`: >= 0.99).  With nothing
    to explain (:attr:`EdgeIntervention.nothing_to_explain`) the truth is empty, faithfulness 1.
    """
    from perm_circuits.checks import check_number
    from perm_circuits.discovery.interventions import EdgeIntervention

    if not isinstance(intervention, EdgeIntervention):
        raise TypeError(f"intervention must be an EdgeIntervention, got {type(intervention).__name__}")
    check_number("eps", eps, low=0)
    structural = frozenset(structural.edges if isinstance(structural, GroundTruth) else structural)
    ei, graph = intervention, intervention.graph
    bad = sorted(e for e in structural if e not in set(graph.edges))
    if bad:
        raise ValueError(f"edges {bad} are not edges of the intervention's graph")
    if ei.nothing_to_explain:
        return FunctionalTruth(frozenset(), structural, {}, 1.0, ei.how)
    span = abs(ei.full_metric - ei.empty_metric)
    keep = torch.zeros(ei.n_edges, device=ei.device)
    keep[[graph.edge_index(e) for e in structural]] = 1.0
    while True:
        kept = torch.nonzero(keep)[:, 0]
        trials = keep[None].repeat(len(kept) + 1, 1)
        trials[torch.arange(1, len(kept) + 1, device=kept.device), kept] = 0.0
        values = ei.evaluate(trials, chunk=16).double()
        effects = (values[1:] - values[0]).abs() / span
        if not len(kept) or float(effects.min()) >= eps:
            break
        keep[kept[int(torch.argmin(effects))]] = 0.0
    edges = graph.edges_of(keep.tolist())
    faith = float(ei.faithfulness(values[:1])[0])
    return FunctionalTruth(edges, structural - edges, {graph.edges[int(e)]: float(v) for e, v in zip(kept, effects)},
                           faith, ei.how)


@dataclass(frozen=True)
class TracrProgram:
    """A user's RASP program, compiled (:func:`tracr_program`): the model, its ground truths and a batch.

    ``truths`` maps each ablation mode of :data:`ABLATION_MODES` to its structural
    :class:`GroundTruth` (:func:`tracr_ground_truths`); ``batch`` is every input of the requested
    lengths, by default of length ``max_seq_len``
    (:meth:`~perm_circuits.discovery.tracr_models.TracrModel.batch`; several lengths: right-padded,
    :mod:`~perm_circuits.discovery.padding`).
    :func:`functional_truth` checks a truth on it by intervention.
    """

    model: object
    truths: dict
    batch: object

    @property
    def bridge(self):
        return self.model.bridge


def tracr_program(program, vocab, max_seq_len: int, *, name: str | None = None, output_label: str | None = None,
                  distinct_tokens: bool = False, lengths=None) -> TracrProgram:
    """Any RASP program in one call: compiled with tracr, loaded as a bridge, with its ground truths per
    ablation mode and its benchmark batch (arguments: :func:`~perm_circuits.discovery.tracr_models.compile_tracr`;
    ``lengths``: the batch's input length, or several lengths in one padded batch, e.g.
    ``range(1, max_seq_len + 1)`` for the whole domain; default ``max_seq_len``)."""
    from perm_circuits.discovery.tracr_models import compile_tracr

    model = compile_tracr(program, vocab, max_seq_len, name=name, output_label=output_label,
                          distinct_tokens=distinct_tokens)
    batch = model.batch(lengths)
    zero, resample = tracr_ground_truths(model, mixed_lengths="lengths" in batch.extras)
    return TracrProgram(model, {"zero": zero, "mean": resample, "resample": resample}, batch)
