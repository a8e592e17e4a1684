"""Interchange intervention accuracy (IIA): does a component carry a high-level variable?

Geiger, Lu, Icard, Potts, "Causal Abstractions of Neural Networks" (NeurIPS 2021); Geiger,
Wu, Lu, Rozner, Kreiss, Icard, Goodman, Potts, "Inducing Causal Structure for Interpretable
Neural Networks" (ICML 2022) name the measure. A high-level model computes named variables from
the input and an output from them; an *alignment* maps each variable to a model component. For a
pair of inputs (base, source) and a variable ``V``: the model runs on the base with ``V``'s
component set to its value on the source; the high-level model computes its output on the base
with ``V`` set to its value on the source. IIA is the fraction of pairs where the model's
prediction (the argmax at ``position``) equals the high-level output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from perm_circuits.analysis.hypothesis.causal_scrub import patch_hooks
from perm_circuits.analysis.hypothesis.spec import Component, Feature, batch_tokens
from perm_circuits.hooks import run_capture, run_logits
from perm_circuits.model_shape import model_shape

__all__ = ["HighLevelModel", "InterchangeResult", "interchange_accuracy"]


@dataclass(frozen=True)
class HighLevelModel:
    """A causal model over named variables: ``variables[name]`` computes each from a row's tokens,
    ``output(values)`` the predicted token id from a dict ``name -> value``."""

    variables: Mapping[str, Feature]
    output: Callable[[dict[str, Any]], int]

    def __post_init__(self) -> None:
        if not isinstance(self.variables, Mapping) or not all(isinstance(f, Feature) for f in self.variables.values()):
            raise TypeError("variables must be a mapping name -> Feature")
        if not callable(self.output):
            raise TypeError(f"output must be callable, got {type(self.output).__name__}")


@dataclass(frozen=True)
class InterchangeResult:
    """IIA per aligned variable (``accuracy``) and overall, over ``n_pairs`` pairs each."""

    accuracy: Mapping[str, float]
    overall: float
    n_pairs: int

    def to_dataframe(self):
        import pandas as pd

        return pd.DataFrame([{"variable": name, "iia": value, "n_pairs": self.n_pairs}
                             for name, value in self.accuracy.items()])


def interchange_accuracy(
    model,
    high_level_model: HighLevelModel,
    alignment: Mapping[str, Component | str],
    pairs: Int[Tensor, "n 2"],
    *,
    batch: Any,
    position: int = -1,
) -> InterchangeResult:
    """IIA of ``alignment`` (variable -> component) on ``pairs`` of row indices ``(base, source)`` of ``batch``.

    The model's prediction is the argmax of its logits at ``position`` (module docstring).
    """
    if not isinstance(high_level_model, HighLevelModel):
        raise TypeError(f"high_level_model must be a HighLevelModel, got {type(high_level_model).__name__}")
    tokens = batch_tokens(batch)
    if not isinstance(alignment, Mapping) or not alignment:
        raise ValueError("alignment must be a non-empty mapping variable -> component")
    unknown = sorted(set(alignment) - set(high_level_model.variables))
    if unknown:
        raise ValueError(f"alignment names variables the high-level model lacks: {unknown}")
    aligned = {name: c if isinstance(c, Component) else Component.parse(c) for name, c in alignment.items()}
    for component in aligned.values():
        component.check(model, tokens.shape[1])
    if not isinstance(pairs, Tensor) or pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.shape[0] < 1 \
            or pairs.dtype.is_floating_point:
        raise ValueError(f"pairs must be an integer tensor [n >= 1, 2] of (base, source) rows, got {pairs!r}")
    if int(pairs.min()) < 0 or int(pairs.max()) >= tokens.shape[0]:
        raise ValueError(f"pairs must index rows 0..{tokens.shape[0] - 1}, got {int(pairs.min())}..{int(pairs.max())}")
    if not isinstance(position, int) or not -tokens.shape[1] <= position < tokens.shape[1]:
        raise ValueError(f"position must be an int within the sequence of {tokens.shape[1]}, got {position!r}")

    n_layers = model_shape(model).n_layers
    base, source = tokens[pairs[:, 0]], tokens[pairs[:, 1]]
    values = {name: f.values(tokens) for name, f in high_level_model.variables.items()}
    accuracy = {}
    for name, component in aligned.items():
        names = component.hook_names(n_layers)
        _, store = run_capture(model, source, names)
        index = component.index()
        hooks = patch_hooks(component, n_layers, {hook: store[hook][index] for hook in names})
        predicted = run_logits(model, base, hooks)[:, position].argmax(-1)
        expected = []
        for b, s in pairs.tolist():
            row = {var: column[b] for var, column in values.items()}
            row[name] = values[name][s]
            expected.append(int(high_level_model.output(row)))
        accuracy[name] = float((predicted == torch.tensor(expected, device=predicted.device)).float().mean())
    return InterchangeResult(accuracy, sum(accuracy.values()) / len(accuracy), pairs.shape[0])
