"""Path patching: does head A affect head B's query, key or value (Wang et al. 2022, IOI section 3.1)?

Activation patching (:mod:`perm_circuits.analysis.study.recall_patching`) says *which* head matters; path
patching says *through which edge*.  For a sender head ``A = (l_A, h_A)`` and a receiver head
``B = (l_B, h_B)`` with ``l_A < l_B`` and one of B's inputs ``q``, ``k`` or ``v``:

- run the clean and the corrupted input once and cache every head's ``hook_z``;
- A's contribution to the residual stream is ``z_A @ W_O^A``, so the change a clean A makes is
  ``delta = (z_A^clean - z_A^corrupted) @ W_O^A`` (``[batch, pos, d_model]``, every position);
- run the corrupted input again, changing *only* B's ``input`` (its ``hook_q``, ``hook_k`` or
  ``hook_v`` for head ``h_B``) to what it would be if its residual stream input held ``delta``
  on top of the corrupted one: ``norm(r + delta) @ W - norm(r) @ W`` is added, with ``r`` the
  corrupted run's ``blocks.{l_B}.hook_resid_pre``, ``norm`` B's ``ln1`` (the identity when
  ``normalization_type`` is None, where the added term is simply ``delta @ W``) and ``W`` head
  ``h_B``'s ``W_Q``, ``W_K`` or ``W_V``.  B's other inputs, every other head (A included) and
  every MLP keep their corrupted values up to B; what B then writes flows on normally (the
  receiver-side "recompute downstream" step of the IOI paper).

So the effect flows only along the direct edge A -> B's ``input``.  This is the IOI paper's
path patching with the MLPs frozen as well (the edge's effect is the direct residual path; a
route A -> MLP -> B is not counted).  The receiver's LayerNorm is recomputed on ``r + delta``
(not frozen), which is exact: it is what B's input would be if A alone were clean (the recomputed
norm is checked against the cached ``ln1.hook_out`` first, and a test compares the whole edge with
the IOI paper's two-run procedure).  TL4 native bridges list ``hook_q_input``/``hook_k_input``
but cannot enable them (``set_use_split_qkv_input`` raises NotImplementedError for their
``AttentionBridge``), hence the edit of ``hook_q``/``hook_k``/``hook_v``.

Metric and normalisation as in activation patching: the logit difference ``logit(answer) -
logit(wrong)`` at the last position, ``(LD_patched - mean LD_corrupted) / (mean LD_clean - mean
LD_corrupted)`` (1 = the edge restores the clean run, 0 = no effect; nan when the runs do not
differ), with paired percentile-bootstrap CIs over sequences
(:func:`~perm_circuits.analysis.interventions.patching.bootstrap_weights`, seeded with ``seed``).
On any task and any TransformerLens model (with per-head ``W_Q``, ``W_K``, ``W_V``, ``W_O`` and
``attn.hook_q/k/v/z``), ``pair`` may be ``(clean, corrupted)`` TaskBatches or token ids measured
with any per-sequence ``metric`` instead (:func:`path_patch`).
"""

from __future__ import annotations

import math
from functools import partial
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.analysis.interventions.checks import (
    check_head,
    check_layer,
    check_positive_int,
    check_task_config,
    resolve_task,
    study_config,
)
from perm_circuits.analysis.interventions.core import pair_tokens
from perm_circuits.analysis.interventions.patching import (
    RUNS,
    PatchingPair,
    bootstrap_weights,
    check_pair,
    check_patch_options,
    effect_fields,
    logit_diff,
    metric_values,
    patched_values,
)
from perm_circuits.analysis.interventions.activation_patching import target_logprob
from perm_circuits.circuit import Node
from perm_circuits.devices import model_device
from perm_circuits.metric import bind_metric
from perm_circuits.hooks import HookList, check_hooks, run_capture
from perm_circuits.model_shape import model_shape, normalization_of
from perm_circuits.models import model_config_of
from perm_circuits.tasks.base import TaskBatch, own_analysis
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.runner import model_name
from perm_circuits.tasks.permutation_data import TaskConfig, batch_from_queries, make_batch, unused_query

__all__ = [
    "CORRUPTIONS",
    "INPUTS",
    "add_to_input_hooks",
    "check_head_pair",
    "input_change",
    "PathPatchEffect",
    "PathPatchingTable",
    "induction_patching_pair",
    "path_patch",
    "path_patch_hooks",
    "path_patching_table",
    "sender_delta",
]

INPUTS = ("q", "k", "v")
CORRUPTIONS = ("swap", "query", "unused")
SIGNIFICANT_EFFECT = 0.5
"""A path's normalised effect counts as large at this size (with a CI that excludes 0)."""


# ----------------------------------------------------------------------------- the pair


def induction_patching_pair(
    task: PermutationTask | TaskConfig, n: int = 2000, seed: int = 0, *, corruption: str = "swap", split: str = "test"
) -> PatchingPair:
    """Clean/corrupted batches for the induction question, with the answer and wrong tokens.

    ``task``: a PermutationTask or its bare TaskConfig (the same either way).
    ``clean = make_batch(task, n, split=split, seed=seed, repeat_ratio=1.0,
    repeat_source=None)``: every last query repeats an earlier ``x_k``, ``k`` uniform over
    ``1..V-1`` (general recall, whatever ``task.repeat_sources`` says); ``answer = y_k``.
    Per row another earlier query ``j != k`` is drawn uniformly (generator seeded with
    ``seed + 1``) and ``corruption`` builds the corrupted row: ``"swap"`` exchanges ``x_k`` and
    ``x_j`` in the context, ``"query"`` sets the last query to ``x_j`` (both: ``wrong = y_j``),
    ``"unused"`` sets it to the unused x (``wrong`` = its y; the recall pair of
    :func:`~perm_circuits.analysis.study.recall_patching.patching_pair`, for any k).  Needs ``V >= 3``.

    Under ``"swap"`` only the context changes, so a previous-token head's output differs at the two
    y slots whose previous token was swapped: the corruption that exposes the K-composition edge.
    Under ``"query"`` only the last token differs: with no layer-0 head reading the last position
    every head-to-head path is exactly 0 (the effect enters the induction head's query from the
    embedding).
    """
    task_config = study_config(task)
    check_positive_int("n", n)
    if corruption not in CORRUPTIONS:
        raise ValueError(f"corruption must be one of {CORRUPTIONS}, got {corruption!r}")
    V = task_config.V
    if V < 3:
        raise ValueError(f"induction_patching_pair needs V >= 3 (two earlier queries to swap), got V={V}")
    clean = make_batch(task_config, n, split=split, seed=seed, repeat_ratio=1.0, repeat_source=None)
    rows = torch.arange(n, device=clean.extras["xs"].device)
    k = clean.extras["repeat_source"]
    offset = torch.randint(1, V - 1, (n,), generator=torch.Generator().manual_seed(seed + 1))
    j = (k + offset) % (V - 1)
    xs, perms = clean.extras["xs"].clone(), clean.extras["perms"].clone()
    if corruption == "swap":
        xs[rows, k], xs[rows, j] = clean.extras["xs"][rows, j], clean.extras["xs"][rows, k]
        # the permutation that maps each slot's new x to the slot's old y: x_k -> y_j, x_j -> y_k
        perms[rows, clean.extras["xs"][rows, k] - 1] = clean.extras["ys"][rows, j]
        perms[rows, clean.extras["xs"][rows, j] - 1] = clean.extras["ys"][rows, k]
        source = j
    elif corruption == "query":
        xs[:, -1] = clean.extras["xs"][rows, j]
        source = j
    else:
        xs[:, -1] = unused_query(clean.extras["xs"])
        source = torch.full((n,), -1, dtype=torch.long, device=clean.extras["xs"].device)
    corrupted = batch_from_queries(xs, perms, source)
    return clean, corrupted, clean.extras["ys"][:, -1].clone(), corrupted.extras["ys"][:, -1].clone()


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PathPatchEffect:
    """The normalised effect of one edge ``sender -> receiver.input`` (module docstring).

    ``mean`` is the normalised mean logit difference (0 = corrupted, 1 = clean), ``ci_low`` /
    ``ci_high`` its bootstrap CI, ``logit_diff`` the raw patched mean logit difference.
    """

    sender: str
    sender_layer: int
    sender_head: int
    receiver: str
    receiver_layer: int
    receiver_head: int
    input: str
    mean: float
    ci_low: float
    ci_high: float
    logit_diff: float

    @property
    def label(self) -> str:
        return f"{self.sender}->{self.receiver}.{self.input}"

    @property
    def significant(self) -> bool:
        """CI excludes 0 and ``|mean| >= 0.5`` (:data:`SIGNIFICANT_EFFECT`)."""
        if math.isnan(self.mean):
            return False
        return (self.ci_low > 0 or self.ci_high < 0) and abs(self.mean) >= SIGNIFICANT_EFFECT


@dataclass(frozen=True)
class PathPatchingTable:
    """Path-patching effects of many edges on one clean/corrupted pair.

    ``per_sample[e, i]`` is the normalised logit difference of sample ``i`` with edge ``e``
    patched; ``clean_logit_diff`` / ``corrupted_logit_diff`` are the unpatched means.
    """

    model_name: str
    effects: tuple[PathPatchEffect, ...]
    per_sample: Float[Tensor, "effect batch"]
    clean_logit_diff: float
    corrupted_logit_diff: float
    n: int
    confidence: float
    n_boot: int

    def to_dataframe(self) -> pd.DataFrame:
        """One row per edge (sender, receiver with layers and heads, input, mean, CI, raw LD)."""
        columns = list(PathPatchEffect.__dataclass_fields__)
        frame = pd.DataFrame([asdict(e) for e in self.effects], columns=columns)
        frame.insert(0, "model", self.model_name)
        frame["significant"] = [e.significant for e in self.effects]
        return frame

    def get(self, sender: tuple[int, int] | str, receiver: tuple[int, int] | str, input: str) -> PathPatchEffect:
        """The effect of one edge; heads as ``(layer, head)`` or ``"L{l}H{h}"``."""
        name = lambda head: head if isinstance(head, str) else str(Node(*head))
        for effect in self.effects:
            if (effect.sender, effect.receiver, effect.input) == (name(sender), name(receiver), input):
                return effect
        raise KeyError(f"no edge {name(sender)}->{name(receiver)}.{input} in this table")

    def __iter__(self) -> Iterator[PathPatchEffect]:
        return iter(self.effects)

    def __len__(self) -> int:
        return len(self.effects)


# ----------------------------------------------------------------------------- the parts


def check_head_pair(model, name: str, value: object) -> tuple[int, int]:
    """``value`` as a validated ``(layer, head)`` of ``model`` (``name`` in the error messages)."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError(f"{name} must be a (layer, head) pair of ints, got {value!r}")
    return check_layer(model, value[0]), check_head(model, value[1])


def _check_shared_kv(model, inputs: Sequence[str]) -> None:
    """ValueError for a key or value edge into a model whose heads share keys and values (grouped-query
    attention): a receiver head has no key or value of its own to patch."""
    cfg = getattr(model, "cfg", None)
    n_kv, n_heads = getattr(cfg, "n_key_value_heads", None), getattr(cfg, "n_heads", None)
    shared = [i for i in inputs if i in ("k", "v")]
    if shared and isinstance(n_kv, int) and isinstance(n_heads, int) and n_kv != n_heads:
        raise ValueError(f"{type(model).__name__} shares keys and values between heads (n_key_value_heads={n_kv}, "
                         f"n_heads={n_heads}): no per-head {'/'.join(shared)} edge to patch; use inputs=('q',)")


def _check_edge(model, sender: object, receiver: object, input: object) -> tuple[tuple[int, int], tuple[int, int], str]:
    s, r = check_head_pair(model, "sender", sender), check_head_pair(model, "receiver", receiver)
    if s[0] >= r[0]:
        raise ValueError(
            f"sender layer must be < receiver layer (a head reads only earlier layers' outputs), got sender "
            f"L{s[0]}H{s[1]} and receiver L{r[0]}H{r[1]}"
        )
    if input not in INPUTS:
        raise ValueError(f"input must be one of {INPUTS} (the receiver's query, key or value), got {input!r}")
    _check_shared_kv(model, [input])
    return s, r, input


def _norm(model, layer: int) -> Callable[[Tensor], Tensor]:
    """``blocks.{layer}.ln1`` as a function (the identity without normalization)."""
    kind = normalization_of(model)
    if kind is None:
        return lambda x: x
    sd = model.state_dict()
    weight, bias = sd.get(f"blocks.{layer}.ln1.weight"), sd.get(f"blocks.{layer}.ln1.bias")
    eps = float(model.cfg.eps)
    if kind in ("LN", "LNPre"):
        return lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
    return lambda x: (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * (1.0 if weight is None else weight)


def sender_delta(
    model,
    sender: tuple[int, int],
    clean_z: Float[Tensor, "batch pos head d_head"],
    corrupted_z: Float[Tensor, "batch pos head d_head"],
) -> Float[Tensor, "batch pos d_model"]:
    """What a clean sender adds to the corrupted residual stream: ``(z^clean - z^corr)[h] @ W_O[l, h]``.

    ``clean_z`` / ``corrupted_z`` are the sender layer's ``blocks.{l}.attn.hook_z``.
    """
    layer, head = check_head_pair(model, "sender", sender)
    with torch.no_grad():
        return (clean_z[:, :, head] - corrupted_z[:, :, head]) @ model.W_O[layer, head].detach()


def input_change(
    model, receiver: tuple[int, int], input: str, delta: Tensor, resid_pre: Tensor | None
) -> Float[Tensor, "batch pos d_head"]:
    """What a residual change ``delta`` adds to head ``receiver``'s ``input`` (its LayerNorm recomputed on
    ``resid_pre``)."""
    layer, head = receiver
    W = {"q": model.W_Q, "k": model.W_K, "v": model.W_V}[input][layer, head].detach()
    with torch.no_grad():
        if normalization_of(model) is None:
            return delta @ W
        norm = _norm(model, layer)
        return (norm(resid_pre + delta) - norm(resid_pre)) @ W


def path_patch_hooks(
    model,
    receiver: tuple[int, int],
    input: str,
    delta: Float[Tensor, "batch pos d_model"],
    resid_pre: Float[Tensor, "batch pos d_model"] | None = None,
) -> HookList:
    """A TL hook list adding a residual-stream change ``delta`` to one receiver input only: head ``h``'s
    ``blocks.{l}.attn.hook_{input}`` (``receiver = (l, h)``) by ``norm(resid_pre + delta) @ W -
    norm(resid_pre) @ W`` (``delta @ W`` without normalization), ``resid_pre`` the run's
    ``blocks.{l}.hook_resid_pre``; run it on the run whose ``resid_pre`` was given.
    """
    layer, head = check_head_pair(model, "receiver", receiver)
    if input not in INPUTS:
        raise ValueError(f"input must be one of {INPUTS}, got {input!r}")
    if normalization_of(model) is not None and resid_pre is None:
        raise ValueError("resid_pre is needed with normalization (the receiver's LayerNorm is recomputed on it)")
    return add_to_input_hooks((layer, head), input, input_change(model, (layer, head), input, delta, resid_pre))


def add_to_input_hooks(receiver: tuple[int, int], input: str, change: Tensor) -> HookList:
    """A hook list adding ``change`` ``[batch, pos, d_head]`` to head ``receiver``'s ``hook_{input}``."""
    layer, head = receiver

    def add(activation: Tensor, hook) -> Tensor:
        out = activation.clone()
        out[:, :, head] = out[:, :, head] + change.to(out.dtype)
        return out

    return [(f"blocks.{layer}.attn.hook_{input}", add)]


# ----------------------------------------------------------------------------- the measurement


def _names(model) -> list[str]:
    n_layers = model_shape(model).n_layers
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(n_layers - 1)]
    if normalization_of(model) is not None:
        for layer in range(1, n_layers):
            names += [f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.ln1.hook_out"]
    return names


@dataclass
class _Runs:
    """The clean and corrupted runs of one pair: caches, per-sequence metric values, the metric."""

    caches: dict[str, dict[str, Tensor]]
    values: dict[str, Tensor]
    tokens: Tensor
    metric: Callable[[Tensor], Tensor]
    hooks: HookList
    model_name: str


def _runs(model, clean: Tensor, corrupted: Tensor, metric: Callable[[Tensor], Tensor], hooks: HookList,
          model_name: str) -> _Runs:
    caches, values = {}, {}
    for run, tokens in zip(RUNS, (clean, corrupted)):
        logits, caches[run] = run_capture(model, tokens, _names(model), hooks)
        values[run] = metric(logits)
    return _Runs(caches, values, corrupted, metric, hooks, model_name)


def _measure(model, ctx: _Runs, edges: list[tuple[tuple[int, int], tuple[int, int], str]], n_boot: int, seed: int,
             confidence: float) -> PathPatchingTable:
    clean_cache, corrupted_cache = ctx.caches["clean"], ctx.caches["corrupted"]
    idle = []

    def patches() -> Iterator[HookList | None]:
        for (sl, sh), (rl, rh), input in edges:
            z = f"blocks.{sl}.attn.hook_z"
            delta = sender_delta(model, (sl, sh), clean_cache[z], corrupted_cache[z])
            change = input_change(model, (rl, rh), input, delta, corrupted_cache.get(f"blocks.{rl}.hook_resid_pre"))
            idle.append(not change.any())  # an edge that carries nothing is the corrupted run
            yield None if idle[-1] else add_to_input_hooks((rl, rh), input, change)

    raw = patched_values(model, ctx.tokens, ctx.hooks, patches(), ctx.metric, ctx.values["corrupted"])
    n = raw.shape[1]
    fields, table = effect_fields(raw, ctx.values["clean"], ctx.values["corrupted"],
                                  lambda: bootstrap_weights(n, n_boot, seed), confidence, n_boot, idle)
    effects = tuple(
        PathPatchEffect(sender=str(Node(sl, sh)), sender_layer=sl, sender_head=sh, receiver=str(Node(rl, rh)),
                        receiver_layer=rl, receiver_head=rh, input=input, **cell)
        for ((sl, sh), (rl, rh), input), cell in zip(edges, fields)
    )
    return PathPatchingTable(model_name=ctx.model_name, effects=effects, **table)


def _prepare(model, pair, task, n, seed, n_boot, confidence, hooks, corruption, metric) -> _Runs:
    """Validate the shared arguments (before any forward) and run the clean and corrupted inputs once."""
    check_patch_options("clean", "corrupted", n_boot, seed, confidence)
    check_positive_int("n", n)
    resolve_task(model, task)  # a wrong type is refused on either branch
    if corruption not in CORRUPTIONS:
        raise ValueError(f"corruption must be one of {CORRUPTIONS}, got {corruption!r}")
    hooks = check_hooks(model, hooks)
    device = model_device(model)
    if isinstance(pair, tuple) and len(pair) == 2:  # any task: (clean, corrupted) TaskBatches or token ids
        pair_tokens(model, *pair)  # checked once where the caller made them, then moved once for every edge
        pair = tuple(batch.to(device) for batch in pair)
        clean, corrupted = (batch.tokens if isinstance(batch, TaskBatch) else batch for batch in pair)
        if metric is None:
            if not isinstance(pair[0], TaskBatch):
                raise ValueError("token ids carry no targets: pass metric= (a callable metric(logits, batch) -> "
                                 "[batch])")
            metric = target_logprob(pair[0])
        metric = bind_metric(metric, pair[0])  # scored against the clean batch in every run
        name = getattr(getattr(model, "cfg", None), "model_name", None)
        runs = _runs(model, clean, corrupted, partial(metric_values, metric, batch=len(clean)), hooks,
                     name if isinstance(name, str) else type(model).__name__)
    else:
        if metric is not None:
            raise ValueError("metric= is for a (clean, corrupted) pair; the permutation pair's metric is its logit "
                             "difference logit(answer) - logit(wrong)")
        default_pair = own_analysis(model, "patching_pair")  # the model's task's own pair, if it has one
        if pair is None and default_pair is None:
            raise ValueError(f"{type(model).__name__} carries no task with a patching pair of its own: pass "
                             "pair=(clean, corrupted) TaskBatches or token ids (and metric=)")
        config = check_task_config(model, task, "task")
        if pair is None:
            pair = default_pair(config, n=n, seed=seed, corruption=corruption)
        else:
            pair = check_pair(model, pair)
        clean, corrupted, answer, wrong = (part.to(device) for part in pair)
        runs = _runs(model, clean.tokens, corrupted.tokens, lambda logits: logit_diff(logits, answer, wrong).double(),
                     hooks, model_config_of(model).name)
    if normalization_of(model) is not None:  # the receivers' recomputed ln1 must be the model's
        cache = runs.caches["corrupted"]
        for layer in range(1, model_shape(model).n_layers):
            mine = _norm(model, layer)(cache[f"blocks.{layer}.hook_resid_pre"])
            if not torch.allclose(mine, cache[f"blocks.{layer}.ln1.hook_out"], atol=1e-4, rtol=1e-4):
                raise RuntimeError(f"cannot reproduce blocks.{layer}.ln1 of this model; path patching would be inexact")
    return runs


def path_patch(
    model,
    sender: tuple[int, int],
    receiver: tuple[int, int],
    input: str,
    pair: PatchingPair | tuple[TaskBatch | Tensor, TaskBatch | Tensor] | None = None,
    *,
    metric: Callable[[Tensor], Tensor] | None = None,
    task: PermutationTask | TaskConfig | None = None,
    corruption: str = "swap",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> PathPatchingTable:
    """Path-patch one edge ``sender -> receiver.input`` (module docstring); a one-row table.

    Args:
        sender: ``(layer, head)`` of the head whose output is patched; its layer must be before
            the receiver's (negative indices count from the end).
        receiver: ``(layer, head)`` of the head whose input gets it.
        input: ``"q"``, ``"k"`` or ``"v"``: which input of the receiver gets the sender's
            clean-minus-corrupted output.
        pair: ``(clean, corrupted, answer, wrong)``; default ``induction_patching_pair(task,
            n, seed, corruption=corruption)``.  On any task: ``(clean, corrupted)`` TaskBatches or
            token ids, measured with ``metric``.
        task: the study's task of the default pair (a :class:`~perm_circuits.tasks.PermutationTask`
            or its bare ``TaskConfig``, the same either way; default the model's training task).
        metric: ``metric(logits, batch) -> [batch]`` (:mod:`perm_circuits.metric`; ``batch`` is the clean one) for a ``(clean, corrupted)`` pair (default
            ``target_logprob(clean)`` for a clean TaskBatch), e.g. a logit difference.
        seed: seeds the default pair and the bootstrap resamples.
        hooks: interventions active in every forward (the cached runs and the patched one).

    Everything is validated before any forward; no hooks are left on the model.
    """
    edge = _check_edge(model, sender, receiver, input)
    runs = _prepare(model, pair, task, n, seed, n_boot, confidence, hooks, corruption, metric)
    return _measure(model, runs, [edge], n_boot, seed, confidence)


def path_patching_table(
    model,
    pair: PatchingPair | tuple[TaskBatch | Tensor, TaskBatch | Tensor] | None = None,
    *,
    inputs: Sequence[str] = INPUTS,
    metric: Callable[[Tensor], Tensor] | None = None,
    task: PermutationTask | TaskConfig | None = None,
    corruption: str = "swap",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> PathPatchingTable:
    """Every edge: each sender head x each receiver head in a later layer x each of ``inputs``.

    Rows are sender-major (layer, head), then receiver, then input in ``inputs`` order; an edge whose
    input change is exactly zero reports the corrupted run without a forward.  Arguments as in
    :func:`path_patch`; a 1-layer model has no edges (ValueError).
    """
    if isinstance(inputs, str) or not isinstance(inputs, (list, tuple)) or not inputs:
        raise TypeError(f"inputs must be a non-empty sequence drawn from {INPUTS}, got {inputs!r}")
    bad = [i for i in inputs if i not in INPUTS]
    if bad or len(set(inputs)) != len(inputs):
        raise ValueError(f"inputs must be distinct entries of {INPUTS}, got {list(inputs)}")
    _check_shared_kv(model, inputs)
    shape = model_shape(model)
    if shape.n_layers < 2:
        raise ValueError(f"path patching needs n_layers >= 2 (a sender before a receiver), {model_name(model)} has 1")
    if not shape.n_heads:
        raise ValueError(f"{type(model).__name__} declares no number of heads (cfg.n_heads): no edges to patch")
    runs = _prepare(model, pair, task, n, seed, n_boot, confidence, hooks, corruption, metric)
    heads = [(layer, head) for layer in range(shape.n_layers) for head in range(shape.n_heads) if shape.heads(layer)]
    edges = [(s, r, i) for s in heads for r in heads if s[0] < r[0] for i in inputs]
    return _measure(model, runs, edges, n_boot, seed, confidence)

