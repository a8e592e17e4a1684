"""Direct logit attribution (DLA) per attention head and per MLP neuron at the y positions.

The final residual stream of a (pre-LN) transformer is a sum of components — token embedding,
positional embedding, each head's output ``z_h @ W_O[h]``, the attention bias ``b_O``, each MLP
neuron's ``post_n * W_out[n]``, the MLP bias ``b_out`` — and the final LayerNorm is linear in that
sum once its per-position scale is fixed.  With the *cached* scale ``s = ln_final.hook_scale``,

    logit = sum_c (C c) * w_lnf / s @ W_U  +  (b_lnf @ W_U + b_U)

exactly, where ``C`` centres over ``d_model`` (Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits"; Nanda's TransformerLens DLA recipe).  Per-head outputs come from
``ActivationCache.stack_head_results()`` (TransformerLens 4 native models have no per-head
``hook_result``; the cache rebuilds it from ``attn.hook_z`` and ``W_O``, checked equal in the
tests).

What is attributed is a *logit difference* at each y-prediction position (steps ``1..V``):

* default: ``logit(correct y) - mean(logit(other value tokens))`` (token 0 is never a value);
* at a *repeated* last query (the recall subgroup) with ``recall_baseline="elimination"``
  (default): ``logit(correct y) - logit(elimination answer)``, the one value not revealed yet —
  the trap pure elimination falls into.  This isolates what pushes recall over elimination.
  ``recall_baseline="mean"`` uses the mean baseline everywhere.

Components whose sum reproduces the actual logit difference (up to float error): ``embed``,
``pos_embed``, ``L{l}H{h}`` per head, ``L{l}attn_bias`` (``b_O``), ``L{l}mlp`` (all neurons;
per-neuron numbers in ``neuron_*``), ``L{l}mlp_bias`` (``b_out``), ``unembed_bias``
(``b_lnf @ W_U + b_U``) and ``other`` — whatever a ``hooks=`` intervention wrote into the
residual stream outside these components (zero without hooks, or with hooks that only edit
component internals such as ``hook_z``, ``hook_pattern`` or ``mlp.hook_post``).

Subgroups (as in :mod:`perm_circuits.evaluate`): ``steps 1-4`` (every sample's first ``V-1``
predictions), ``last-step elimination`` (last query new) and ``last-step recall`` (last query
repeats an earlier x).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from perm_circuits.analysis.memory import _params, effective_unembed
from perm_circuits.hooks import check_hooks
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.task import Batch, make_test_set, validate_tokens

__all__ = [
    "LogitAttribution",
    "LogitDiffDecomposition",
    "SUBGROUPS",
    "decompose_logit_diff",
    "direct_logit_attribution",
    "elimination_answers",
    "repeated_queries",
    "run_cache",
    "subgroup_masks",
]

SUBGROUPS = ("steps 1-4", "last-step elimination", "last-step recall")
RECALL_BASELINES = ("elimination", "mean")


# ----------------------------------------------------------------------------- shared helpers


def repeated_queries(inputs: Int[Tensor, "batch seq"]) -> Bool[Tensor, "batch step"]:
    """Whether the query of each step repeats an earlier query of the same sequence."""
    xs = inputs[:, 0::2]
    same = xs[:, :, None] == xs[:, None, :]
    earlier = torch.ones(xs.shape[1], xs.shape[1], dtype=torch.bool).tril(-1)
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
    repeated = repeated_queries(inputs)[:, -1]
    early = torch.zeros(inputs.shape[0], n_steps, dtype=torch.bool)
    early[:, :-1] = True
    last = torch.zeros_like(early)
    last[:, -1] = True
    return {
        SUBGROUPS[0]: early,
        SUBGROUPS[1]: last & ~repeated[:, None],
        SUBGROUPS[2]: last & repeated[:, None],
    }


def check_batch(model, test_set: Batch | None, n: int = 5000, seed: int = 1234) -> Batch:
    """The batch to measure on: ``test_set`` validated, else the model's fixed test set."""
    V = model_config_of(model).V
    if test_set is None:
        config = task_config_of(model)
        return make_test_set(config, n=n, seed=seed)
    if not isinstance(test_set, Batch):
        raise TypeError(f"test_set must be a perm_circuits.Batch, got {type(test_set).__name__}")
    validate_tokens(test_set.inputs, V)
    return test_set


def run_cache(
    model,
    tokens: Int[Tensor, "batch seq"],
    names: Sequence[str],
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> tuple[Float[Tensor, "batch seq vocab"], dict[str, Tensor], object]:
    """One no-grad forward under ``hooks`` caching only ``names``; hooks are always removed.

    Returns ``(logits, {name: activation}, cache)`` (the ActivationCache, for
    ``stack_head_results``).
    """
    hooks = check_hooks(model, hooks)
    wanted = set(names)
    missing = wanted - set(model.hook_dict)
    if missing:
        raise ValueError(f"unknown hook points {sorted(missing)}")
    with torch.no_grad():
        if hooks:
            with model.hooks(fwd_hooks=hooks):
                logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name in wanted)
        else:
            logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name in wanted)
    return logits, {name: cache[name] for name in wanted}, cache


# ----------------------------------------------------------------------------- DLA


@dataclass(frozen=True)
class LogitDiffDecomposition:
    """Per-prediction DLA: ``contributions.sum(-1) == actual`` up to float error.

    Attributes:
        components: names of the component axis.
        contributions: ``[batch, step, component]`` logit-difference contributions.
        neuron_contributions: ``[batch, step, layer * d_mlp]`` per-neuron split of the ``mlp``
            components (neuron ``n`` of layer ``l`` at index ``l * d_mlp + n``).
        actual: ``[batch, step]`` the model's logit difference.
        answer, baseline: the correct token and the baseline token (-1 = mean of the others).
        subgroups: :data:`SUBGROUPS` masks over ``(sample, step)``.
    """

    components: tuple[str, ...]
    contributions: Float[Tensor, "batch step component"]
    neuron_contributions: Float[Tensor, "batch step neuron"]
    actual: Float[Tensor, "batch step"]
    answer: Int[Tensor, "batch step"]
    baseline: Int[Tensor, "batch step"]
    subgroups: dict[str, Tensor]

    def to_dataframe(self) -> pd.DataFrame:
        """Mean contribution per component and step (rows: components, columns: steps)."""
        mean = self.contributions.mean(0).T.numpy()
        columns = [f"step {k + 1}" for k in range(mean.shape[1])]
        return pd.DataFrame(mean, index=list(self.components), columns=columns)


def _check_recall_baseline(recall_baseline: object) -> str:
    if recall_baseline not in RECALL_BASELINES:
        raise ValueError(f"recall_baseline must be one of {RECALL_BASELINES}, got {recall_baseline!r}")
    return str(recall_baseline)


def decompose_logit_diff(
    model,
    batch: Batch,
    *,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    recall_baseline: str = "elimination",
) -> LogitDiffDecomposition:
    """Direct logit attribution of the logit difference at every y position of ``batch``.

    See the module docstring for the components, the baseline and the ln_final treatment (the
    cached ``ln_final.hook_scale`` of the run under ``hooks``).
    """
    recall_baseline = _check_recall_baseline(recall_baseline)
    if not isinstance(batch, Batch):
        raise TypeError(f"batch must be a perm_circuits.Batch, got {type(batch).__name__}")
    config = model_config_of(model)
    V, n_layers, d_mlp = config.V, config.n_layers, config.resolved_d_mlp
    inputs = validate_tokens(batch.inputs, V)
    check_hooks(model, hooks)

    names = ["hook_embed", "hook_pos_embed", f"blocks.{n_layers - 1}.hook_resid_post"]
    for layer in range(n_layers):
        names += [f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.mlp.hook_post"]
    has_scale = "ln_final.hook_scale" in model.hook_dict and config.normalization_type is not None
    if has_scale:
        names.append("ln_final.hook_scale")
    logits, acts, cache = run_cache(model, inputs, names, hooks)

    ypos = slice(0, 2 * V - 1, 2)
    dtype = torch.float64
    answer = batch.ys.long()
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
    if has_scale:
        scale = acts["ln_final.hook_scale"][:, ypos, 0].to(dtype)
    else:
        scale = torch.ones(inputs.shape[0], V, dtype=dtype)
    direction = direction / scale[..., None]

    def attribute(x: Tensor) -> Tensor:  # [..., b, step, d] -> [..., b, step]
        return (x[..., ypos, :].to(dtype) * direction).sum(-1)

    params = _params(model)
    components: list[str] = []
    columns: list[Tensor] = []
    total = torch.zeros(inputs.shape[0], 2 * V - 1, config.d_model, dtype=dtype)

    def add(name: str, resid: Tensor) -> None:
        nonlocal total
        components.append(name)
        columns.append(attribute(resid))
        total = total + resid.to(dtype)

    add("embed", acts["hook_embed"])
    add("pos_embed", acts["hook_pos_embed"].expand_as(acts["hook_embed"]))
    with torch.no_grad():  # rebuilt from cached z and the W_O parameters
        heads = cache.stack_head_results(layer=-1)  # [layer * head, b, pos, d]
    neuron_columns = []
    for layer in range(n_layers):
        for head in range(config.n_heads):
            add(f"L{layer}H{head}", heads[layer * config.n_heads + head])
        add(f"L{layer}attn_bias", model.b_O.detach()[layer].expand_as(acts["hook_embed"]))
        post = acts[f"blocks.{layer}.mlp.hook_post"].to(dtype)  # [b, pos, d_mlp]
        W_out = model.W_out.detach()[layer].to(dtype)  # [d_mlp, d]
        per_neuron = post[:, ypos] * torch.einsum("nd,bsd->bsn", W_out, direction)
        neuron_columns.append(per_neuron)
        components.append(f"L{layer}mlp")
        columns.append(per_neuron.sum(-1))
        total = total + post @ W_out
        add(f"L{layer}mlp_bias", model.b_out.detach()[layer].expand_as(acts["hook_embed"]))

    resid = acts[f"blocks.{n_layers - 1}.hook_resid_post"].to(dtype)
    components.append("other")
    columns.append(attribute(resid - total))

    const = model.b_U.detach().to(dtype)[1 : V + 1].clone()
    if "ln_final.bias" in params:
        const = const + (params["ln_final.bias"].to(dtype) @ model.W_U.detach().to(dtype))[1 : V + 1]
    components.append("unembed_bias")
    columns.append(torch.einsum("v,bsv->bs", const, direction_v))

    value_logits = logits[:, ypos, 1 : V + 1].to(dtype)
    actual = (value_logits * direction_v).sum(-1)
    return LogitDiffDecomposition(
        components=tuple(components),
        contributions=torch.stack(columns, dim=-1).float(),
        neuron_contributions=torch.cat(neuron_columns, dim=-1).float(),
        actual=actual.float(),
        answer=answer,
        baseline=baseline,
        subgroups=subgroup_masks(inputs),
    )


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
        neuron_mean: ``[subgroup, layer * d_mlp]`` mean per-neuron contribution.
        recall_baseline: ``"elimination"`` or ``"mean"``.
    """

    model_name: str
    components: tuple[str, ...]
    subgroups: tuple[str, ...]
    n: tuple[int, ...]
    mean: Float[Tensor, "subgroup component"]
    actual: Float[Tensor, " subgroup"]
    neuron_mean: Float[Tensor, "subgroup neuron"]
    recall_baseline: str

    def to_dataframe(self) -> pd.DataFrame:
        """Rows: components plus ``total`` and ``actual``; columns: subgroups."""
        frame = pd.DataFrame(self.mean.T.numpy(), index=list(self.components), columns=list(self.subgroups))
        frame.loc["total"] = self.mean.sum(-1).numpy()
        frame.loc["actual"] = self.actual.numpy()
        frame.loc["n"] = list(self.n)
        return frame

    def neuron_dataframe(self) -> pd.DataFrame:
        """Per-neuron mean contributions (rows ``L{l}N{n}``, columns: subgroups)."""
        d_mlp = self.neuron_mean.shape[1]
        n_layers = max(1, sum(1 for c in self.components if c.endswith("mlp")))
        per_layer = d_mlp // n_layers
        index = [f"L{i // per_layer}N{i % per_layer}" for i in range(d_mlp)]
        return pd.DataFrame(self.neuron_mean.T.numpy(), index=index, columns=list(self.subgroups))

    def component(self, name: str, subgroup: str) -> float:
        """Mean contribution of one component in one subgroup."""
        if name not in self.components:
            raise KeyError(f"unknown component {name!r}; have {self.components}")
        if subgroup not in self.subgroups:
            raise KeyError(f"unknown subgroup {subgroup!r}; have {self.subgroups}")
        return float(self.mean[self.subgroups.index(subgroup), self.components.index(name)])


def direct_logit_attribution(
    model,
    test_set: Batch | None = None,
    *,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    recall_baseline: str = "elimination",
) -> LogitAttribution:
    """Direct logit attribution per head, MLP (and neuron), embedding and bias, averaged over the
    subgroups ``steps 1-4`` / ``last-step elimination`` / ``last-step recall``.

    Args:
        model: a bridge.
        test_set: the batch (default: the model's fixed 5,000-sample test set).
        hooks: an intervention hook list applied during the forward pass.
        recall_baseline: the baseline token of the recall subgroup (module docstring).
    """
    recall_baseline = _check_recall_baseline(recall_baseline)
    batch = check_batch(model, test_set)
    check_hooks(model, hooks)
    dec = decompose_logit_diff(model, batch, hooks=hooks, recall_baseline=recall_baseline)
    means, actual, neurons, counts = [], [], [], []
    for name in SUBGROUPS:
        mask = dec.subgroups[name]
        counts.append(int(mask.sum()))
        means.append(dec.contributions[mask].mean(0) if mask.any() else torch.full((len(dec.components),), torch.nan))
        actual.append(dec.actual[mask].mean() if mask.any() else torch.tensor(torch.nan))
        neurons.append(
            dec.neuron_contributions[mask].mean(0)
            if mask.any()
            else torch.full((dec.neuron_contributions.shape[-1],), torch.nan)
        )
    return LogitAttribution(
        model_name=model_config_of(model).name,
        components=dec.components,
        subgroups=SUBGROUPS,
        n=tuple(counts),
        mean=torch.stack(means),
        actual=torch.stack(actual),
        neuron_mean=torch.stack(neurons),
        recall_baseline=recall_baseline,
    )
