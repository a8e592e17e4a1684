"""Direct logit attribution (DLA) per attention head and per MLP neuron at the y positions.

With the run's cached final-LayerNorm scale ``s = ln_final.hook_scale``, the logits of a pre-LN
transformer are exactly linear in the residual stream's components ``c``:
``logit = sum_c (C c) * w_lnf / s @ W_U + (b_lnf @ W_U + b_U)``, ``C`` centring over ``d_model``
(Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"; Nanda's TransformerLens
DLA recipe).  Embeddings, per-head outputs and MLP outputs come from
:func:`~perm_circuits.analysis.probes.task_attribution.residual_components`, as for any task's model;
the reading through the final LayerNorm differs: here the centring, ``w_lnf`` and ``1/s`` fold into
one float64 direction per prediction.

Attributed at each y prediction (steps ``1..V``): ``logit(correct y) - mean(logit(other values))``
(token 0 is never a value), but at a repeated last query (recall) with ``recall_baseline=
"elimination"`` (default) ``logit(correct y) - logit(elimination answer)``, the one value not
revealed yet (the trap pure elimination falls into).

Components, all read from the run's cache (so a ``hooks=`` intervention is attributed where it
acts):

* ``embed``, ``pos_embed``: ``hook_embed``, ``hook_pos_embed``;
* per layer ``l``, the attention layer's total is the cached ``blocks.l.hook_attn_out``, split as
  ``L{l}H{h}`` per head (``z_h @ W_O[h]`` from the cached ``hook_z``), ``L{l}attn_bias``
  (``b_O``) and ``L{l}attn_edit`` = ``hook_attn_out - sum_h heads - b_O``: what an intervention
  on the attention output itself (e.g. ``ablate(model, "blocks.l.hook_attn_out", ...)``)
  changed; zero up to float error otherwise;
* per layer ``l``, the MLP's total is the cached ``blocks.l.hook_mlp_out``, split as
  ``L{l}mlp_bias`` (the constant ``b_out``) and ``L{l}mlp`` = the rest of ``hook_mlp_out``.
  Under ``ablate_mlp(model, l, "zero")`` (which zeroes ``hook_mlp_out``) the layer's direct
  effect is 0: ``L{l}mlp`` is then ``-L{l}mlp_bias``;
* ``other``: ``resid_post`` of the last layer minus all of the above — whatever an intervention
  wrote into the residual stream outside the components (e.g. on ``hook_resid_pre`` /
  ``hook_resid_post``); zero without such hooks;
* ``unembed_bias``: ``b_lnf @ W_U + b_U``.

Per-neuron breakdown (``neuron_contributions`` / ``neuron_mean``): neuron ``n`` of layer ``l``
contributes ``post_n W_out[n]`` (cached ``mlp.hook_post``).  The neurons add up to ``L{l}mlp``
whenever they produced the MLP's output (also under edits of ``mlp.hook_post``, e.g. neuron
ablations).  Where they do not — an intervention replaced ``hook_mlp_out`` downstream of the
neurons — the breakdown does not describe the output: those predictions' neuron values are
**nan** (so subgroup means over them are nan too) and ``neuron_split_exact`` is False there.
They are never rescaled.

Check of the whole decomposition: ``residual_error = actual - sum(components)``, recorded per
prediction (and as a mean per subgroup).  It is zero up to float error unless an intervention
acts after the residual stream (``ln_final.hook_normalized``, ``ln_final.hook_scale``, the
unembedding): then the components, which use the cached ``ln_final`` scale and the linear
unembedding, cannot reproduce the logits.  When ``max |residual_error|`` exceeds ``tolerance``
(default 1e-3 logits) a ``RuntimeWarning`` says so; the numbers are still returned, with
``total != actual`` visible in :meth:`LogitAttribution.to_dataframe`.

Subgroups (as in :mod:`perm_circuits.evaluate`): ``steps 1-4`` (every sample's first ``V-1``
predictions), ``last-step elimination`` / ``last-step recall`` (the last query new / repeated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import math
import warnings

import pandas as pd
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from perm_circuits.analysis.interventions.checks import resolve_task, task_test_set
from perm_circuits.analysis.probes.memory import effective_unembed
from perm_circuits.analysis.probes.task_attribution import (
    TargetAttribution,
    component_hooks,
    residual_components,
    target_logit_attribution,
)
from perm_circuits.checks import check_int, check_number
from perm_circuits.devices import model_device
from perm_circuits.hooks import check_hooks
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.base import Task, TaskBatch, own_analysis
from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set, permutation_batch, validate_tokens

__all__ = [
    "LogitAttribution",
    "LogitDiffDecomposition",
    "SUBGROUPS",
    "decompose_logit_diff",
    "direct_logit_attribution",
    "elimination_answers",
    "repeated_queries",
    "run_cache",
    "study_logit_attribution",
    "subgroup_masks",
]

SUBGROUPS = ("steps 1-4", "last-step elimination", "last-step recall")
RECALL_BASELINES = ("elimination", "mean")


def repeated_queries(inputs: Int[Tensor, "batch seq"]) -> Bool[Tensor, "batch step"]:
    """Whether the query of each step repeats an earlier query of the same sequence."""
    xs = inputs[:, 0::2]
    same = xs[:, :, None] == xs[:, None, :]
    earlier = torch.ones(xs.shape[1], xs.shape[1], dtype=torch.bool, device=inputs.device).tril(-1)
    return (same & earlier).any(-1)


def used_values(inputs: Int[Tensor, "batch seq"], V: int) -> Bool[Tensor, "batch step value"]:
    """``used[b, k, v-1]``: value ``v`` was revealed as a y before step ``k + 1``'s query."""
    ys = inputs[:, 1::2]  # y1 .. y_{V-1}
    onehot = torch.nn.functional.one_hot(ys - 1, V).bool()  # [b, V-1, V]
    cumulative = onehot.cumsum(1).bool()
    first = torch.zeros_like(cumulative[:, :1])
    return torch.cat([first, cumulative], dim=1)  # step k sees y_1..y_{k}


def elimination_answers(inputs: Int[Tensor, "batch seq"], V: int) -> Int[Tensor, "batch step"]:
    """The pure-elimination answer per step: the single value not yet revealed, or -1 when more
    than one is left.  At a repeated last query this is the trap (recall answers the earlier y)."""
    unused = ~used_values(inputs, V)
    only = unused.sum(-1) == 1
    return torch.where(only, unused.float().argmax(-1) + 1, torch.full_like(only, -1, dtype=torch.long))


def subgroup_masks(inputs: Int[Tensor, "batch seq"]) -> dict[str, Bool[Tensor, "batch step"]]:
    """Boolean masks over ``(sample, step)`` for :data:`SUBGROUPS`."""
    n_steps = (inputs.shape[1] + 1) // 2
    repeated = repeated_queries(inputs)[:, -1:]
    last = torch.zeros(inputs.shape[0], n_steps, dtype=torch.bool, device=inputs.device)
    last[:, -1] = True
    return {SUBGROUPS[0]: ~last, SUBGROUPS[1]: last & ~repeated, SUBGROUPS[2]: last & repeated}


def check_batch(model, test_set: TaskBatch | None, n: int = 5000, seed: int = 1234) -> TaskBatch:
    """The batch to measure on: ``test_set`` validated, else the model's fixed test set; on the model's device."""
    V = model_config_of(model).V
    if test_set is None:
        return make_test_set(task_config_of(model), n=n, seed=seed).to(model_device(model))
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch, got {type(test_set).__name__}")
    validate_tokens(test_set.tokens, V)
    return permutation_batch(test_set).to(model_device(model))  # once: the measurement runs on the model's device


def run_cache(
    model,
    tokens: Int[Tensor, "batch seq"],
    names: Sequence[str],
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> tuple[Float[Tensor, "batch seq vocab"], dict[str, Tensor], object]:
    """One no-grad forward under ``hooks`` caching only ``names``: ``(logits, {name: activation},
    cache)`` (the ActivationCache, for ``stack_head_results``); hooks are always removed."""
    hooks = check_hooks(model, hooks)
    wanted = set(names)
    missing = wanted - set(model.hook_dict)
    if missing:
        raise ValueError(f"unknown hook points {sorted(missing)}")
    with torch.no_grad(), model.hooks(fwd_hooks=hooks) if hooks else nullcontext():
        logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name in wanted)
    return logits, {name: cache[name] for name in wanted}, cache


@dataclass(frozen=True)
class LogitDiffDecomposition:
    """Per-prediction DLA (module docstring): ``contributions.sum(-1) + residual_error == actual``.

    ``neuron_contributions`` has neuron ``n`` of layer ``l`` at ``l * d_mlp + n``, nan where
    ``neuron_split_exact`` is False (the layer's neurons miss its ``L{l}mlp`` by more than
    ``tolerance`` logits); ``baseline`` -1 means the mean of the other values; ``subgroups`` are
    the :data:`SUBGROUPS` masks over ``(sample, step)``.
    """

    components: tuple[str, ...]
    contributions: Float[Tensor, "batch step component"]
    neuron_contributions: Float[Tensor, "batch step neuron"]
    actual: Float[Tensor, "batch step"]
    answer: Int[Tensor, "batch step"]
    baseline: Int[Tensor, "batch step"]
    subgroups: dict[str, Tensor]
    residual_error: Float[Tensor, "batch step"]
    neuron_split_exact: Bool[Tensor, "batch step layer"]
    tolerance: float

    @property
    def max_residual_error(self) -> float:
        """``max |actual - sum of components|`` over all predictions (logits)."""
        return float(self.residual_error.abs().max()) if self.residual_error.numel() else 0.0

    def to_dataframe(self) -> pd.DataFrame:
        """Mean contribution per component and step (rows: components, columns: steps)."""
        mean = self.contributions.mean(0).T.cpu().numpy()
        columns = [f"step {k + 1}" for k in range(mean.shape[1])]
        return pd.DataFrame(mean, index=list(self.components), columns=columns)


def _check_options(recall_baseline: object, tolerance: object) -> tuple[str, float]:
    if recall_baseline not in RECALL_BASELINES:
        raise ValueError(f"recall_baseline must be one of {RECALL_BASELINES}, got {recall_baseline!r}")
    return str(recall_baseline), check_number("tolerance (logits)", tolerance, low=0, strict=True)


def decompose_logit_diff(
    model,
    batch: TaskBatch,
    *,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    recall_baseline: str = "elimination",
    tolerance: float = 1e-3,
) -> LogitDiffDecomposition:
    """Direct logit attribution of the logit difference at every y position of ``batch`` under
    ``hooks`` (module docstring: components, baseline, the checks within ``tolerance`` logits)."""
    recall_baseline, tolerance = _check_options(recall_baseline, tolerance)
    if not isinstance(batch, TaskBatch):  # (check_batch would draw the default test set for None)
        raise TypeError(f"batch must be a TaskBatch, got {type(batch).__name__}")
    return _decompose(model, check_batch(model, batch), hooks, recall_baseline, tolerance, "the residual_error field")


def _decompose(model, batch: TaskBatch, hooks, recall_baseline: str, tolerance: float,
               where: str) -> LogitDiffDecomposition:
    """:func:`decompose_logit_diff` on checked options and a batch from :func:`check_batch` (its
    callers check; not again here), its warning naming ``where`` the gaps are."""
    config = model_config_of(model)
    V, n_layers = config.V, config.n_layers
    inputs = batch.tokens.long()

    components = component_hooks(model)  # embed, pos_embed, per layer its heads (attn.hook_z) and MLP
    names = [hook for _, hook in components] + [f"blocks.{n_layers - 1}.hook_resid_post"] + [
        f"blocks.{layer}.{hook}" for layer in range(n_layers) for hook in ("hook_attn_out", "mlp.hook_post")]
    has_scale = "ln_final.hook_scale" in model.hook_dict and config.normalization_type is not None
    if has_scale:
        names.append("ln_final.hook_scale")
    logits, acts, _ = run_cache(model, inputs, names, hooks)
    parts = residual_components(model, components, acts)

    ypos = slice(0, 2 * V - 1, 2)
    dtype = torch.float64
    answer = batch.extras["ys"].long()
    elim = elimination_answers(inputs, V)
    repeated = repeated_queries(inputs)
    use_elim = repeated & (elim > 0) if recall_baseline == "elimination" else torch.zeros_like(repeated)
    baseline = torch.where(use_elim, elim, torch.full_like(elim, -1))
    # direction over value tokens: onehot(answer) - (onehot(baseline) or mean of the others)
    onehot = torch.nn.functional.one_hot(answer - 1, V).to(dtype)
    mean_others = (1 - onehot) / (V - 1)
    base_onehot = torch.nn.functional.one_hot(baseline.clamp(min=1) - 1, V).to(dtype)
    direction_v = onehot - torch.where(use_elim[..., None], base_onehot, mean_others)  # [b, step, V]

    U = effective_unembed(model).to(dtype)  # [d, V]
    direction = torch.einsum("dv,bsv->bsd", U, direction_v)  # residual direction of the logit diff
    if has_scale:  # [b, step, 1]
        direction = direction / acts["ln_final.hook_scale"][:, ypos].to(dtype)

    def attribute(x: Tensor) -> Tensor:  # [..., b, pos, d] -> [..., b, step]
        return (x[..., ypos, :].to(dtype) * direction).sum(-1)

    shape = acts["hook_embed"].shape
    embed, pos_embed = parts["embed"].to(dtype), parts["pos_embed"].expand(shape).to(dtype)
    columns = {"embed": attribute(embed), "pos_embed": attribute(pos_embed)}  # component name -> [b, step]
    total = embed + pos_embed  # the residual stream the components account for
    neuron_columns, exact_columns = [], []
    for layer in range(n_layers):
        # attention: the cached hook_attn_out, split into heads, b_O and what an edit added
        attn_out = acts[f"blocks.{layer}.hook_attn_out"].to(dtype)
        b_O = model.b_O.detach()[layer].to(dtype).expand(shape)
        heads = [parts[f"L{layer}H{head}"].to(dtype) for head in range(config.n_heads)]
        columns.update({f"L{layer}H{head}": attribute(result) for head, result in enumerate(heads)})
        head_sum = sum(heads, torch.zeros_like(attn_out))
        columns[f"L{layer}attn_bias"] = attribute(b_O)
        columns[f"L{layer}attn_edit"] = attribute(attn_out - head_sum - b_O)
        total = total + attn_out
        # MLP: the cached hook_mlp_out, split into b_out and the rest; neurons as a breakdown
        mlp_out = parts[f"L{layer}MLP"].to(dtype)
        b_out = model.b_out.detach()[layer].to(dtype).expand(shape)
        mlp_column = columns[f"L{layer}mlp"] = attribute(mlp_out - b_out)
        columns[f"L{layer}mlp_bias"] = attribute(b_out)
        total = total + mlp_out
        post = acts[f"blocks.{layer}.mlp.hook_post"].to(dtype)  # [b, pos, d_mlp]
        W_out = model.W_out.detach()[layer].to(dtype)  # [d_mlp, d]
        per_neuron = post[:, ypos] * torch.einsum("nd,bsd->bsn", W_out, direction)
        exact = (per_neuron.sum(-1) - mlp_column).abs() <= tolerance
        neuron_columns.append(torch.where(exact[..., None], per_neuron, torch.full_like(per_neuron, math.nan)))
        exact_columns.append(exact)

    resid = acts[f"blocks.{n_layers - 1}.hook_resid_post"].to(dtype)
    columns["other"] = attribute(resid - total)

    const = model.b_U.detach().to(dtype)[1 : V + 1].clone()
    ln_bias = model.state_dict().get("ln_final.bias")
    if ln_bias is not None:
        const = const + (ln_bias.to(dtype) @ model.W_U.detach().to(dtype))[1 : V + 1]
    columns["unembed_bias"] = torch.einsum("v,bsv->bs", const, direction_v)

    value_logits = logits[:, ypos, 1 : V + 1].to(dtype)
    actual = (value_logits * direction_v).sum(-1)
    contributions = torch.stack(list(columns.values()), dim=-1)
    residual_error = actual - contributions.sum(-1)
    dec = LogitDiffDecomposition(components=tuple(columns), contributions=contributions.float(),
        neuron_contributions=torch.cat(neuron_columns, dim=-1).float(), actual=actual.float(), answer=answer,
        baseline=baseline, subgroups=subgroup_masks(inputs), residual_error=residual_error.float(),
        neuron_split_exact=torch.stack(exact_columns, dim=-1), tolerance=tolerance)
    if not dec.max_residual_error <= tolerance:
        warnings.warn(
            "direct logit attribution: the components do not add up to the actual logit difference "
            f"(max |actual - sum| = {dec.max_residual_error:.4g} logits > tolerance {tolerance:g}). Something acts "
            "after the residual stream (a hook on ln_final.hook_normalized / ln_final.hook_scale or on the "
            f"unembedding?); the gap per prediction is in {where}.",
            RuntimeWarning,
            stacklevel=3,  # the caller of the public function
        )
    return dec


@dataclass(frozen=True)
class LogitAttribution:
    """Mean direct logit attribution per subgroup (see the module docstring).

    Attributes:
        model_name: the model's preset name.
        components: the component axis (``contributions`` sum to ``actual``).
        subgroups: :data:`SUBGROUPS`.
        n: predictions per subgroup.
        mean: ``[subgroup, component]`` mean logit-difference contribution (NaN for an empty subgroup).
        actual: ``[subgroup]`` mean actual logit difference.
        neuron_mean: ``[subgroup, layer * d_mlp]`` mean per-neuron contribution (nan: module docstring).
        recall_baseline: ``"elimination"`` or ``"mean"``.
        residual_error: ``[subgroup]`` mean of ``actual - sum of components`` (module docstring).
        max_residual_error: ``max |actual - sum of components|`` over every prediction.
        tolerance: the tolerance (logits) above which that gap was warned about.
    """

    model_name: str
    components: tuple[str, ...]
    subgroups: tuple[str, ...]
    n: tuple[int, ...]
    mean: Float[Tensor, "subgroup component"]
    actual: Float[Tensor, " subgroup"]
    neuron_mean: Float[Tensor, "subgroup neuron"]
    recall_baseline: str
    residual_error: Float[Tensor, " subgroup"]
    max_residual_error: float
    tolerance: float

    def to_dataframe(self) -> pd.DataFrame:
        """Rows: components plus ``total``, ``actual``, ``residual_error`` (``actual - total``)
        and ``n``; columns: subgroups."""
        frame = pd.DataFrame(self.mean.T.cpu().numpy(), index=list(self.components), columns=list(self.subgroups))
        frame.loc["total"] = self.mean.sum(-1).cpu().numpy()
        frame.loc["actual"] = self.actual.cpu().numpy()
        frame.loc["residual_error"] = self.residual_error.cpu().numpy()
        frame.loc["n"] = list(self.n)
        return frame

    def neuron_dataframe(self) -> pd.DataFrame:
        """Per-neuron mean contributions (rows ``L{l}N{n}``, columns: subgroups)."""
        d_mlp = self.neuron_mean.shape[1]
        n_layers = max(1, sum(1 for c in self.components if c.endswith("mlp")))  # one "L{l}mlp" per layer
        per_layer = d_mlp // n_layers
        index = [f"L{i // per_layer}N{i % per_layer}" for i in range(d_mlp)]
        return pd.DataFrame(self.neuron_mean.T.cpu().numpy(), index=index, columns=list(self.subgroups))

    def component(self, name: str, subgroup: str) -> float:
        """Mean contribution of one component in one subgroup."""
        if name not in self.components:
            raise KeyError(f"unknown component {name!r}; have {self.components}")
        if subgroup not in self.subgroups:
            raise KeyError(f"unknown subgroup {subgroup!r}; have {self.subgroups}")
        return float(self.mean[self.subgroups.index(subgroup), self.components.index(name)])


def direct_logit_attribution(
    model,
    test_set: TaskBatch | Tensor | None = None,
    *,
    task: Task | TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    recall_baseline: str = "elimination",
    tolerance: float = 1e-3,
    n: int = 5000,
    seed: int = 1234,
) -> LogitAttribution | TargetAttribution:
    """Direct logit attribution of every component.

    - With no ``task`` and no token-id ``test_set``, on a model whose task has an attribution of its
      own (:func:`~perm_circuits.tasks.base.own_analysis`; a study bridge's permutation task,
      :func:`study_logit_attribution`): :func:`decompose_logit_diff` averaged over :data:`SUBGROUPS`, on ``test_set`` (default the
      model's fixed 5,000-sample test set).  On a study bridge ``task`` = a
      :class:`~perm_circuits.tasks.PermutationTask` or its bare ``TaskConfig`` (the same either way) takes
      this path too, on ``make_test_set(task, n, seed)`` by default.
    - Otherwise, any model: a :class:`TargetAttribution`
      (:func:`~perm_circuits.analysis.probes.task_attribution.target_logit_attribution`) of the
      targets of a :class:`TaskBatch` ``test_set`` (default ``task.test_set(n, seed)``), or of the
      next token of plain token ids; ``recall_baseline`` and ``tolerance`` are the study's only.
    """
    task, config = resolve_task(model, task, general=isinstance(test_set, Tensor))
    own = None if task is not None or isinstance(test_set, Tensor) else own_analysis(model, "direct_logit_attribution")
    if own is not None:  # the model's task's own attribution (the study's, on its bridges)
        if test_set is None and config is not None:
            check_int("n", n, 1)
            test_set = make_test_set(config, n=n, seed=seed)
        return own(model, test_set, hooks, recall_baseline, tolerance)
    test_set = task_test_set(model, task, test_set, n, seed,
                             hint="(its test set's targets are attributed) or test_set= (a TaskBatch or token ids)")
    return target_logit_attribution(model, test_set, hooks)


def study_logit_attribution(model, test_set: object, hooks: object, recall_baseline: object,
                            tolerance: object) -> LogitAttribution:
    """The permutation task's own :func:`direct_logit_attribution` (``own_analysis(model,
    "direct_logit_attribution")``): :func:`decompose_logit_diff` averaged over :data:`SUBGROUPS`."""
    recall_baseline, tolerance = _check_options(recall_baseline, tolerance)
    batch = check_batch(model, test_set)  # run_cache checks the hooks before its forward
    dec = _decompose(model, batch, hooks, recall_baseline, tolerance, "the residual_error row of to_dataframe()")
    masks = [dec.subgroups[name] for name in SUBGROUPS]

    def means(x: Tensor) -> Tensor:  # [subgroup, ...] means over each subgroup's predictions, nan for an empty one
        return torch.stack([x[mask].mean(0) for mask in masks])

    return LogitAttribution(model_name=model_config_of(model).name, components=dec.components, subgroups=SUBGROUPS,
        n=tuple(int(mask.sum()) for mask in masks), mean=means(dec.contributions), actual=means(dec.actual),
        neuron_mean=means(dec.neuron_contributions), recall_baseline=recall_baseline,
        residual_error=means(dec.residual_error), max_residual_error=dec.max_residual_error, tolerance=tolerance)
