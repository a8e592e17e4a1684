"""The one optimal-ablation solver: the constant that does least harm (Li & Janson 2024).

Li and Janson ("Optimal ablation for interpretability", NeurIPS 2024) ablate a component by
freezing its activation to the constant ``c`` minimising the task loss, ``min_c L(M with the
component set to c)``.  Every optimal ablation of the library finds ``c`` here, with one procedure:
``steps`` (:data:`OPTIMAL_STEPS`, 20) full-batch L-BFGS iterations (strong-Wolfe line search,
learning rate 1) on ``c`` alone, from a start the caller gives (the mean activation over the
reference batch), the model's parameters frozen meanwhile.  Deterministic on CPU.  Not a
guaranteed global minimum; the line search only accepts steps that lower the loss, so the result
is never worse than its start on the batch it was fitted on.

What differs between callers is only the objective ``loss_of(c)``, i.e. which forward pass runs
with the constant in place:

- :func:`perm_circuits.analysis.interventions.core.minimise_constant`: the hooked model itself,
  any loss (any task's ablations);
- :func:`perm_circuits.analysis.interventions.optimal.optimise_constant`: the study's models, the
  permutation task's answer loss, in plain PyTorch from the ablated activation onwards (faster;
  it falls back on the hooked model);
- :func:`perm_circuits.discovery.interventions.prepare_edges` (``how="optimal"``): one constant per
  sender of the edge graph, maximising the edge metric in the edge forward.

This module is the only place that builds an optimiser for an ablation constant
(``tests/test_optimal_solver.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["OPTIMAL_STEPS", "lbfgs_constant"]

OPTIMAL_STEPS = 20
"""L-BFGS iterations of the optimal-ablation search."""


def lbfgs_constant(
    model,
    loss_of: Callable[[Tensor], Tensor],
    start: Float[Tensor, "*shape"],
    steps: int = OPTIMAL_STEPS,
) -> Float[Tensor, "*shape"]:
    """The constant after ``steps`` full-batch L-BFGS iterations (strong-Wolfe line search) on the
    scalar ``loss_of(constant)`` from ``start``; ``model``'s parameters (when a model is given: the
    objective reads its weights) are frozen meanwhile and restored after.  ``steps=0``: ``start``.
    The callers validate ``steps``."""
    constant = start.detach().clone().requires_grad_(True)
    if steps == 0:
        return constant.detach()
    params = [p for p in model.parameters() if p.requires_grad] if model is not None else []
    for p in params:
        p.requires_grad_(False)
    try:
        optimiser = torch.optim.LBFGS([constant], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

        def closure() -> Tensor:
            optimiser.zero_grad()
            value = loss_of(constant)
            value.backward()
            return value

        with torch.enable_grad():
            optimiser.step(closure)
    finally:
        for p in params:
            p.requires_grad_(True)
    return constant.detach()
