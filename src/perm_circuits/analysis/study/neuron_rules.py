"""The shipped models' MLP neurons, each explained by a named rule over the features of a step.

A sequence is ``x1 y1 x2 y2 x3 y3 x4 y4 x5`` (positions 0..8); step ``k`` asks ``y_k`` at position
``2(k - 1)``. The feature library of a step (:func:`step_features`) names what a neuron there could
read: the query ``x_k``, the set of ``y`` values already used, "value ``v`` is unused", whether the
query repeats ``x1``, the ``y`` bound to the query, the matched slot, the answer set (the bound ``y``,
else the unused values), the previous pair, and each earlier ``x_j`` and ``y_j``.
:func:`fit_model_rules` fits every neuron's rule at every step's query position on the exhaustive
*train* set (every order of every training permutation, with and without the model's repeats:
:func:`exhaustive_sets`), and :func:`replacement_retention` scores the replacement MLP on the
exhaustive *test* set: the docs' elimination accuracy (last step, no repeat), recall accuracy (last
step, repeated query) and the agreement with the model's own answers at steps 1-4 (where the
answer is not yet determined, so accuracy is near chance for the model itself), with the rules in
place of the neurons.

In a model of several layers, the neurons of every layer but the last are also fitted at the ``y``
positions (:func:`pair_features`), since later layers read them there; the last layer's neurons
at a ``y`` position reach no scored output and are left alone. There, the last layer's neurons at
the last step read the *answer set* first (``required`` of
:func:`~perm_circuits.analysis.hypothesis.neurons.fit_neuron_rules`), then two features chosen
greedily: left to the greedy choice, the two-layer model's layer-1 neurons read the matched slot,
``y1`` and ``y2`` (the most variance), which name the recalled ``y`` only when the match is in the
first two pairs, and the rules alone kept 68.5% of recall; with the answer set read first they keep
the answer at every slot.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from perm_circuits.analysis.hypothesis import Feature, retention
from perm_circuits.analysis.hypothesis.neurons import NeuronRules, fit_neuron_rules
from perm_circuits.model_shape import model_shape

__all__ = ["QUERY_POSITIONS", "THRESHOLD", "VARIANTS", "Y_POSITIONS", "agreement", "pair_features", "exhaustive_sets", "fit_model_rules",
           "held_out_r2", "neuron_library", "replacement_retention", "step_accuracy", "step_features"]

QUERY_POSITIONS = (0, 2, 4, 6, 8)
Y_POSITIONS = (1, 3, 5, 7)
THRESHOLD = 0.9  # a neuron's rule explains it when R^2 >= this on the fit rows
VARIANTS = ("keep", "mean", "rule")


def _mask(ys: Tensor) -> Tensor:
    """The set of values in each row of ``ys`` as a bitmask (bit ``v - 1`` for value ``v``)."""
    if ys.shape[1] == 0:
        return torch.zeros(ys.shape[0], dtype=torch.long, device=ys.device)
    return (1 << (ys - 1)).sum(1)


def _beside(t: Tensor, matched: Tensor, offset: int) -> Tensor:
    """The token ``offset`` places from the matched ``x`` (0 where there is no match or no such token
    before the query)."""
    slot = matched.int().argmax(1)
    index = 2 * slot + offset
    ok = matched.any(1) & (index >= 0) & (index < matched.shape[1] * 2)
    return torch.where(ok, t.gather(1, index.clamp(0, t.shape[1] - 1)[:, None])[:, 0], 0)


def step_features(position: int) -> tuple[Feature, ...]:
    """The named features of the step whose query sits at ``position`` (module docstring)."""
    if position not in QUERY_POSITIONS:
        raise ValueError(f"position must be a query position {QUERY_POSITIONS}, got {position!r}")
    p = position

    def matched(t: Tensor) -> Tensor:
        return t[:, 0:p:2] == t[:, p:p + 1]

    def bound(t: Tensor) -> Tensor:
        return (matched(t) * t[:, 1:p:2]).sum(1)

    out = [Feature("query x", lambda t: t[:, p], batched=True)]
    if p == 0:
        return tuple(out)
    out += [
        Feature("used y values", lambda t: _mask(t[:, 1:p:2]), batched=True),
        *(Feature(f"value {v} unused", lambda t, v=v: ~(t[:, 1:p:2] == v).any(1), batched=True) for v in range(1, 6)),
        Feature("query repeats x1", lambda t: t[:, p] == t[:, 0], batched=True),
        Feature("y bound to the query", bound, batched=True),
        Feature("matched slot", lambda t: torch.where(matched(t).any(1), matched(t).int().argmax(1), -1), batched=True),
        Feature("answer set", lambda t: torch.where(bound(t) > 0, bound(t), 32 + 31 - _mask(t[:, 1:p:2])), batched=True),
        Feature("previous pair", lambda t: t[:, p - 2] * 8 + t[:, p - 1], batched=True),
        Feature("y before the matched x", lambda t: _beside(t, matched(t), -1), batched=True),
        Feature("y after the matched pair", lambda t: _beside(t, matched(t), 3), batched=True),
        *(Feature(f"x{j + 1}", lambda t, j=j: t[:, 2 * j], batched=True) for j in range(p // 2)),
        *(Feature(f"y{j + 1}", lambda t, j=j: t[:, 2 * j + 1], batched=True) for j in range(p // 2)),
    ]
    return tuple(out)


def pair_features(position: int) -> tuple[Feature, ...]:
    """The named features of the ``y`` token at odd ``position`` (the answer of pair ``k``, ``position =
    2k - 1``): the ``y`` itself, its ``x``, the ``y`` values used before it, "value ``v`` was used before",
    the previous pair, and each earlier ``x_j`` and ``y_j``."""
    if position not in Y_POSITIONS:
        raise ValueError(f"position must be a y position {Y_POSITIONS}, got {position!r}")
    p = position
    out = [Feature("this y", lambda t: t[:, p], batched=True), Feature("its x", lambda t: t[:, p - 1], batched=True)]
    if p == 1:
        return tuple(out)
    return tuple(out + [
        Feature("used y values", lambda t: _mask(t[:, 1:p:2]), batched=True),
        *(Feature(f"value {v} unused", lambda t, v=v: ~(t[:, 1:p:2] == v).any(1), batched=True) for v in range(1, 6)),
        Feature("previous pair", lambda t: t[:, p - 3] * 8 + t[:, p - 2], batched=True),
        *(Feature(f"x{j + 1}", lambda t, j=j: t[:, 2 * j], batched=True) for j in range(p // 2)),
        *(Feature(f"y{j + 1}", lambda t, j=j: t[:, 2 * j + 1], batched=True) for j in range(p // 2)),
    ])


def neuron_library(positions: tuple[int, ...] = QUERY_POSITIONS) -> dict[int, tuple[Feature, ...]]:
    """``{position: features}``: :func:`step_features` at query positions, :func:`pair_features` at ``y`` positions."""
    return {p: step_features(p) if p in QUERY_POSITIONS else pair_features(p) for p in positions}


def _targets(batch: Any) -> Tensor:
    """The permutation batch's targets (the one place that reads a permutation field)."""
    return batch.targets


def _tokens(batch: Any) -> Tensor:
    from perm_circuits.analysis.hypothesis.spec import batch_tokens

    return batch_tokens(batch)


def step_accuracy(position: int):
    """The per-row metric ``argmax at position == target``; at 8 it is the docs' elimination or recall accuracy."""
    def metric(logits: Tensor, batch: Any) -> Tensor:
        return (logits[:, position].argmax(-1) == _targets(batch)[:, position].to(logits.device)).float()

    metric.__name__ = f"accuracy@{position}"
    return metric


def agreement(reference: Tensor, positions: tuple[int, ...]):
    """The per-row metric: the fraction of ``positions`` where the argmax equals ``reference``'s argmax
    (the model's own logits on the same batch), so the model itself scores 1."""
    expected = reference[:, list(positions)].argmax(-1)

    def metric(logits: Tensor, batch: Any) -> Tensor:
        return (logits[:, list(positions)].argmax(-1) == expected.to(logits.device)).float().mean(1)

    return metric


def held_out_r2(model, rules: NeuronRules, batch: Any) -> dict[tuple[int, int, int], float]:
    """``{(layer, neuron, position): R^2}`` of each rule's prediction on ``batch`` (rows it was not fitted on)."""
    from perm_circuits.analysis.hypothesis.neurons import post_hook
    from perm_circuits.hooks import run_capture

    tokens = _tokens(batch)
    predicted = rules.predict(tokens)
    layers = sorted({layer for layer, _ in predicted})
    _, store = run_capture(model, tokens, [post_hook(layer) for layer in layers])
    out = {}
    for (layer, position), values in predicted.items():
        acts = store[post_hook(layer)][:, position].double().cpu()
        sst = ((acts - acts.mean(0)) ** 2).sum(0)
        sse = ((acts - values.double()) ** 2).sum(0)
        r2 = torch.where(sst > 1e-12, 1 - sse / sst.clamp_min(1e-30), (sse <= 1e-12).double())
        for neuron in range(acts.shape[1]):
            out[(layer, neuron, position)] = float(r2[neuron])
    return out


def exhaustive_sets(model, split: str) -> dict[str, Any]:
    """Every order of every permutation of ``split``: ``{"elimination": no repeat, "recall": the last
    query repeating each of the model's training repeat sources}`` (the recall batches concatenated)."""
    from perm_circuits.models import task_config_of
    from perm_circuits.tasks.permutation_data import exhaustive_batch

    config = task_config_of(model)
    recall = [exhaustive_batch(config, split=split, repeat_source=k - 1) for k in config.repeat_sources]
    return {"elimination": exhaustive_batch(config, split=split), "recall": _concat(recall)}


def _concat(batches: list) -> Any:
    """The rows of several batches of one type, in order (tensor fields and ``extras`` tensors joined)."""
    import dataclasses

    first = batches[0]
    joined = {}
    for field in dataclasses.fields(first):
        values = [getattr(b, field.name) for b in batches]
        if isinstance(values[0], Tensor):
            joined[field.name] = torch.cat(values)
        elif isinstance(values[0], dict) or hasattr(values[0], "keys"):
            joined[field.name] = {k: torch.cat([v[k] for v in values]) for k in values[0]}
        else:
            joined[field.name] = values[0]
    return type(first)(**joined)


def fit_model_rules(model, *, threshold: float = THRESHOLD, max_features: int = 3, rows: int | None = None,
                    seed: int = 0) -> NeuronRules:
    """Every MLP neuron's rule at every query position, fitted on the exhaustive train set (both skills;
    ``rows``: a random subset of that many rows, for quick checks)."""
    sets = exhaustive_sets(model, "train")
    tokens = torch.cat([_tokens(sets["elimination"]), _tokens(sets["recall"])])
    if rows is not None:
        tokens = tokens[torch.randperm(len(tokens), generator=torch.Generator().manual_seed(seed))[:rows]]
    rules = fit_neuron_rules(model, tokens, neuron_library(), threshold=threshold, max_features=max_features)
    n_layers = model_shape(model).n_layers
    if n_layers == 1:
        return rules
    below = fit_neuron_rules(model, tokens, neuron_library(Y_POSITIONS), layers=list(range(n_layers - 1)),
                             threshold=threshold, max_features=max_features)  # what later layers read
    last, answer = n_layers - 1, QUERY_POSITIONS[-1]
    top = fit_neuron_rules(model, tokens, {answer: step_features(answer)}, layers=[last], threshold=threshold,
                           max_features=max_features, required={answer: ("answer set",)})
    kept = [r for r in rules.rules if (r.layer, r.position) != (last, answer)]
    order = sorted(kept + list(below.rules) + list(top.rules), key=lambda r: (r.layer, r.position, r.neuron))
    return NeuronRules(tuple(order), rules.threshold, rules.n_fit)


def replacement_retention(model, rules: NeuronRules, sets: dict[str, Any] | None = None) -> list[dict]:
    """Per variant (unexplained neurons kept, mean-ablated, or on their rule too) and skill, each metric
    with the model's neurons and with the rules: one row per (variant, metric)."""
    sets = exhaustive_sets(model, "test") if sets is None else sets
    from perm_circuits.hooks import run_logits

    own = run_logits(model, _tokens(sets["elimination"]))
    metrics = {"elimination": {"elimination_accuracy": step_accuracy(8),
                               "steps_1_4_agreement": agreement(own, QUERY_POSITIONS[:-1])},
               "recall": {"recall_accuracy": step_accuracy(8)}}
    out = []
    for variant in VARIANTS:
        for skill, batch in sets.items():
            result = retention(model, batch, rules.hooks(model, batch, variant), metrics[skill])
            for name, clean, replaced in zip(result.metrics, result.model, result.replaced):
                out.append({"variant": variant, "metric": name, "model_metric": clean, "replaced_metric": replaced,
                            "retention": replaced / clean if clean else float("nan"), "n_rows": len(_tokens(batch))})
    return out
