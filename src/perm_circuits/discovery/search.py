"""Search-based discovery: greedy edge addition and learned hard-concrete edge masks.

- :func:`greedy_edges` lifts the library's greedy node proposer
  (:func:`perm_circuits.analysis.circuits.criteria.propose_circuit`) to edges: keep the edges that matter
  alone, grow the circuit greedily until it is faithful, then prune.
- :func:`mask_pruning` learns a mask over edges with hard-concrete gates and an expected-L0
  penalty (Louizos et al. 2018, "Learning Sparse Neural Networks through L0 Regularization";
  subnetwork probing, Cao et al. 2021, "Low-Complexity Probing via Finding Subnetworks"; edge
  pruning, Bhaskar et al. 2024, "Finding Transformer Circuits with Edge Pruning").
"""

from __future__ import annotations

import math

import torch
from tqdm.auto import tqdm

from perm_circuits.checks import check_int, check_number
from perm_circuits.discovery.interventions import EdgeIntervention
from perm_circuits.discovery.result import DiscoveryResult, check_selection, explains, finish, flip_each, setup

__all__ = ["greedy_edges", "mask_pruning"]

# hard-concrete stretch interval and temperature (Louizos et al. 2018)
_LOW, _HIGH, _BETA = -0.1, 1.1, 2.0 / 3.0


@explains
def greedy_edges(model=None, batch=None, *, threshold: float = 0.1, tolerance: float = 0.1, how: str | None = None,
                 intervention: EdgeIntervention | None = None, chunk: int = 16, seed: int = 0, progress: bool = False,
                 **options) -> DiscoveryResult:
    """The greedy proposer of :func:`~perm_circuits.analysis.circuits.criteria.propose_circuit`, on edges.

    1. Candidates: every edge whose ablation alone (from the full model) moves faithfulness by at
       least ``threshold``, either way; they start the circuit.
    2. Grow: while the circuit's error ``|1 - faithfulness|`` exceeds ``tolerance``, add the
       left-out edge that lowers it most (stop when none lowers it).
    3. Prune: in order of increasing single-ablation effect, drop an edge when the circuit
       without it still has error ``<= tolerance``.

    Score of an edge: its single-ablation effect ``d = |1 - faithfulness(all but e)|`` as
    ``d / (1 + d)``, plus 1 for the circuit's edges (so they rank first).  Cost: one run per edge,
    then one per tried circuit (batched ``chunk`` masks per forward).
    """
    for name, value in (("threshold", threshold), ("tolerance", tolerance)):
        check_number(name, value, low=0)
    check_int("chunk", chunk, 1)
    ei, start = setup(model, batch, intervention, how=how, seed=seed, **options)
    n = ei.n_edges
    error = lambda masks: (1 - ei.faithfulness(ei.evaluate(masks, chunk=chunk))).abs().double()
    effect = error(flip_each(ei.ones()))  # one run per edge
    current = (effect >= threshold).to(ei.weights.W_E.dtype)
    now, runs = float(error(current[None])[0]), n + 1
    for _ in tqdm(range(n), disable=not progress, desc="greedy grow"):
        if now <= tolerance or bool(current.all()):
            break
        left = torch.nonzero(current == 0)[:, 0]
        trials = current[None].repeat(len(left), 1)
        trials[torch.arange(len(left), device=left.device), left] = 1.0
        errors = error(trials)
        runs += len(left)
        best = int(torch.argmin(errors))
        if float(errors[best]) >= now:
            break
        current[int(left[best])], now = 1.0, float(errors[best])
    for e in torch.argsort(effect, stable=True).tolist():
        if current[e] == 0:
            continue
        trial = current.clone()
        trial[e] = 0.0
        value = float(error(trial[None])[0])
        runs += 1
        if value <= tolerance:
            current, now = trial, value
    return finish("greedy_edges", ei, effect / (1 + effect) + current.double(), start, runs,
                  {"threshold": threshold, "tolerance": tolerance}, keep=current)


@explains
def mask_pruning(model=None, batch=None, *, steps: int = 300, penalty: float = 0.5, lr: float = 0.1,
                 target: float = 0.9, how: str | None = None, intervention: EdgeIntervention | None = None,
                 seed: int = 0, progress: bool = False, **options) -> DiscoveryResult:
    """Learn a sparse edge mask with hard-concrete gates (module docstring), then choose a circuit that
    reaches faithfulness ``target``.

    Each edge has a gate parameter ``log_alpha`` (initialised at 3, nearly always on).  Each of
    ``steps`` Adam steps (learning rate ``lr``) samples the gates ``z = clamp(sigmoid((log u -
    log(1-u) + log_alpha) / beta) * (1.1 + 0.1) - 0.1, 0, 1)`` (``u`` uniform from a generator
    seeded with ``seed``, ``beta = 2/3``), runs the model with mask ``z`` and minimises
    ``(1 - faithfulness(z)) + penalty * mean_e P(z_e != 0)``: ``penalty`` is what dropping every
    edge saves, against a faithfulness loss of 1.  The score is ``sigmoid(log_alpha)`` (positive,
    so ranking by ``abs(score)`` ranks by ``log_alpha``).

    Choosing the circuit (``params["selection"]``): the learned circuit, the edges whose
    deterministic gate ``clamp(sigmoid(log_alpha) * 1.2 - 0.1, 0, 1)`` exceeds 0.5 (``"gates"``),
    when its faithfulness reaches ``target``; else the smallest prefix of the ranking that does
    (``"ranking"``).  The training loss is measured on soft masks, and a soft mask of gates near
    1/2 (each edge half kept) can be faithful while no hard rounding of it is: formerly the
    rounded gates alone were returned, with faithfulness 0.000 in 4 of 6 default runs on two small
    tracr programs.  ``params["gates_faithfulness"]`` keeps the rounded gates' faithfulness and
    ``params["reached"]`` says whether the chosen circuit reaches ``target`` (the whole graph is the
    last prefix, so only a ``target`` above 1 is missed; the best circuit is then returned with its
    faithfulness).
    """
    check_int("steps", steps, low=1)
    for name, value in (("penalty", penalty), ("lr", lr)):
        check_number(name, value, low=0)
    check_selection(None, None, target)
    ei, start = setup(model, batch, intervention, how=how, seed=seed, **options)
    span = ei.full_metric - ei.empty_metric
    generator = torch.Generator().manual_seed(seed)
    dtype = ei.weights.W_E.dtype
    log_alpha = torch.full((ei.n_edges,), 3.0, dtype=dtype, device=ei.device, requires_grad=True)
    optimiser = torch.optim.Adam([log_alpha], lr=lr)
    shift = _BETA * math.log(-_LOW / _HIGH)
    for _ in tqdm(range(steps), disable=not progress, desc="mask pruning"):
        u = torch.rand(ei.n_edges, generator=generator, dtype=dtype).clamp(1e-6, 1 - 1e-6).to(ei.device)  # CPU stream
        with torch.enable_grad():
            gate = torch.sigmoid((u.log() - (1 - u).log() + log_alpha) / _BETA) * (_HIGH - _LOW) + _LOW
            z = gate.clamp(0.0, 1.0)
            faith = (ei.metric_of(ei.run(z[None]))[0] - ei.empty_metric) / span
            loss = (1 - faith) + penalty * torch.sigmoid(log_alpha - shift).mean()
            optimiser.zero_grad()
            loss.backward()
        optimiser.step()
    scores = torch.sigmoid(log_alpha.detach().double())
    keep = ((torch.sigmoid(log_alpha.detach()) * (_HIGH - _LOW) + _LOW).clamp(0.0, 1.0) > 0.5).float()
    gates_faith = float(ei.faithfulness(ei.evaluate(keep[None]))[0])
    params = {"steps": steps, "penalty": penalty, "lr": lr, "target": float(target), "selection": "gates",
              "gates_faithfulness": gates_faith}
    if gates_faith >= target:
        params["reached"] = True
        return finish("mask_pruning", ei, scores, start, 2 * steps + 1, params, keep=keep, faithfulness=gates_faith)
    params["selection"] = "ranking"
    result = finish("mask_pruning", ei, scores, start, 2 * steps + 1, params, target=target)
    params["reached"] = bool(result.faithfulness >= target)  # False only for a target above the full graph's 1.0
    return result
