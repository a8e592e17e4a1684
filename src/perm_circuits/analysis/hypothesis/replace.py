"""Replacing a component by a stated rule, and how much of each metric the replacement keeps.

The test of an explanation by replacement: if a component computes a known function of named
features, substituting that function's output for the component's activation keeps the model's
behaviour (the "replace the model's component by the hypothesised algorithm" check of Chan et al.
2022, and of Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via
mechanistic interpretability", ICLR 2023). A rule is a :class:`FeatureRule` (a user function of
the row's feature values) or a :class:`TableRule` fitted by :func:`fit_table` (the component's mean
activation for each combination of feature values, the mean over all rows where a combination was
not seen). :func:`replace` turns a rule into an ordinary hook list for one batch: it composes with
``+`` with every other hook list and attaches only while a model runs (``perm_circuits.hooks``
removes it afterwards, also after an exception).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from perm_circuits.analysis.hypothesis.causal_scrub import check_metric_values, patch_hooks
from perm_circuits.analysis.hypothesis.spec import Component, Feature, batch_tokens
from perm_circuits.hooks import HookList, run_capture, run_logits
from perm_circuits.model_shape import model_shape

__all__ = ["FeatureRule", "Retention", "TableRule", "fit_table", "replace", "retention"]


@dataclass(frozen=True)
class FeatureRule:
    """``fn(values)`` -> the component's activation for one row, ``values`` the row's feature values in order."""

    features: tuple[Feature, ...]
    fn: Callable[..., Tensor]

    def __call__(self, tokens: Tensor) -> Tensor:
        columns = [f.values(tokens) for f in self.features]
        return torch.stack([torch.as_tensor(self.fn(*values), device=tokens.device) for values in zip(*columns)])


@dataclass(frozen=True)
class TableRule:
    """A fitted table: feature values -> mean activation (``default`` where a combination was not seen)."""

    features: tuple[Feature, ...]
    table: Mapping[tuple, Tensor]
    default: Tensor

    def __call__(self, tokens: Tensor) -> Tensor:
        columns = [f.values(tokens) for f in self.features]
        return torch.stack([self.table.get(key, self.default) for key in zip(*columns)])


def _single_hook(component: Component, model) -> str:
    names = component.hook_names(model_shape(model).n_layers)
    if len(names) != 1:
        raise ValueError(f"component {component} spans several hook points; replace one of them")
    return names[0]


def _component(component: Component | str) -> Component:
    if isinstance(component, str):
        return Component.parse(component)
    if not isinstance(component, Component):
        raise TypeError(f"component must be a Component or its name, got {type(component).__name__}")
    return component


def fit_table(model, component: Component | str, features: Feature | tuple[Feature, ...], batch: Any) -> TableRule:
    """A :class:`TableRule`: ``component``'s mean activation on ``batch`` per combination of ``features``."""
    component = _component(component)
    features = (features,) if isinstance(features, Feature) else tuple(features)
    if not features or not all(isinstance(f, Feature) for f in features):
        raise TypeError("features must be a Feature or a non-empty tuple of Feature")
    tokens = batch_tokens(batch)
    component.check(model, tokens.shape[1])
    name = _single_hook(component, model)
    _, store = run_capture(model, tokens, [name])
    acts = store[name][component.index()].float()
    keys = list(zip(*[f.values(tokens) for f in features]))
    groups: dict[tuple, list[int]] = {}
    for row, key in enumerate(keys):
        groups.setdefault(key, []).append(row)
    table = {key: acts[torch.tensor(rows, device=acts.device)].mean(0) for key, rows in groups.items()}
    return TableRule(features, table, acts.mean(0))


def replace(model, component: Component | str, rule: FeatureRule | TableRule | Callable[[Tensor], Tensor],
            batch: Any) -> HookList:
    """Hooks that set ``component`` to ``rule``'s output on ``batch`` (a rule maps the batch's tokens to
    the component's activation, one slice per row). Run them on that batch, alone or ``+`` others."""
    component = _component(component)
    if not callable(rule):
        raise TypeError(f"rule must be a FeatureRule, a TableRule or a callable, got {type(rule).__name__}")
    tokens = batch_tokens(batch)
    component.check(model, tokens.shape[1])
    name = _single_hook(component, model)
    value = rule(tokens)
    if not isinstance(value, Tensor) or value.shape[0] != tokens.shape[0]:
        raise ValueError(f"rule must return one activation per row ({tokens.shape[0]}), got "
                         f"{getattr(value, 'shape', type(value).__name__)}")
    return patch_hooks(component, model_shape(model).n_layers, {name: value})


@dataclass(frozen=True)
class Retention:
    """Each metric with and without the hooks; ``retention = replaced / model`` (per metric, mean-reduced)."""

    metrics: tuple[str, ...]
    model: tuple[float, ...]
    replaced: tuple[float, ...]

    @property
    def retention(self) -> dict[str, float]:
        return {m: (r / c if c else float("nan")) for m, c, r in zip(self.metrics, self.model, self.replaced)}

    def to_dataframe(self):
        import pandas as pd

        kept = self.retention
        return pd.DataFrame([{"metric": m, "model": c, "replaced": r, "retention": kept[m]}
                             for m, c, r in zip(self.metrics, self.model, self.replaced)])


def retention(model, batch: Any, hooks: HookList, metrics: Mapping[str, Callable[[Tensor, Any], Tensor]]) -> Retention:
    """Every metric of ``metrics`` (name -> ``metric(logits, batch)`` per-row values) with and without ``hooks``."""
    tokens = batch_tokens(batch)
    if not isinstance(metrics, Mapping) or not metrics or not all(callable(m) for m in metrics.values()):
        raise TypeError("metrics must be a non-empty mapping name -> metric(logits, batch)")
    clean, replaced = run_logits(model, tokens), run_logits(model, tokens, hooks)
    n = tokens.shape[0]
    before = tuple(float(check_metric_values(m(clean, batch), n).mean()) for m in metrics.values())
    after = tuple(float(check_metric_values(m(replaced, batch), n).mean()) for m in metrics.values())
    return Retention(tuple(metrics), before, after)
