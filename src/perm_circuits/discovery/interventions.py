"""Edge-level interventions: run a model with any set of edges of its :class:`EdgeGraph` ablated.

A mask gives every edge a weight ``m`` (1 keep, 0 ablate; values in between are allowed, so
gradients flow to the mask).  Each receiver ``R`` reads

    ``input_R = biases + sum over senders S upstream of R of  m_SR * out_S + (1 - m_SR) * abl_S``

where ``out_S`` is the sender's output *in this run* (it changes when edges upstream of ``S`` are
ablated) and ``abl_S`` its ablated value.  This is path patching (Wang et al. 2022, IOI) applied to
every edge at once, as in ACDC (Conmy et al. 2023) and auto-circuit: the receiver's LayerNorm is
recomputed on its own modified residual stream (never frozen), which is exact: with every edge
kept the run is the model's, and with every edge ablated in ``"resample"`` mode it is the
corrupted run (both checked by the tests to 1e-5).

Ablated values ``abl_S`` per mode (``how``):

- ``"zero"``: 0;
- ``"mean"``: the sender's output averaged over a reference batch (per position);
- ``"resample"``: the sender's output on a corrupted batch, row-paired with the clean one (by
  default the clean batch with its rows permuted by a seeded permutation);
- ``"optimal"``: a constant per sender (per position) that maximises the metric when all of the
  sender's edges are ablated to it (Li & Janson 2024, "Optimal ablation for interpretability"):
  initialised at the mean, then ``optimal_steps`` L-BFGS iterations on the constant alone, as
  :mod:`perm_circuits.analysis.interventions.optimal` does for whole components.

Hooks and a batched run: :func:`~perm_circuits.discovery.edge_hooks.edge_hooks` builds the TL
hook list that runs one mask on the bridge (its module docstring names the hooks).  Discovery,
though, evaluates thousands of masks (the exhaustive oracle: every subset of 13 edges), batched
several at a time and differentiated, so :meth:`EdgeIntervention.run` computes the same run in
plain PyTorch on the bridge's own weights (``W_Q`` ... ``W_U``, the norms' parameters), as
:func:`perm_circuits.models.fast_forward` does for training, with a leading mask dimension.  The
tests check it against the hooked bridge for random hard and soft masks, and
:func:`prepare_edges` checks on the given tokens that it reproduces ``model(tokens)`` (to 1e-4)
and raises otherwise, so an unsupported architecture fails loudly instead of giving inexact
edges.  Supported: standard positional embeddings, normalisation ``LN``, ``LNPre``, ``RMS``,
``RMSPre`` or none, sequential attention and MLP, causal or bidirectional attention, activations
relu / gelu / gelu_new / silu.

The metric (higher is better) is by default the mean log-probability of the target token at the
task's loss positions (``TaskBatch.mask``); any metric of the library's convention
(:mod:`perm_circuits.metric`: ``metric(logits [batch, seq, vocab], batch) -> [batch]``, one number
per row, ``batch`` the clean batch as given) may replace it, and a run's metric is its mean over
rows.  It is checked once on the clean run's logits, before any other run.  Faithfulness of a mask is ``(metric(mask) - metric(none)) / (metric(all) -
metric(none))``: 1 for the full model, 0 for the model with every edge ablated (ACDC's and
auto-circuit's normalisation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from perm_circuits.ablation_modes import modes
from perm_circuits.checks import check_int, check_seed
from perm_circuits.devices import model_device
from perm_circuits.discovery import padding
from perm_circuits.metric import (bind_metric, check_rows, kl_to_full, metric_rows, pooled_target_logprob,
                                  reduce_rows)
from perm_circuits.discovery.graph import EdgeGraph, circuit_graph_of, head_of
from perm_circuits.models import ACTIVATIONS
from perm_circuits.optimal_solver import OPTIMAL_STEPS, lbfgs_constant
from perm_circuits.tasks.base import TaskBatch

__all__ = ["HOWS", "EdgeIntervention", "Metric", "prepare_edges", "target_logprob_metric"]

HOWS = modes("edges")  # the edge interventions' ablation modes (perm_circuits.ablation_modes)
Metric = Callable[[Tensor], Tensor]
_GELU_TANH = partial(torch.nn.functional.gelu, approximate="tanh")
_ACTS = {**ACTIVATIONS, "gelu_fast": _GELU_TANH, "gelu_pytorch_tanh": _GELU_TANH}


target_logprob_metric = pooled_target_logprob
"""Edge discovery's default metric: :func:`perm_circuits.metric.pooled_target_logprob` (the mean
log-probability of ``batch.targets`` where ``batch.mask`` > 0, over the whole batch; takes logits
``[..., batch, seq, vocab]`` and returns one number per leading index, a scalar for one run)."""


class _Weights:
    """The bridge's weights, detached, and the pieces of its forward pass."""

    def __init__(self, model) -> None:
        cfg = getattr(model, "cfg", None)
        missing = [name for name in ("normalization_type", "n_layers", "n_heads") if not hasattr(cfg, name)]
        if missing:
            raise ValueError(f"edge interventions need a TransformerLens model config; {type(model).__name__}'s cfg "
                             f"has no {missing}")
        if getattr(cfg, "positional_embedding_type", "standard") != "standard":
            raise ValueError("edge interventions need standard positional embeddings, got "
                             f"{cfg.positional_embedding_type!r}")
        if getattr(cfg, "parallel_attn_mlp", False):
            raise ValueError("edge interventions do not support parallel attention and MLP blocks")
        if getattr(cfg, "gated_mlp", False):
            raise ValueError("edge interventions do not support gated MLPs (gated_mlp=True)")
        n_kv = getattr(cfg, "n_key_value_heads", None)
        if isinstance(n_kv, int) and n_kv != cfg.n_heads:
            raise ValueError(f"edge interventions need a key and value per head; grouped-query attention "
                             f"(n_key_value_heads={n_kv}, n_heads={cfg.n_heads}) is not supported")
        self.norm_type = cfg.normalization_type
        if self.norm_type not in (None, "LN", "LNPre", "RMS", "RMSPre"):
            raise ValueError(f"unsupported normalization_type {self.norm_type!r}")
        self.n_layers, self.n_heads = int(cfg.n_layers), int(cfg.n_heads)
        self.has_mlp = not bool(getattr(cfg, "attn_only", False))
        self.eps = float(getattr(cfg, "eps", 1e-5))
        self.causal = getattr(cfg, "attention_dir", "causal") != "bidirectional"
        d_head = int(cfg.d_head)
        scale = float(getattr(cfg, "attn_scale", -1.0))
        use_scale = getattr(cfg, "use_attn_scale", True)
        self.scale = (1.0 / (scale if scale > 0 else math.sqrt(d_head))) if use_scale else 1.0
        if self.has_mlp:
            act = getattr(cfg, "act_fn", "relu")
            if act not in _ACTS:
                raise ValueError(f"unsupported act_fn {act!r}; supported: {sorted(_ACTS)}")
            self.act = _ACTS[act]
        get = lambda name: getattr(model, name).detach().clone()
        self.W_E, self.W_pos = get("W_E"), get("W_pos")
        self.W_Q, self.W_K, self.W_V, self.W_O = get("W_Q"), get("W_K"), get("W_V"), get("W_O")
        self.b_Q, self.b_K, self.b_V, self.b_O = get("b_Q"), get("b_K"), get("b_V"), get("b_O")
        if self.has_mlp:
            self.W_in, self.b_in, self.W_out, self.b_out = get("W_in"), get("b_in"), get("W_out"), get("b_out")
        self.W_U, self.b_U = get("W_U"), get("b_U")
        sd = model.state_dict()
        param = lambda key: None if sd.get(key) is None else sd[key].detach().clone()
        self.norms = {name: (param(f"{name}.weight"), param(f"{name}.bias"))
                      for name in [f"blocks.{l}.ln{i}" for l in range(self.n_layers) for i in (1, 2)] + ["ln_final"]}

    def norm(self, x: Tensor, name: str) -> Tensor:
        kind = self.norm_type
        if kind is None:
            return x
        weight, bias = self.norms[name] if kind in ("LN", "RMS") else (None, None)
        if kind.startswith("LN"):
            return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, self.eps)
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return out if weight is None else out * weight


@dataclass(frozen=True)
class EdgeIntervention:
    """A model, a batch and the ablated value of every sender, ready to run any edge mask.

    Build it with :func:`prepare_edges`.  ``clean[s]`` / ``ablated[s]`` are sender ``s``'s output
    on the clean run and its ablated value (``[batch or 1, seq, d_model]``); ``full_metric`` /
    ``empty_metric`` the metric with every edge kept / ablated.
    """

    graph: EdgeGraph
    how: str
    tokens: Int[Tensor, "batch seq"]
    metric: Metric
    weights: _Weights
    clean: dict[str, Tensor]
    ablated: dict[str, Tensor]
    full_metric: float
    empty_metric: float
    vectorised_metric: bool
    loss_mask: Float[Tensor, "batch seq"] | None = None
    key_mask: Bool[Tensor, "batch seq"] | None = None  # mixed lengths: each row's real positions (padding.py)

    @property
    def n_edges(self) -> int:
        return self.graph.n_edges

    @property
    def device(self) -> torch.device:
        """The model's device: its weights, the batch and every mask live there."""
        return self.weights.W_E.device

    # ------------------------------------------------------------------ the forward pass

    def run(self, mask: Float[Tensor, "*masks edge"], *,
            retain: dict[str, Tensor] | None = None) -> Float[Tensor, "*masks batch seq vocab"]:
        """Logits with each edge weighted by ``mask`` (module docstring); one run per mask row.

        ``retain``: a dict filled with every sender's output (``"out:S"``) and receiver's input
        (``"in:R"``), gradients retained, for attribution methods.
        """
        if not isinstance(mask, Tensor) or mask.shape[-1] != self.n_edges or mask.dim() not in (1, 2):
            raise ValueError(f"mask must be a tensor [edges] or [masks, edges] with {self.n_edges} edges, got "
                             f"{getattr(mask, 'shape', type(mask).__name__)}")
        single = mask.dim() == 1
        logits = self._forward((mask[None] if single else mask).to(self.device, self.weights.W_E.dtype), self.tokens,
                               self.ablated, retain)
        return logits[0] if single else logits

    def _forward(self, mask: Tensor, tokens: Tensor, ablated: dict[str, Tensor], retain: dict | None,
                 record: dict | None = None, dedupe: bool = False) -> Tensor:
        """The run of every mask row.  ``dedupe`` (no gradients): each component is computed once
        per distinct setting of the edges that can reach it (its cone), and shared by the rows
        that agree there (the exhaustive oracle's memoisation)."""
        w, graph = self.weights, self.graph
        n_masks, (batch, seq) = mask.shape[0], tokens.shape
        every = torch.arange(n_masks, device=mask.device)
        # sender -> (output minus its ablated value, row index into it per mask or None = as is)
        diffs: dict[str, tuple[Tensor, Tensor | None]] = {}
        tok, pos = w.W_E[tokens], w.W_pos[:seq][None].expand(batch, seq, -1)
        embeds = {"tok_embed": tok, "pos_embed": pos} if graph.split_embed else {"embed": tok + pos}
        for sender, value in embeds.items():
            if record is not None:
                record[sender] = value[None]
            diffs[sender] = ((value - ablated[sender])[None], None)
        base = sum(ablated[s] for s in embeds)  # every ablated sender so far, [batch or 1, seq, d]
        bias = torch.zeros(w.W_E.shape[1], dtype=w.W_E.dtype, device=w.W_E.device)
        incoming, cones = graph.senders_into(), _cones(graph)
        attend = _attention(self.key_mask, seq, w.causal)

        def rows(component: str) -> tuple[Tensor, Tensor | None]:
            """Representative mask rows of the component's distinct cone settings, and each row's one."""
            if not dedupe:
                return every, None
            cols = cones[component]
            if not cols:
                return every[:1], torch.zeros(n_masks, dtype=torch.long, device=mask.device)
            unique, inverse = torch.unique(mask[:, cols], dim=0, return_inverse=True)
            rep = torch.full((len(unique),), n_masks, device=mask.device)
            rep = rep.scatter_reduce_(0, inverse, every, reduce="amin")
            return rep, inverse

        def read(receiver: str, rep: Tensor) -> Tensor:
            x = None
            start = base + bias
            grad = mask.requires_grad or any(diffs[s][0].requires_grad for s, _ in incoming[receiver])
            for sender, e in incoming[receiver]:
                diff, index = diffs[sender]
                if index is not None:
                    diff = diff[index[rep]]
                elif diff.shape[0] > 1 and dedupe:
                    diff = diff[rep]
                weight = mask[rep, e, None, None, None]
                if x is None:
                    x = torch.addcmul(start, weight, diff).expand(len(rep), batch, seq, -1)
                    x = x.clone() if x.data_ptr() == start.data_ptr() or x.stride(0) == 0 else x
                elif grad:
                    x = x.addcmul(weight, diff)
                else:
                    x.addcmul_(weight, diff)
            if retain is not None and x.requires_grad:
                x.retain_grad()
                retain[f"in:{receiver}"] = x
            return x

        def emit(sender: str, value: Tensor, index: Tensor | None) -> None:
            if record is not None:
                record[sender] = value.detach()
            if retain is not None and value.requires_grad:
                value.retain_grad()
                retain[f"out:{sender}"] = value
            diffs[sender] = (value - ablated[sender], index)

        for layer in range(w.n_layers):
            ln1 = f"blocks.{layer}.ln1"
            heads = []
            for h in range(w.n_heads):
                name = f"L{layer}H{h}"
                rep, index = rows(name)
                q = w.norm(read(f"{name}.q", rep), ln1) @ w.W_Q[layer, h] + w.b_Q[layer, h]
                k = w.norm(read(f"{name}.k", rep), ln1) @ w.W_K[layer, h] + w.b_K[layer, h]
                v = w.norm(read(f"{name}.v", rep), ln1) @ w.W_V[layer, h] + w.b_V[layer, h]
                z = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=w.scale, **attend)
                heads.append((name, z @ w.W_O[layer, h], index))
            for name, value, index in heads:
                emit(name, value, index)
                base = base + ablated[name]
            bias = bias + w.b_O[layer]
            if w.has_mlp:
                name = f"L{layer}MLP"
                rep, index = rows(name)
                hidden = w.act(w.norm(read(name, rep), f"blocks.{layer}.ln2") @ w.W_in[layer] + w.b_in[layer])
                emit(name, hidden @ w.W_out[layer], index)
                base = base + ablated[name]
                bias = bias + w.b_out[layer]
        rep, index = rows("logits")
        logits = w.norm(read("logits", rep), "ln_final") @ w.W_U + w.b_U
        return logits if index is None else logits[index]

    # ------------------------------------------------------------------ metrics

    def metric_of(self, logits: Float[Tensor, "masks batch seq vocab"]) -> Float[Tensor, " masks"]:
        """The metric of each mask's run."""
        if self.vectorised_metric:
            return self.metric(logits).reshape(logits.shape[0])
        return torch.stack([self.metric(one).reshape(()) for one in logits])

    def evaluate(self, masks: Float[Tensor, "masks edge"], *, chunk: int = 64,
                 dedupe: bool = False) -> Float[Tensor, " masks"]:
        """The metric of every mask row, without gradients, ``chunk`` masks per batched forward.

        ``dedupe``: compute each component once per distinct setting of its cone's edges.
        """
        out = []
        with torch.no_grad():
            for start in range(0, masks.shape[0], chunk):
                part = masks[start : start + chunk].to(self.device, self.weights.W_E.dtype)
                out.append(self.metric_of(self._forward(part, self.tokens, self.ablated, None, None, dedupe)))
        return torch.cat(out) if out else torch.zeros(0, device=self.device)

    def faithfulness(self, metric_values: Tensor) -> Tensor:
        """``(metric - metric(none)) / (metric(all) - metric(none))`` (nan when the two are equal, up to
        float rounding: within ``1e-6`` or ``1e-5`` of their size, e.g. a metric averaged over rows under
        the default resample corruption, which only permutes the rows)."""
        if self.nothing_to_explain:
            return torch.full_like(metric_values, math.nan)
        return (metric_values - self.empty_metric) / (self.full_metric - self.empty_metric)

    @property
    def nothing_to_explain(self) -> bool:
        """Whether the full and the fully ablated model have the same metric (up to the float rounding
        of :meth:`faithfulness`): under this mode and batch no edge has anything to explain, and every
        discovery method returns the empty circuit (:func:`~perm_circuits.discovery.result.explains`)."""
        span = self.full_metric - self.empty_metric
        return abs(span) <= max(1e-6, 1e-5 * max(abs(self.full_metric), abs(self.empty_metric)))

    def ones(self) -> Tensor:
        return torch.ones(self.n_edges, dtype=self.weights.W_E.dtype, device=self.device)

    def divergence(self, masks: Float[Tensor, "masks edge"], full_logits: Tensor, *, chunk: int = 16) -> Tensor:
        """KL(full model || masked run) per mask, averaged over the loss positions (every position
        when the batch had no loss mask): ACDC's criterion."""
        kl = kl_to_full(full_logits, self.loss_mask)  # every position when the batch had no loss mask
        out = []
        with torch.no_grad():
            for start in range(0, masks.shape[0], chunk):
                part = masks[start : start + chunk].to(self.device, self.weights.W_E.dtype)
                out.append(kl(self.run(part)))
        return torch.cat(out)


def _attention(keys: Tensor | None, seq: int, causal: bool) -> dict:
    """The attention mask arguments: causal or not and, for mixed lengths, no key beyond a row's length."""
    if keys is None:
        return {"is_causal": causal}
    allowed = keys[:, None, :]  # [batch, query, key]
    if causal:
        allowed = allowed & torch.ones(seq, seq, dtype=torch.bool, device=keys.device).tril()
    return {"attn_mask": allowed}


def _cones(graph: EdgeGraph) -> dict[str, list[int]]:
    """Per component (head, MLP, logits): the edges whose mask can change its output."""
    cones: dict[str, set[int]] = {s: set() for s in graph.senders}
    for receiver, incoming in graph.senders_into().items():
        cone = cones.setdefault(head_of(receiver), set())
        for sender, e in incoming:
            cone |= {e} | cones[sender]
    return {c: sorted(v) for c, v in cones.items()}


def _as_tokens(value, name: str, like: Tensor | None = None) -> Tensor:
    tokens = value.tokens if isinstance(value, TaskBatch) else value
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype.is_floating_point:
        raise TypeError(f"{name} must be a TaskBatch or integer tokens [batch, seq], got {type(value).__name__}")
    if like is not None and tokens.shape[1] != like.shape[1]:
        raise ValueError(f"{name} must have {like.shape[1]} positions like the clean tokens, got {tokens.shape[1]}")
    return tokens


def _check_embeddable(tokens: Tensor, name: str, weights: _Weights) -> None:
    """``tokens`` non-empty, no longer than the model's context and with ids its embedding has."""
    vocab, n_ctx = weights.W_E.shape[0], weights.W_pos.shape[0]
    if tokens.numel() == 0:
        raise ValueError(f"{name} must hold at least one token, got shape {tuple(tokens.shape)}")
    if tokens.shape[1] > n_ctx:
        raise ValueError(f"{name} has {tokens.shape[1]} positions but the model's context is n_ctx={n_ctx}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"{name} token ids must be in [0, {vocab}) (the model's vocabulary), got values {low}..{high}")


def prepare_edges(
    model,
    batch: TaskBatch | Tensor,
    *,
    how: str = "resample",
    metric: Metric | None = None,
    corrupted: TaskBatch | Tensor | None = None,
    reference: TaskBatch | Tensor | None = None,
    split_embed: bool = False,
    seed: int = 0,
    optimal_steps: int = OPTIMAL_STEPS,
    check: bool = True,
) -> EdgeIntervention:
    """Everything an edge-level run needs: the graph, the clean and ablated sender outputs, the metric.

    Args:
        model: a TransformerLens 4 model (module docstring lists the supported architectures).
        batch: the clean batch, a :class:`TaskBatch` (whose targets and mask give the default
            metric) or tokens ``[batch, seq]`` (then ``metric`` is required).
        how: ``"zero"``, ``"mean"``, ``"resample"`` or ``"optimal"`` (module docstring).
        metric: ``metric(logits [batch, seq, vocab], batch) -> [batch]``, higher is better, reduced
            by the mean over rows (:mod:`perm_circuits.metric`); default :func:`target_logprob_metric`
            of ``batch``.
        corrupted: the resample source, row-paired with ``batch`` (same shape); default ``batch``
            with its rows permuted (a generator seeded with ``seed``).
        reference: the batch the mean (and the optimal constant's start) is taken over; default
            ``batch``.
        split_embed: token and positional embeddings as two senders.
        optimal_steps: L-BFGS iterations of the optimal constant.
        check: compare the edge forward with ``model(tokens)`` first (RuntimeError when they differ).

    Mixed input lengths (:mod:`~perm_circuits.discovery.padding`): a :class:`TaskBatch` right-padded
    to one width with each row's real positions in ``extras["lengths"]``; every run (clean,
    resample source, mean reference) reads only its own rows' real positions, and the check compares
    each length's rows with the model run unpadded.
    """
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    device = model_device(model)
    if isinstance(batch, TaskBatch):
        batch = batch.to(device)  # once: the metric's targets meet the logits on the model's device
    tokens = _as_tokens(batch, "batch").to(device)
    vectorised = metric is None  # the default metric scores every mask of a batched run at once
    rows = None
    if vectorised:
        if not isinstance(batch, TaskBatch):
            raise ValueError("metric is required when batch is a tokens tensor (no targets to score): pass "
                             "metric(logits, batch) -> [batch]")
        metric = target_logprob_metric(batch)
    else:
        rows = bind_metric(metric, batch if isinstance(batch, TaskBatch) else tokens)  # bind_metric checks it
        n_rows = tokens.shape[0]
        metric = lambda logits: reduce_rows(check_rows(rows(logits), n_rows, finite=False))  # noqa: E731
    check_seed(seed)
    check_int("optimal_steps", optimal_steps, low=1)
    graph = circuit_graph_of(model, split_embed=split_embed)
    weights = _Weights(model)
    _check_embeddable(tokens, "batch", weights)
    padded = any(padding.batch_lengths(b) is not None for b in (batch, corrupted, reference))
    keys = padding.keys_of(batch, tokens) if padded else None
    corrupted_keys = None
    corrupted_tokens = None
    if how == "resample":
        if corrupted is None:
            if tokens.shape[0] < 2:
                raise ValueError("resample ablation without corrupted= needs a batch of at least 2 rows (one row "
                                 "would be its own resample source: nothing ablated); got 1 row")
            order = torch.randperm(tokens.shape[0], generator=torch.Generator().manual_seed(seed)).to(device)
            corrupted_tokens = tokens[order]
            corrupted_keys = None if keys is None else keys[order]
        else:
            corrupted_tokens = _as_tokens(corrupted, "corrupted", tokens).to(device)
            if corrupted_tokens.shape != tokens.shape:
                raise ValueError(f"corrupted must be row-paired with batch: shape {tuple(tokens.shape)}, got "
                                 f"{tuple(corrupted_tokens.shape)}")
            _check_embeddable(corrupted_tokens, "corrupted", weights)
            corrupted_keys = padding.keys_of(corrupted, corrupted_tokens) if padded else None
    reference_tokens = tokens  # checked above
    if reference is not None:
        reference_tokens = _as_tokens(reference, "reference", tokens).to(device)
        _check_embeddable(reference_tokens, "reference", weights)

    zeros = {s: torch.zeros(1, tokens.shape[1], weights.W_E.shape[1], dtype=weights.W_E.dtype, device=device)
             for s in graph.senders}
    probe = EdgeIntervention(graph, how, tokens, metric, weights, {}, zeros, math.nan, math.nan, vectorised,
                             key_mask=keys)
    with torch.no_grad():
        logits, clean = _capture(probe, tokens)
        if rows is not None:  # a wrong metric is refused on the clean run, before any other
            metric_rows(rows, logits, tokens.shape[0])
        if check and padding.batch_lengths(batch) is not None:
            padding.check_per_length(model, tokens, padding.batch_lengths(batch), logits)
        elif check:
            expected = model(tokens[:256])
            if not torch.allclose(logits[:256], expected.to(logits.dtype), atol=1e-4, rtol=1e-4):
                raise RuntimeError("the edge forward does not reproduce model(tokens) for this architecture "
                                   f"(max difference {float((logits[:256] - expected).abs().max()):.2e}); edge "
                                   "interventions would be inexact")
        if how == "zero":
            ablated = zeros
        elif how == "resample":
            ablated = _capture(replace(probe, key_mask=corrupted_keys), corrupted_tokens)[1]
        else:
            source = batch if reference is None else reference
            reference_keys = padding.keys_of(source, reference_tokens) if padded else None
            ablated = {s: v.mean(0, keepdim=True)
                       for s, v in _capture(replace(probe, key_mask=reference_keys), reference_tokens)[1].items()}
    if how == "optimal":
        ablated = _optimal(probe, ablated, optimal_steps)
    done = replace(probe, clean=clean, ablated=ablated)
    values = done.evaluate(torch.stack([done.ones(), torch.zeros(graph.n_edges, device=device)]))
    return replace(done, full_metric=float(values[0]), empty_metric=float(values[1]),
                   loss_mask=batch.mask.float() if isinstance(batch, TaskBatch) else None)


def _capture(probe: EdgeIntervention, tokens: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """The logits and every sender's output ([batch, seq, d]) on ``tokens`` with every edge kept."""
    record: dict[str, Tensor] = {}
    logits = probe._forward(probe.ones()[None], tokens, probe.ablated, None, record)
    return logits[0], {sender: value[0] for sender, value in record.items()}


def _optimal(probe: EdgeIntervention, start: dict[str, Tensor], steps: int) -> dict[str, Tensor]:
    """Per sender, the constant that maximises the metric with all of its edges ablated to it (the
    library's one solver, :func:`~perm_circuits.optimal_solver.lbfgs_constant`, on the edge forward;
    the senders in order, each fitted with the earlier ones' constants in place)."""
    graph = probe.graph
    result = dict(start)
    for sender in graph.senders:
        mask = torch.ones(graph.n_edges, device=probe.device)
        mask[list(graph.outgoing(sender))] = 0.0

        def loss_of(constant: Tensor, sender: str = sender, mask: Tensor = mask) -> Tensor:
            values = {**result, sender: constant}
            return -probe.metric_of(probe._forward(mask[None], probe.tokens, values, None))[0]

        # the edge forward reads detached copies of the weights: no model parameter to freeze
        result[sender] = lbfgs_constant(None, loss_of, start[sender], steps)
    return result
