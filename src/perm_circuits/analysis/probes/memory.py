"""Memory-recall probes (Bietti et al. 2023, "Birth of a Transformer: A Memory Viewpoint", eq. 9).

A weight matrix ``W_hat`` stores an associative memory ``W* = sum_{(i,j) in M} v_j u_i^T`` when,
for every stored pair, the input embedding ``u_i`` is mapped closest to its output embedding
``v_j``.  The recall metric ::

    R(W_hat, W*) = 1/|M| sum_{(i,j) in M} 1{ argmax_j' v_j'^T W_hat u_i = j }

is the fraction of stored pairs that the matrix retrieves; the *argmin* variant scores a
suppressing memory (each input pushes its target down the most).

Conventions (all functions in this module):

* Matrices follow TransformerLens' row-vector convention ``x @ W``: ``W_hat`` is ``[d_in, d_out]``
  and ``scores[i, j'] = u_i @ W_hat @ v_j'`` (the paper's ``v_j'^T W_hat u_i``, transposed).
* Ties count as failures: a pair is recalled only if its target's score is *strictly* above every
  other candidate's, so an all-zero matrix has R = 0.
* ``allowed`` restricts the candidates ``j'`` per input (e.g. causal attention: no future keys).
* ``layer``, ``head`` and ``position`` follow the package's index rule (negative values count from
  the end; :mod:`perm_circuits.analysis.interventions.checks`); labels show the normalised indices.

The concrete probes read one layer's weights only (no forward pass, no ``hooks``).  Their inputs
are the token (and position) embeddings through that layer's own ``ln1`` / ``ln2``: exactly what
layer 0 reads.  **In a later layer** the residual stream also holds what earlier layers wrote, so
R there measures the memory on the *direct path* from the embeddings (e.g. does layer 1's OV
circuit copy the token it attends to), with the LayerNorm scale of the embedding alone; an
induction head's key reads the previous-token head's output, which these probes do not see (the
K-composition scores of :mod:`~perm_circuits.analysis.circuits.composition` measure that path).
``inputs=`` of :func:`mlp_memory_probe` / :func:`qk_scores` probes any other residual vectors.

* **OV** of head ``h`` (:func:`ov_memory_probe`): inputs ``ln1(W_E[t] + W_pos[p])`` for the value
  tokens ``t = 1..V`` (the full LayerNorm; ``position=None`` drops ``W_pos``), matrix
  ``W_V[h] @ W_O[h]``, outputs the :func:`effective_unembed` of the value tokens.  Target
  ``t -> t``: ``argmax`` = a copying / binding head, ``argmin`` = a suppressing / elimination head.
  Biases (``b_V @ W_O``, ``b_O``) are left out: they add the same vector whatever the head attends
  to, not an association.
* **QK** of head ``h`` (:func:`qk_memory_probe`), maps over the attention score
  ``ln1(query) W_Q[h] W_K[h]^T ln1(key)^T`` (``include_bias`` adds ``b_Q``/``b_K``):

  - ``"x_match"``: query ``ln1(W_E[t] + W_pos[2V-2])`` (the last query) against keys
    ``ln1(W_E[t'] + W_pos[0])`` (the x1 slot), target ``t -> t``: does a query prefer the earlier
    x carrying the *same token* (the repeat detector)?
  - ``"prev_y"``: query positions ``2, 4, .., 2V-2`` (x slots) against key positions ``0..q``
    (causal), target ``q -> q-1``: does an x attend to the y just before it (the study's "local
    (x, y) binding")?
  - ``"self_y"``: query positions ``1, 3, .., 2V-3`` (y slots), keys ``0..q``, target ``q -> q``:
    does a y attend to itself?
  - ``"last_to_y1"``: the last query position ``2V-2`` for each query token ``t``, keys ``0..2V-2``
    token-averaged, target position 1 (y1): the positional shortcut for recall of ``x5 = x1``.

  The positional maps average the key tokens (a bilinear form: the score against the token-mean
  key), ``prev_y`` and ``self_y`` the query tokens too.

* **MLP** (:func:`mlp_memory_probe`): ``W_E[t] (+ W_pos[p])`` through ``ln2``, the MLP (``b_in``
  included: it sits inside the nonlinearity; ``b_out`` left out as a constant) and the effective
  unembedding; target ``t -> t`` (argmax: the MLP re-emits a token it reads; argmin: it
  suppresses it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import pandas as pd
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from perm_circuits.analysis.interventions.checks import (
    check_head, check_index, check_int, check_layer, check_positive_int,
)
from perm_circuits.circuit import Node
from perm_circuits.model_shape import normalization_of
from perm_circuits.tasks.base import model_task
from perm_circuits.models import ACTIVATIONS, model_config_of

__all__ = [
    "QK_MAPS",
    "MemoryProbe",
    "MemoryProbeTracker",
    "MemoryProbes",
    "apply_norm",
    "check_layer",
    "effective_unembed",
    "identity_map",
    "memory_probe_tracker",
    "memory_recall",
    "mlp_memory_probe",
    "mlp_scores",
    "model_memory_probes",
    "ov_memory_probe",
    "ov_scores",
    "qk_memory_probe",
    "qk_scores",
    "recall_rate",
    "recall_scores",
]

MODES = ("argmax", "argmin")
QK_MAPS = ("x_match", "prev_y", "self_y", "last_to_y1")


def identity_map(n: int, *, device: torch.device | str | None = None) -> Int[Tensor, "n 2"]:
    """The target map ``{(i, i)}`` for ``i = 0..n-1`` (a copying memory), on ``device`` (default the CPU)."""
    return _identity_map(check_positive_int("n", n), device)


def _identity_map(n: int, device: torch.device | str | None) -> Int[Tensor, "n 2"]:
    index = torch.arange(n, device=device)
    return torch.stack([index, index], dim=1)


def _check_matrix(x: object, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} has non-finite values")
    return x


def _check_residual(model, x: object, name: str) -> Tensor:
    """``x`` as residual vectors ``[n, d_model]`` of ``model``."""
    d_model = model_config_of(model).d_model
    if _check_matrix(x, name).shape[1] != d_model:
        raise ValueError(f"{name} must be [n, d_model={d_model}], got {tuple(x.shape)}")
    return x


def _check_mode(mode: object) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return str(mode)


def _check_targets(targets: object, n_in: int, n_out: int, device: torch.device | None = None) -> Tensor:
    if isinstance(targets, Tensor):
        if targets.dtype.is_floating_point or targets.dtype == torch.bool:
            raise TypeError(f"targets must be an integer tensor of (input, output) pairs, got {targets.dtype}")
        pairs = targets.long().to(device)  # onto the scores' device (a no-op when they agree)
    elif isinstance(targets, (list, tuple)):
        for k, pair in enumerate(targets):
            is_pair = isinstance(pair, (tuple, list)) and len(pair) == 2
            if not (is_pair and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)):
                raise TypeError(f"targets[{k}] must be an (input, output) pair of ints, got {pair!r}")
        pairs = torch.tensor(list(targets), dtype=torch.long, device=device).reshape(-1, 2)
    else:
        raise TypeError(f"targets must be an [m, 2] integer tensor or a list of pairs, got {type(targets).__name__}")
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"targets must have shape [m, 2], got {tuple(pairs.shape)}")
    if len(pairs) == 0:
        raise ValueError("targets is empty: the target map M needs at least one (input, output) pair")
    for column, (name, bound) in enumerate((("input", n_in), ("output", n_out))):
        bad = (pairs[:, column] < 0) | (pairs[:, column] >= bound)
        if bad.any():
            raise ValueError(f"targets has {name} index {int(pairs[bad][0, column])} outside [0, {bound - 1}]")
    return pairs


def recall_rate(
    scores: Float[Tensor, "n_in n_out"],
    targets: Int[Tensor, "m 2"] | Sequence[tuple[int, int]],
    mode: str = "argmax",
    allowed: Bool[Tensor, "n_in n_out"] | None = None,
) -> float:
    """R: the fraction of target pairs ``(i, j)`` whose ``scores[i]`` peak strictly at ``j`` (``"argmin"``:
    the strict minimum) among the candidates ``allowed`` (every target must be allowed)."""
    _check_matrix(scores, "scores")
    mode = _check_mode(mode)
    pairs = _check_targets(targets, *scores.shape, device=scores.device)
    if allowed is not None:
        if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool:
            raise TypeError("allowed must be a bool tensor")
        if allowed.shape != scores.shape:
            raise ValueError(f"allowed has shape {tuple(allowed.shape)}, scores {tuple(scores.shape)}")
        if not allowed[pairs[:, 0], pairs[:, 1]].all():
            raise ValueError("a target pair is masked out by allowed")
    return _recall_rate(scores, pairs, mode, allowed)


def _recall_rate(scores: Float[Tensor, "n_in n_out"], pairs: Int[Tensor, "m 2"], mode: str,
                 allowed: Bool[Tensor, "n_in n_out"] | None = None) -> float:
    """:func:`recall_rate` of checked ``scores``, ``pairs``, ``mode`` and ``allowed`` (the probes' own maps)."""
    signed = scores if mode == "argmax" else -scores
    rows = signed[pairs[:, 0]]
    if allowed is not None:
        rows = rows.masked_fill(~allowed[pairs[:, 0]], -torch.inf)
    target = rows.gather(1, pairs[:, 1:2])[:, 0]
    others = rows.scatter(1, pairs[:, 1:2], -torch.inf).max(dim=1).values
    return float((target > others).double().mean())


def recall_scores(
    W_hat: Float[Tensor, "d_in d_out"],
    inputs: Float[Tensor, "n_in d_in"],
    outputs: Float[Tensor, "n_out d_out"],
) -> Float[Tensor, "n_in n_out"]:
    """``scores[i, j'] = u_i @ W_hat @ v_j'`` (row-vector convention, see the module docstring)."""
    for x, name in ((W_hat, "W_hat"), (inputs, "inputs"), (outputs, "outputs")):
        _check_matrix(x, name)
    for x, name, dim in ((inputs, "inputs", 0), (outputs, "outputs", 1)):
        if x.shape[1] != W_hat.shape[dim]:
            raise ValueError(f"{name} have dim {x.shape[1]} but W_hat is [{W_hat.shape[0]}, {W_hat.shape[1]}]")
    return _recall_scores(W_hat, inputs, outputs)


def _recall_scores(W_hat: Float[Tensor, "d_in d_out"], inputs: Float[Tensor, "n_in d_in"],
                   outputs: Float[Tensor, "n_out d_out"]) -> Float[Tensor, "n_in n_out"]:
    return inputs @ W_hat @ outputs.T


def memory_recall(
    W_hat: Float[Tensor, "d_in d_out"],
    inputs: Float[Tensor, "n_in d_in"],
    outputs: Float[Tensor, "n_out d_out"],
    targets: Int[Tensor, "m 2"] | Sequence[tuple[int, int]],
    mode: str = "argmax",
    allowed: Bool[Tensor, "n_in n_out"] | None = None,
) -> float:
    """Bietti et al. (2023) memory-recall probe ``R(W_hat, W*)`` of any matrix.

    ``W_hat`` ``[d_in, d_out]`` acts as ``u @ W_hat`` on the input embeddings ``inputs`` (rows
    ``u_i``) and is read against the output embeddings ``outputs`` (rows ``v_j``); ``targets`` is
    the target map M as ``(i, j)`` index pairs (e.g. :func:`identity_map`); ``mode`` ``"argmax"``
    (the input retrieves its target) or ``"argmin"`` (suppresses it); ``allowed`` an optional
    candidate mask ``[n_in, n_out]`` (all four checked by :func:`recall_rate`).
    """
    return recall_rate(recall_scores(W_hat, inputs, outputs), targets, mode, allowed)


def _value_tokens(model) -> slice:
    """The tokens the weight probes read and score: the model's task's ``value_tokens`` (the permutation
    task's values ``1..V``) where it names them, every token otherwise."""
    return getattr(model_task(model), "value_tokens", slice(0, None))


def _check_position(model, position: object) -> int | None:
    """``None`` (no positional embedding) or a row of ``W_pos`` (negative rows count from the end)."""
    if position is None:
        return None
    n_ctx = int(model.W_pos.shape[0])
    return check_index("position", position, n_ctx, f"W_pos has {n_ctx} positions")


def apply_norm(model, x: Float[Tensor, "*batch d_model"], name: str) -> Float[Tensor, "*batch d_model"]:
    """Apply the model's normalization ``name`` (``"blocks.0.ln1"``, ``"blocks.0.ln2"``,
    ``"ln_final"``) to ``x`` exactly as the forward pass does (LN, LNPre, RMS, RMSPre or none)."""
    kind = normalization_of(model)
    if kind is None:
        return x
    params = model.state_dict()  # detached tensors
    eps = float(getattr(model.cfg, "eps", 1e-5))
    if kind in ("LN", "LNPre"):
        x = x - x.mean(-1, keepdim=True)
    x = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    if kind in ("LN", "RMS"):
        x = x * params[f"{name}.weight"]
        if f"{name}.bias" in params:
            x = x + params[f"{name}.bias"]
    return x


def effective_unembed(model) -> Float[Tensor, "d_model value"]:
    """``C diag(w_lnf) W_U[:, 1..V]`` (every output token on a model that is not the study's): the
    fixed part of ``(C c) * w_lnf / s @ W_U``, how a residual vector ``c`` reaches the value-token
    logits (``C`` centres over ``d_model``).  The final LayerNorm's positive scale ``1/s`` cannot change
    a ranking over tokens (all the probes read); callers that need magnitudes apply it (DLA)."""
    params = model.state_dict()  # detached tensors
    W_U = model.W_U.detach()[:, _value_tokens(model)]
    kind = normalization_of(model)
    if kind in ("LN", "RMS"):
        W_U = params["ln_final.weight"][:, None] * W_U
    if kind in ("LN", "LNPre"):
        W_U = W_U - W_U.mean(0, keepdim=True)  # C is symmetric: C diag(w) W_U
    return W_U


def _token_inputs(model, position: int | None) -> Float[Tensor, "value d_model"]:
    x = model.W_E.detach()[_value_tokens(model)]
    if position is not None:
        x = x + model.W_pos.detach()[position]
    return x


@dataclass(frozen=True)
class MemoryProbe:
    """One memory-recall probe of one component.

    Attributes:
        component: ``"L{layer}H{head}"`` (a head, e.g. ``"L1H0"``) or ``"L{layer}MLP"``.
        circuit: ``"OV"``, ``"QK"`` or ``"MLP"``.
        map: the target map (``"copy"``, ``"suppress"``, ``"custom"`` or one of :data:`QK_MAPS`).
        mode: ``"argmax"`` or ``"argmin"``.
        recall: R in [0, 1].
        n_pairs: ``|M|``.
        chance: R of a random ranking (1 / number of candidates, averaged over pairs).
    """

    component: str
    circuit: str
    map: str
    mode: str
    recall: float
    n_pairs: int
    chance: float

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(self)])


def _token_probe(component: str, circuit: str, scores: Tensor, targets: object, mode: str) -> MemoryProbe:
    """R of a token map ``scores [input, value]``: target ``t -> t`` (map ``"copy"`` for argmax,
    ``"suppress"`` for argmin) unless ``targets`` are given (map ``"custom"``)."""
    n_in, n_out = scores.shape
    if targets is not None:
        pairs, name = _check_targets(targets, n_in, n_out, scores.device), "custom"
    elif n_in != n_out:
        raise ValueError(f"the default target t -> t needs as many input tokens as outputs, got {n_in} inputs and "
                         f"{n_out} outputs (e.g. a model whose d_vocab_out differs from d_vocab): pass targets=")
    else:
        pairs, name = _identity_map(n_out, scores.device), "copy" if mode == "argmax" else "suppress"
    return MemoryProbe(component, circuit, name, mode, _recall_rate(scores, pairs, mode), len(pairs), 1.0 / n_out)


def ov_scores(
    model, head: int, *, layer: int = 0, position: int | None = None
) -> Float[Tensor, "token value"]:
    """``ln1(W_E[t] (+ W_pos[p])) @ W_V[h] W_O[h] @ effective_unembed``: value token in, value logits out
    (any other model with ``W_E``, ``W_V``, ``W_O``, ``W_U``: every token in, every output logit out)."""
    layer = check_layer(model, layer)
    head = check_head(model, head)
    return _ov_scores(model, layer, head, _check_position(model, position))


def _ov_scores(model, layer: int, head: int, position: int | None) -> Float[Tensor, "token value"]:
    with torch.no_grad():
        u = apply_norm(model, _token_inputs(model, position), f"blocks.{layer}.ln1")
        W_OV = model.W_V.detach()[layer, head] @ model.W_O.detach()[layer, head]
        return _recall_scores(W_OV, u, effective_unembed(model).T.contiguous())


def ov_memory_probe(
    model,
    head: int,
    *,
    layer: int = 0,
    position: int | None = None,
    mode: str = "argmax",
    targets: Int[Tensor, "m 2"] | Sequence[tuple[int, int]] | None = None,
) -> MemoryProbe:
    """R of head ``head``'s OV circuit as a token memory (default target ``t -> t``; argmax: copying,
    argmin: suppressing).  Rows and columns are value token minus one (row ``t-1`` is token ``t``) on
    a study model, tokens on any other model (e.g. an induction head's copying memory)."""
    mode = _check_mode(mode)
    layer = check_layer(model, layer)
    head = check_head(model, head)
    return _ov_probe(model, layer, head, _check_position(model, position), mode, targets)


def _ov_probe(model, layer: int, head: int, position: int | None, mode: str, targets: object = None) -> MemoryProbe:
    scores = _ov_scores(model, layer, head, position)
    return _token_probe(str(Node(layer, head)), "OV", scores, targets, mode)


def _project(model, x: Tensor, layer: int, head: int, side: str, include_bias: bool) -> Tensor:
    """``ln1(x) @ W_{side}[layer, head]`` (``+ b_{side}`` with ``include_bias``), ``side`` ``"Q"`` or ``"K"``."""
    out = apply_norm(model, x, f"blocks.{layer}.ln1") @ getattr(model, f"W_{side}").detach()[layer, head]
    return out + getattr(model, f"b_{side}").detach()[layer, head] if include_bias else out


def qk_scores(
    model,
    head: int,
    queries: Float[Tensor, "n_q d_model"],
    keys: Float[Tensor, "n_k d_model"],
    *,
    layer: int = 0,
    include_bias: bool = False,
) -> Float[Tensor, "n_q n_k"]:
    """Attention logits ``(ln1(q) W_Q + b_Q) . (ln1(k) W_K + b_K) / sqrt(d_head)`` between
    residual vectors ``queries`` and ``keys`` (biases only with ``include_bias``)."""
    layer = check_layer(model, layer)
    head = check_head(model, head)
    _check_residual(model, queries, "queries")
    _check_residual(model, keys, "keys")
    return _qk_scores(model, layer, head, queries, keys, include_bias)


def _qk_scores(model, layer: int, head: int, queries: Float[Tensor, "n_q d_model"], keys: Float[Tensor, "n_k d_model"],
               include_bias: bool) -> Float[Tensor, "n_q n_k"]:
    with torch.no_grad():
        q = _project(model, queries, layer, head, "Q", include_bias)
        k = _project(model, keys, layer, head, "K", include_bias)
        return q @ k.T / q.shape[-1] ** 0.5


def _positional_qk(model, head: int, layer: int, include_bias: bool) -> Float[Tensor, "n_tok pos pos"]:
    """Token-resolved query scores ``[query token, query pos, key pos]``, key tokens averaged."""
    config = model_config_of(model)
    n_ctx = 2 * config.V - 1
    E = model.W_E.detach()[1 : config.V + 1]
    P = model.W_pos.detach()[:n_ctx]
    grid = (E[:, None, :] + P[None, :, :]).reshape(-1, config.d_model)  # [tok * pos, d]
    with torch.no_grad():
        q = _project(model, grid, layer, head, "Q", include_bias).reshape(config.V, n_ctx, -1)
        k = _project(model, grid, layer, head, "K", include_bias).reshape(config.V, n_ctx, -1).mean(0)  # bilinear
        return torch.einsum("tqd,kd->tqk", q, k) / q.shape[-1] ** 0.5


def qk_memory_probe(
    model, head: int, target_map: str = "x_match", *, layer: int = 0, include_bias: bool = False
) -> MemoryProbe:
    """R of head ``head``'s QK circuit on one of :data:`QK_MAPS` (defined in the module docstring)."""
    if target_map not in QK_MAPS:
        raise ValueError(f"target_map must be one of {QK_MAPS}, got {target_map!r}")
    layer = check_layer(model, layer)
    head = check_head(model, head)
    return _qk_probe(model, layer, head, target_map, include_bias)


def _qk_probe(model, layer: int, head: int, target_map: str, include_bias: bool) -> MemoryProbe:
    V = model_config_of(model).V
    n_ctx = 2 * V - 1
    allowed = chance = None
    if target_map == "x_match":
        E, P = model.W_E.detach()[1 : V + 1], model.W_pos.detach()
        scores = _qk_scores(model, layer, head, E + P[n_ctx - 1], E + P[0], include_bias)
        pairs = _identity_map(V, scores.device)
    else:
        token_scores = _positional_qk(model, head, layer, include_bias)
        causal = torch.ones(n_ctx, n_ctx, device=token_scores.device).tril().bool()
        if target_map == "last_to_y1":  # [query token, key pos]
            scores, allowed = token_scores[:, n_ctx - 1], causal[n_ctx - 1].expand(V, n_ctx)
            pairs = torch.tensor([[t, 1] for t in range(V)], device=token_scores.device)
        else:  # [query pos, key pos]: prev_y (x slots, q -> q-1) or self_y (y slots, q -> q)
            scores, allowed = token_scores.mean(0), causal
            first, shift = (2, 1) if target_map == "prev_y" else (1, 0)
            pairs = torch.tensor([[q, q - shift] for q in range(first, n_ctx, 2)], device=token_scores.device)
            chance = float((1.0 / (pairs[:, 0] + 1).double()).mean())  # query q has the q + 1 keys 0..q
    recall = _recall_rate(scores, pairs, "argmax", allowed)
    chance = 1.0 / scores.shape[1] if chance is None else chance
    return MemoryProbe(str(Node(layer, head)), "QK", target_map, "argmax", recall, len(pairs), chance)


def mlp_scores(
    model, inputs: Float[Tensor, "n d_model"], *, layer: int = 0
) -> Float[Tensor, "n value"]:
    """``MLP(ln2(u)) @ effective_unembed`` (``b_out`` left out) for residual vectors ``inputs``."""
    layer = check_layer(model, layer)
    return _mlp_scores(model, _check_residual(model, inputs, "inputs"), layer)


def _mlp_scores(model, inputs: Float[Tensor, "n d_model"], layer: int) -> Float[Tensor, "n value"]:
    act = ACTIVATIONS[model_config_of(model).act_fn]
    with torch.no_grad():
        h = apply_norm(model, inputs, f"blocks.{layer}.ln2")
        post = act(h @ model.W_in.detach()[layer] + model.b_in.detach()[layer])
        return post @ model.W_out.detach()[layer] @ effective_unembed(model)


def mlp_memory_probe(
    model,
    *,
    layer: int = 0,
    position: int | None = None,
    inputs: Float[Tensor, "n d_model"] | None = None,
    targets: Int[Tensor, "m 2"] | Sequence[tuple[int, int]] | None = None,
    mode: str = "argmax",
) -> MemoryProbe:
    """R of the MLP as a map from ``inputs`` (default ``W_E[t] (+ W_pos[position])`` for ``t = 1..V``)
    to value tokens (default target ``t -> t``)."""
    mode = _check_mode(mode)
    layer = check_layer(model, layer)
    position = _check_position(model, position)
    if inputs is not None:
        _check_residual(model, inputs, "inputs")
    return _mlp_probe(model, layer, position, mode, inputs, targets)


def _mlp_probe(model, layer: int, position: int | None, mode: str, inputs: Tensor | None = None,
               targets: object = None) -> MemoryProbe:
    scores = _mlp_scores(model, _token_inputs(model, position) if inputs is None else inputs, layer)
    return _token_probe(str(Node(layer)), "MLP", scores, targets, mode)


@dataclass(frozen=True)
class MemoryProbes:
    """Every concrete memory probe of one model (see :func:`model_memory_probes`)."""

    model_name: str
    probes: tuple[MemoryProbe, ...]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per probe: component, circuit, map, mode, recall, n_pairs, chance."""
        return pd.DataFrame([asdict(p) for p in self.probes])

    def get(self, component: str, target_map: str) -> float:
        """R of ``component``'s probe ``target_map`` (e.g. ``get("L0H1", "copy")``)."""
        for p in self.probes:
            if p.component == component and p.map == target_map:
                return p.recall
        raise KeyError(f"no probe {target_map!r} for {component!r}")


def model_memory_probes(
    model, *, layer: int | None = None, position: int | None = None, include_bias: bool = False
) -> MemoryProbes:
    """All concrete probes of ``layer`` (default ``None``: of every layer, layer by layer): per head
    OV copy/suppress and the four QK maps, and the MLP copy/suppress map (``position`` is passed to
    the OV and MLP probes; in a layer >= 1 they read the embeddings only, module docstring)."""
    config = model_config_of(model)
    layers = range(config.n_layers) if layer is None else [check_layer(model, layer)]
    position = _check_position(model, position)
    probes: list[MemoryProbe] = []
    for index in layers:  # checked once here; the probes' unchecked cores run per layer and head
        for head in range(config.n_heads):
            probes += [_ov_probe(model, index, head, position, mode) for mode in MODES]
            probes += [_qk_probe(model, index, head, name, include_bias) for name in QK_MAPS]
        probes += [_mlp_probe(model, index, position, mode) for mode in MODES]
    return MemoryProbes(config.name, tuple(probes))


class MemoryProbeTracker:
    """A ``train(..., callbacks=[tracker])`` callback recording :func:`model_memory_probes` every
    ``every`` epochs; never stops training.  ``tracker.to_dataframe()`` has one row per (epoch,
    probe); ``tracker.record(model, epoch=0)`` adds a row set by hand (e.g. at initialization)."""

    def __init__(self, *, layer: int | None, position: int | None, include_bias: bool, every: int):
        self.layer, self.position, self.include_bias, self.every = layer, position, include_bias, every
        self._rows: list[dict[str, Any]] = []

    def record(self, model, epoch: int) -> None:
        probes = model_memory_probes(model, layer=self.layer, position=self.position, include_bias=self.include_bias)
        self._rows.extend({"epoch": epoch, **asdict(p)} for p in probes.probes)

    def __call__(self, state: Any) -> None:
        if state.epoch % self.every == 0:
            self.record(state.model, state.epoch)

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame(self._rows, columns=["epoch", *(f.name for f in fields(MemoryProbe))])


def memory_probe_tracker(
    *, layer: int | None = None, position: int | None = None, include_bias: bool = False, every: int = 1
) -> MemoryProbeTracker:
    """A callback for :func:`perm_circuits.train.train` that tracks the memory probes over training
    (Bietti et al. 2023, Fig. 3: which memory forms first).  ``layer`` (default ``None``: every
    layer) and ``position`` may count from the end; their type is checked here, their range
    against the model at each record."""
    for name, value in (("layer", layer), ("position", position)):
        if value is not None:
            check_int(name, value)
    every = check_positive_int("every", every)
    return MemoryProbeTracker(layer=layer, position=position, include_bias=bool(include_bias), every=every)
