"""Exact Bayesian posteriors over the next y at every y-prediction step.

Given the pairs revealed before step ``k`` and the query ``x_k``, with a uniform prior over a set of
permutations,

    P(y_k = v | context) = #{p in prior support consistent with context, p(x_k) = v} / #{p consistent}

Priors: ``"uniform"`` (all ``V!`` permutations: uniform over the unused values for a new x, a point
mass on the earlier y for a repeated x) and ``"train"`` (the train split only, 96 of 120 for V=5:
the best a model trained on it can learn; on test permutations it is *not* uniform).  Where no train
permutation is consistent (always at the last step of a test permutation, often at step ``V - 1``)
the uniform posterior is used and ``fallback`` says where.

The repeat distribution does not enter: the generator draws the permutation, the x order and the
repeat (``repeat_ratio``, ``k`` uniform over ``repeat_sources``) independently, so the likelihood
``P(x_1..x_k)`` of the observed queries is the same for every ``p`` and cancels from the posterior.
The formula holds for every ``repeat_ratio`` and ``repeat_sources`` (which only change how often
each context occurs); ``tests/test_posterior.py`` checks it against brute-force enumeration of the
generative process.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from perm_circuits.tasks.permutation_data import TaskConfig, all_permutations, check_consistent, split_permutations, validate_tokens

__all__ = ["Posterior", "bayes_posterior", "prior_permutations"]


@dataclass(frozen=True)
class Posterior:
    """Posterior over values ``1..V`` at each step: ``probs[b, k, v - 1] = P(y_{k+1} = v | context)``,
    ``fallback`` where the requested prior had no consistent permutation (the uniform posterior is
    used there), ``n_consistent`` the number of prior permutations consistent with the context at each step."""

    probs: Float[Tensor, "batch step value"]
    fallback: Bool[Tensor, "batch step"]
    n_consistent: Int[Tensor, "batch step"]


def prior_permutations(config: TaskConfig, prior: str) -> Int[Tensor, "n V"]:
    """The support of a named prior: ``"uniform"`` (all permutations) or ``"train"``."""
    if prior == "uniform":
        return all_permutations(config.V)
    if prior == "train":
        return split_permutations(config)[0]
    raise ValueError(f"prior must be 'uniform' or 'train', got {prior!r}")


CHUNK_ELEMENTS = 2**22
"""Rows of a batch are counted in chunks of at most this many (row, step, permutation) cells: V = 8
has 40,320 permutations, so a whole 5,000-row test set would take tens of GB at once."""


def _posterior_from(
    perms: Int[Tensor, "n V"], xs: Int[Tensor, "batch V"], ys: Int[Tensor, "batch Vm1"]
) -> tuple[Tensor, Tensor]:
    n, V = perms.shape
    rows = max(1, CHUNK_ELEMENTS // (n * V))  # each row's counts are its own: chunking changes no bit
    # counts[b, k, v - 1] = #consistent p with p(x_k) = v (sums of 0/1: exact in float64, in any order),
    # written chunk by chunk into one tensor (nothing else outlives a chunk, so its memory goes back)
    perms = perms.to(xs.device)
    counts = torch.zeros(len(xs), V, V, dtype=torch.float64, device=xs.device)
    for start in range(0, len(xs), rows):
        values = perms.T[xs[start:start + rows] - 1]  # [rows, step, n]: values[b, k, p] = p(x_k)
        consistent = torch.ones_like(values, dtype=torch.float64)  # p agrees with every pair before step k
        consistent[:, 1:] = (values[:, :-1] == ys[start:start + rows, :, None]).cummin(dim=1).values
        counts[start:start + rows].scatter_add_(2, values - 1, consistent)
    return counts, counts.sum(dim=2)  # each consistent p has one value p(x_k): the number consistent


def bayes_posterior(inputs: Int[Tensor, "batch seq"], config: TaskConfig, prior: str = "uniform") -> Posterior:
    """Exact posterior at every y-prediction position of ``inputs`` (see module docstring)."""
    if prior not in ("uniform", "train"):
        raise ValueError(f"prior must be 'uniform' or 'train', got {prior!r}")
    inputs = validate_tokens(inputs, config.V)
    check_consistent(inputs)
    xs, ys = inputs[:, 0::2], inputs[:, 1::2]
    counts, total = _posterior_from(all_permutations(config.V), xs, ys)
    uniform = counts / total[..., None]
    if prior == "uniform":
        return Posterior(uniform.float(), torch.zeros_like(total, dtype=torch.bool), total.long())
    counts_p, total_p = _posterior_from(prior_permutations(config, prior), xs, ys)
    fallback = total_p == 0
    probs = torch.where(fallback[..., None], uniform, counts_p / total_p.clamp(min=1)[..., None])
    return Posterior(probs.float(), fallback, total_p.long())
