"""Previous-token, induction and duplicate-token scores of every head, in every layer.

The attention-pattern scores of the induction-head literature (Elhage et al. 2021, "A
Mathematical Framework for Transformer Circuits"; Olsson et al. 2022, "In-context Learning and
Induction Heads"; the duplicate-token head of Wang et al. 2022, "Interpretability in the Wild"),
read on this task's sequences ``x1 y1 x2 y2 ... xV`` (``2V - 1`` input tokens: ``x_k`` at 0-based
position ``2(k-1)``, ``y_k`` at ``2(k-1) + 1``).  Bietti et al. 2023 ("Birth of a Transformer")
predict that in-context recall needs a previous-token head feeding an induction head.

Per head, from ``blocks.L.attn.hook_pattern`` in one no-grad forward over a test set:

- ``previous_token``: the mean attention of each position ``p >= 1`` on ``p - 1``, over every
  position and every sample;
- ``induction``: on sequences whose last query ``xV`` repeats an earlier query ``x_k``, the
  attention of the last position on ``y_k`` (the token right after the earlier occurrence of the
  last token), averaged over the repeated samples;
- ``duplicate_token``: on the same sequences, the attention of the last position on ``x_k``.

Both recall scores are also given per source ``k = 1..V-1`` (``induction_by_source``,
``duplicate_by_source``), so a shortcut head that only matches ``x1`` shows as a high first entry
and low others, while a general induction head is high for every ``k``.

The default test set (:func:`induction_test_set`) repeats every earlier query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_positive_int, check_seed
from perm_circuits.circuit import Node
from perm_circuits.hooks import check_hooks, run_capture
from perm_circuits.models import model_config_of
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import (
    TaskConfig,
    make_test_set,
    repeat_source_of,
    validate_tokens,
)

__all__ = ["InductionScore", "InductionScores", "induction_scores", "induction_test_set"]


@dataclass(frozen=True)
class InductionScore:
    """The scores of one head (module docstring); ``*_by_source[k - 1]`` over the samples whose last
    query repeats ``x_k`` (``nan`` where the test set has none)."""

    layer: int
    head: int
    component: str
    previous_token: float
    induction: float
    duplicate_token: float
    induction_by_source: tuple[float, ...]
    duplicate_by_source: tuple[float, ...]


@dataclass(frozen=True)
class InductionScores:
    """Induction-circuit scores of every head of a model.

    Attributes:
        model_name: the model's config name.
        n_samples: sequences in the test set.
        n_repeated: sequences whose last query repeats an earlier one (the induction and
            duplicate-token scores average over these).
        repeated_by_source: how many of them repeat ``x_k``, for ``k = 1..V-1``.
        heads: one record per head, layer-major.
    """

    model_name: str
    n_samples: int
    n_repeated: int
    repeated_by_source: tuple[int, ...]
    heads: tuple[InductionScore, ...]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per head; the per-source scores as columns ``induction_x{k}`` / ``duplicate_x{k}``."""
        rows = []
        for score in self.heads:
            row = {"model": self.model_name, **asdict(score)}
            for kind in ("induction", "duplicate"):
                row.update({f"{kind}_x{k}": value for k, value in enumerate(row.pop(f"{kind}_by_source"), start=1)})
            rows.append(row)
        return pd.DataFrame(rows)

    def get(self, layer: int, head: int) -> InductionScore:
        """The record of head ``L{layer}H{head}`` (KeyError if the model has no such head)."""
        for score in self.heads:
            if score.layer == layer and score.head == head:
                return score
        raise KeyError(f"no head L{layer}H{head} in {self.model_name}")

    def __iter__(self) -> Iterator[InductionScore]:
        return iter(self.heads)


def induction_test_set(V: int, n: int = 2000, seed: int = 1234) -> TaskBatch:
    """The default test set: every sequence repeated, the source uniform over ``x1..x_{V-1}``."""
    config = TaskConfig(V=V, repeat_ratio=1.0, repeat_sources=tuple(range(1, V)))
    return make_test_set(config, n=n, seed=seed)


def _resolve_tokens(model, test_set: object, n: int, seed: int) -> Int[Tensor, "batch seq"]:
    V = model_config_of(model).V
    if test_set is None:
        return induction_test_set(V, n=n, seed=seed).tokens
    if isinstance(test_set, TaskBatch):
        if test_set.tokens.shape[1] != 2 * V - 1:
            raise ValueError(f"test_set has V={(test_set.tokens.shape[1] + 1) // 2} but the model has V={V}")
        return validate_tokens(test_set.tokens, V)
    if isinstance(test_set, Tensor):
        return validate_tokens(test_set, V)
    raise TypeError(f"test_set must be a TaskBatch, a token tensor or None, "
                    f"got {type(test_set).__name__}")


def _last_query_scores(
    patterns: Float[Tensor, "batch layer head q k"], source: Int[Tensor, " batch"]
) -> tuple[Float[Tensor, "batch layer head"], Float[Tensor, "batch layer head"]]:
    """Attention of the last position on ``y_k`` and on ``x_k`` per repeated sample (source k-1 >= 0)."""
    last = patterns[:, :, :, -1, :]  # [batch, layer, head, key]
    rows = torch.arange(len(source), device=source.device)
    return last[rows, :, :, 2 * source + 1], last[rows, :, :, 2 * source]  # x_k at 2(k-1), y_k right after it


def induction_scores(
    model,
    test_set: TaskBatch | Int[Tensor, "batch seq"] | None = None,
    *,
    n: int = 2000,
    seed: int = 1234,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> InductionScores:
    """Previous-token, induction and duplicate-token scores of every head (module docstring), read
    from the patterns under ``hooks`` on ``test_set`` (a TaskBatch or tokens ``[batch, 2V-1]``, some
    last query repeating an earlier one; default :func:`induction_test_set` ``(V, n, seed)``)."""
    check_positive_int("n", n)
    check_seed(seed)
    hooks = check_hooks(model, hooks)
    config = model_config_of(model)
    V, n_layers, n_heads = config.V, config.n_layers, config.n_heads
    tokens = _resolve_tokens(model, test_set, n, seed)
    source = repeat_source_of(tokens)
    repeated = source >= 0
    if not bool(repeated.any()):
        raise ValueError(
            "test_set has no repeated samples (no sequence whose last query repeats an earlier x_k): "
            "the induction and duplicate-token scores need some; use induction_test_set(V) or a "
            "TaskConfig with repeat_ratio > 0"
        )

    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_layers)]
    store = run_capture(model, tokens, names, hooks)[1]
    patterns = torch.stack([store[name].float() for name in names], dim=1)  # [batch, layer, head, q, k]

    previous = patterns.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 3))  # p -> p-1, [layer, head]
    kept = source[repeated]
    to_y, to_x = _last_query_scores(patterns[repeated], kept)
    induction, duplicate = to_y.mean(dim=0), to_x.mean(dim=0)
    counts = tuple(int((kept == k).sum()) for k in range(V - 1))
    by_y = [to_y[kept == k].mean(dim=0) for k in range(V - 1)]  # nan where no sample repeats x_k
    by_x = [to_x[kept == k].mean(dim=0) for k in range(V - 1)]

    heads = tuple(
        InductionScore(layer=layer, head=head, component=str(Node(layer, head)),
            previous_token=float(previous[layer, head]), induction=float(induction[layer, head]),
            duplicate_token=float(duplicate[layer, head]),
            induction_by_source=tuple(float(values[layer, head]) for values in by_y),
            duplicate_by_source=tuple(float(values[layer, head]) for values in by_x))
        for layer in range(n_layers)
        for head in range(n_heads)
    )
    return InductionScores(model_name=config.name, n_samples=int(tokens.shape[0]), n_repeated=int(repeated.sum()),
        repeated_by_source=counts, heads=heads)
