"""Every MLP neuron explained by a named rule: a lookup table over at most a few named features.

A neuron's *rule* at a position is a table from the values of a few named features of the row
(:class:`~perm_circuits.analysis.hypothesis.spec.Feature`) to the neuron's mean activation
(``mlp.hook_post``, after the nonlinearity) on the rows with those values: the estimator of the
component-level :func:`~perm_circuits.analysis.hypothesis.replace.fit_table` (mean per combination of
feature values, the mean over all rows where a combination was not seen), vectorised over neurons. The features
are chosen greedily from a library the caller names (at most ``max_features``, each added only when
it raises the fraction of variance explained, ``R^2``, by ``min_gain``); the rule's name lists them.
A neuron whose best rule explains less than ``threshold`` of its variance is *unexplained*; its share
of the MLP's output norm at that position (``E|a_n| * ||W_out[n]||`` over the sum of all neurons')
says how much of the MLP's output such neurons carry.

:meth:`NeuronRules.hooks` is the replacement test of Chan et al. 2022 ("Causal Scrubbing") and of
Nanda et al. 2023 ("Progress measures for grokking via mechanistic interpretability") at the level
of single neurons: each explained neuron's activation is set to its rule's table value, the output
goes through the model's own ``W_out`` and ``b_out``, and the unexplained neurons keep their true
activation (``unexplained="keep"``), are set to their mean over the fit rows (``"mean"``), or take
their best rule too (``"rule"``: the rules alone). The hooks are an ordinary hook list: score them
with :func:`~perm_circuits.analysis.hypothesis.replace.retention` and compose them with ``+``.

Fit on one batch (for a fair test, not the batch the replacement is scored on); the fit is
vectorised over neurons (one scatter per feature combination), deterministic, and needs no gradient.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis.hypothesis.spec import Feature, batch_tokens
from perm_circuits.hooks import HookList, run_capture
from perm_circuits.model_shape import model_shape

__all__ = ["NeuronRule", "NeuronRules", "fit_neuron_rules", "post_hook"]

UNEXPLAINED = ("keep", "mean", "rule")


def post_hook(layer: int) -> str:
    """The hook point of layer ``layer``'s MLP neurons after the nonlinearity."""
    return f"blocks.{layer}.mlp.hook_post"


@dataclass(frozen=True)
class NeuronRule:
    """One neuron at one position: ``activation = table[feature values]`` (``default`` for unseen values).

    ``r2`` is the fraction of the activation's variance the table explains on the fit rows (1.0 for a
    neuron constant there); ``share`` its part of the MLP's output norm at that position; ``mean`` its
    mean activation (the mean-ablation value).
    """

    layer: int
    neuron: int
    position: int
    features: tuple[Feature, ...]
    table: Mapping[tuple, float]
    default: float
    r2: float
    share: float
    mean: float

    @property
    def rule(self) -> str:
        """The rule's name: the features it reads, or ``constant`` when it reads none."""
        return "f(" + ", ".join(f.name for f in self.features) + ")" if self.features else "constant"


@dataclass(frozen=True)
class NeuronRules:
    """Every neuron's rule; ``explained(r)`` when ``r.r2 >= threshold``."""

    rules: tuple[NeuronRule, ...]
    threshold: float
    n_fit: int

    def explained(self, rule: NeuronRule) -> bool:
        return rule.r2 >= self.threshold

    def unexplained_share(self, layer: int, position: int) -> float:
        """The output-norm share of the unexplained neurons of ``layer`` at ``position``."""
        return float(sum(r.share for r in self.rules if r.layer == layer and r.position == position
                         and not self.explained(r)))

    def predict(self, tokens: Int[Tensor, "batch seq"]) -> dict[tuple[int, int], Float[Tensor, "batch neuron"]]:
        """``{(layer, position): [batch, neuron]}``: every rule's table value on ``tokens`` (neurons of
        a (layer, position) without a rule hold NaN)."""
        groups: dict[tuple, list[NeuronRule]] = {}
        for r in self.rules:
            groups.setdefault((r.layer, r.position, r.features), []).append(r)
        width = 1 + max(r.neuron for r in self.rules)
        out: dict[tuple[int, int], Tensor] = {}
        for (layer, position, features), rules in groups.items():
            target = out.setdefault((layer, position), torch.full((tokens.shape[0], width), float("nan"), device=tokens.device))
            coded = [f.codes(tokens) for f in features]
            index = _joint([c for c, _ in coded]) if features else torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device)
            first = torch.full((int(index.max()) + 1,), len(index), dtype=torch.long, device=index.device).scatter_reduce_(
                0, index, torch.arange(len(index), device=index.device), "amin").tolist()
            keys = [tuple(values[int(c[row])] for c, values in coded) for row in first]
            table = torch.tensor([[r.table.get(key, r.default) for r in rules] for key in keys], device=tokens.device)
            target[:, [r.neuron for r in rules]] = table[index]
        return out

    def hooks(self, model, batch: Any, unexplained: str = "keep") -> HookList:
        """Hooks on ``mlp.hook_post`` that set each explained neuron to its rule's value on ``batch``;
        unexplained neurons keep their activation (``"keep"``), take their mean (``"mean"``) or their
        best rule (``"rule"``). Neurons and positions without a rule are left alone."""
        if unexplained not in UNEXPLAINED:
            raise ValueError(f"unexplained must be one of {UNEXPLAINED}, got {unexplained!r}")
        tokens = batch_tokens(batch)
        predicted = self.predict(tokens)
        hooks: HookList = []
        for layer in sorted({layer for layer, _ in predicted}):
            patches = []
            for (lay, position), values in sorted(predicted.items()):
                if lay != layer:
                    continue
                values = values.clone()
                for r in self.rules:
                    if r.layer == layer and r.position == position and not self.explained(r):
                        if unexplained == "keep":
                            values[:, r.neuron] = float("nan")
                        elif unexplained == "mean":
                            values[:, r.neuron] = r.mean
                patches.append((position, values))
            hooks.append((post_hook(layer), partial(_set_neurons, patches=patches)))
        return hooks

    def to_dataframe(self):
        """One row per (layer, neuron, position): the rule's name, features, R^2, output-norm share, whether explained."""
        import pandas as pd

        return pd.DataFrame([{"layer": r.layer, "neuron": r.neuron, "position": r.position, "rule": r.rule,
                              "features": "; ".join(f.name for f in r.features), "n_features": len(r.features),
                              "cells": len(r.table), "r2": r.r2, "share": r.share, "mean": r.mean,
                              "explained": self.explained(r)} for r in self.rules])


def _set_neurons(activation: Tensor, hook: Any, patches: list[tuple[int, Tensor]]) -> Tensor:
    activation = activation.clone()
    for position, values in patches:
        values = values.to(activation.device, activation.dtype)
        keep = torch.isnan(values)
        activation[:, position] = torch.where(keep, activation[:, position], values)
    return activation


def _r2(acts: Tensor, codes: Tensor, sst: Tensor, sumsq: Tensor) -> Tensor:
    """``R^2`` per neuron of the group-mean table of ``codes`` (dense ints ``0..G-1``): the residual sum of
    squares is ``sum a^2 - sum_g S_g^2 / n_g`` (``S_g`` a group's sum)."""
    groups = int(codes.max()) + 1
    sums = torch.zeros(groups, acts.shape[1], dtype=acts.dtype, device=acts.device).index_add_(0, codes, acts)
    counts = torch.bincount(codes, minlength=groups).to(acts.dtype)
    sse = (sumsq - (sums * sums / counts[:, None]).sum(0)).clamp_min(0)
    return torch.where(sst > 0, 1 - sse / sst.clamp_min(1e-30), torch.ones_like(sst))


def _joint(codes: Sequence[Tensor]) -> Tensor:
    if not codes:
        raise ValueError("no codes")
    out = codes[0]
    for c in codes[1:]:
        out = out * (int(c.max()) + 1) + c
    return torch.unique(out, return_inverse=True)[1]


def _greedy(acts: Tensor, codes: list[Tensor], max_features: int, min_gain: float,
            required: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], float]]:
    """Per neuron, the feature indices chosen greedily (after the ``required`` ones) and the ``R^2`` they reach."""
    n = acts.shape[1]
    sst = ((acts - acts.mean(0)) ** 2).sum(0)
    sumsq = (acts * acts).sum(0)
    cache: dict[tuple[int, ...], Tensor] = {}

    def score(combo: tuple[int, ...]) -> Tensor:
        if combo not in cache:
            cache[combo] = _r2(acts, _joint([codes[i] for i in combo]), sst, sumsq)
        return cache[combo]

    start = tuple(sorted(required))
    chosen: list[tuple[int, ...]] = [start] * n
    best = score(start) if start else torch.where(sst > 0, torch.zeros(n, dtype=acts.dtype, device=acts.device), torch.ones(n, dtype=acts.dtype, device=acts.device))
    best = best.clone()
    for _ in range(max_features - len(start)):
        grown = False
        for base in sorted(set(chosen)):
            members = [i for i in range(n) if chosen[i] == base and best[i] < 1 - 1e-9]
            if not members:
                continue
            options = [tuple(sorted(base + (j,))) for j in range(len(codes)) if j not in base]
            scores = torch.stack([score(combo)[members] for combo in options])  # [options, members]
            top, arg = scores.max(0)
            for k, i in enumerate(members):
                if float(top[k]) - float(best[i]) >= min_gain:
                    chosen[i], best[i] = options[int(arg[k])], top[k]
                    grown = True
        if not grown:
            break
    return [(chosen[i], float(best[i])) for i in range(n)]


def fit_neuron_rules(
    model,
    batch: Any,
    library: Mapping[int, Sequence[Feature]],
    *,
    layers: Sequence[int] | None = None,
    max_features: int = 3,
    threshold: float = 0.9,
    min_gain: float = 0.01,
    required: Mapping[int, Sequence[str]] | None = None,
) -> NeuronRules:
    """Fit every MLP neuron's rule at every position of ``library`` (``{position: features}``) on ``batch``.

    For each neuron of each layer in ``layers`` (default: every layer with an MLP) and each position,
    up to ``max_features`` features are chosen greedily from that position's library, each raising
    ``R^2`` by at least ``min_gain``; the rule is the table of mean activations per combination of
    their values. ``threshold`` decides which rules count as explained (:class:`NeuronRules`).
    ``required`` (``{position: feature names}``) names features of that position's library that every
    rule there reads before the greedy choice (they count towards ``max_features``): for example the
    answer a last-layer neuron's output is for, when the features that explain most variance do not
    determine it.
    """
    tokens = batch_tokens(batch)
    shape = model_shape(model)
    if not isinstance(library, Mapping) or not library:
        raise TypeError("library must be a non-empty mapping position -> sequence of Feature")
    for position, features in library.items():
        if not isinstance(position, int) or not 0 <= position < tokens.shape[1]:
            raise ValueError(f"library position {position!r} out of range (sequences of {tokens.shape[1]})")
        if not features or not all(isinstance(f, Feature) for f in features):
            raise TypeError(f"library[{position}] must be a non-empty sequence of Feature")
    layers = [l for l in range(shape.n_layers) if shape.mlp(l)] if layers is None else list(layers)
    for layer in layers:
        if not isinstance(layer, int) or not shape.has_hook(post_hook(layer)):
            raise ValueError(f"layer {layer!r} has no MLP neurons ({post_hook(layer)!r} missing)")
    if not isinstance(max_features, int) or max_features < 1:
        raise ValueError(f"max_features must be an int >= 1, got {max_features!r}")
    for name, value in (("threshold", threshold), ("min_gain", min_gain)):
        if not isinstance(value, float) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a float in [0, 1], got {value!r}")
    required = {} if required is None else required
    if not isinstance(required, Mapping):
        raise TypeError(f"required must be a mapping position -> feature names, got {type(required).__name__}")
    forced: dict[int, tuple[int, ...]] = {}
    for position, names in required.items():
        if position not in library:
            raise ValueError(f"required position {position!r} is not in the library")
        known = [f.name for f in library[position]]
        names = [names] if isinstance(names, str) else list(names)
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"required feature {missing[0]!r} is not in library[{position}]")
        if len(set(names)) > max_features:
            raise ValueError(f"required[{position}] names {len(set(names))} features, more than max_features={max_features}")
        forced[position] = tuple(sorted({known.index(n) for n in names}))
    _, store = run_capture(model, tokens, [post_hook(l) for l in layers])
    rules = []
    for position, features in sorted(library.items()):
        coded = [f.codes(tokens) for f in features]
        codes = [c for c, _ in coded]
        columns = [values for _, values in coded]
        memo: dict[tuple[int, ...], tuple[list[tuple], Tensor]] = {}
        for layer in layers:
            acts = store[post_hook(layer)][:, position].detach().double().cpu()
            norms = model.W_out[layer].detach().double().cpu().norm(dim=-1)
            weight = acts.abs().mean(0) * norms
            shares = weight / weight.sum().clamp_min(1e-30)
            for neuron, (combo, r2) in enumerate(_greedy(acts, codes, max_features, min_gain,
                                                                       forced.get(position, ()))):
                chosen = tuple(features[i] for i in combo)
                rules.append(NeuronRule(layer, neuron, position, chosen, _table(acts[:, neuron], codes, columns, combo, memo),
                                        float(acts[:, neuron].mean()), r2, float(shares[neuron]), float(acts[:, neuron].mean())))
    return NeuronRules(tuple(rules), threshold, tokens.shape[0])


def _table(acts: Tensor, codes: list[Tensor], columns: list[list], combo: tuple[int, ...],
           memo: dict[tuple[int, ...], tuple[list[tuple], Tensor]]) -> dict[tuple, float]:
    """The rule's table: feature values (in ``combo``'s order) -> mean activation on the fit rows."""
    if not combo:
        return {(): float(acts.mean())}
    if combo not in memo:
        joint = _joint([codes[i] for i in combo])
        first = torch.full((int(joint.max()) + 1,), len(joint), dtype=torch.long, device=joint.device).scatter_reduce_(
            0, joint, torch.arange(len(joint), device=joint.device), "amin")
        keys = [tuple(columns[i][int(codes[i][row])] for i in combo) for row in first.tolist()]
        memo[combo] = keys, joint
    keys, joint = memo[combo]
    sums = torch.zeros(len(keys), dtype=acts.dtype, device=acts.device).index_add_(0, joint, acts)
    means = (sums / torch.bincount(joint, minlength=len(keys)).to(acts.dtype)).tolist()
    return dict(zip(keys, means))
