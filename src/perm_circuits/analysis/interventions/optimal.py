"""Optimal ablation: the constant activation that minimises the task loss (Li & Janson 2024).

Li and Janson ("Optimal ablation for interpretability", NeurIPS 2024) define a component's
ablation loss gap as ``min_c L(M with the component's activation set to the constant c) - L(M)``:
of every value the component could be frozen to, the one that does least harm.  Zero, mean and
resample ablation each pick one particular constant or distribution; zero ablation can move the
model far off its usual inputs (a head whose mean output is large loses a constant the rest of
the model relies on), and mean ablation, though on-distribution per coordinate, is not the value
the rest of the model is best adapted to.  The optimal constant removes exactly the information
that *varies* with the input, and nothing the model could get from a constant: what is left of
the loss gap is the information the component carries.

Here the task loss is the mean cross-entropy of the V answers (the ``loss`` of
:func:`~perm_circuits.evaluate.evaluate_logits`, the training objective) on a reference batch (by
default the test set being evaluated), and ``c`` is found by ``steps`` (20) full-batch L-BFGS
iterations (strong-Wolfe line search) on ``c`` alone, the model frozen, initialised at the mean
activation over the same batch: a fixed, deterministic procedure (same model, batch and selection
-> the same constant on CPU), not a guaranteed global minimum.  The line search only accepts
steps that lower the loss, so on the reference batch the result is never worse than mean
ablation; on a held-out batch it can be.  L-BFGS rather than Adam: on d32h2, 20 L-BFGS
iterations reach a lower loss than 200 Adam steps (L0H1: 1.69 vs 1.76 nats, mean ablation 3.01;
learning rates 0.01-0.1 tried), at a sixth of the cost.

Speed: the bridge's per-call machinery costs far more than this model's arithmetic, so the
search runs in plain PyTorch on the bridge's weights from the ablated activation onwards (the
activations upstream are captured once with the bridge): ``blocks.L.attn.hook_z``,
``blocks.L.mlp.hook_post`` and ``blocks.L.hook_mlp_out`` of LayerNorm / unnormalised models, with
no extra ``hooks``.  Any other hook point, normalisation or an intervention in ``hooks`` uses the
bridge itself (same result, slower).  Only the answers' x positions are scored, so the last
layer's queries, MLP and unembedding run at those positions only; and rows that repeat a
(sequence, answers) pair count once, weighted by how often they occur (the same mean loss).  A
component in the last layer needs only each x position's own prefix (one term per distinct
prefix and answer); a component in an earlier layer needs whole sequences, as the later layers'
attention reads every position.
"""

from __future__ import annotations

import re
from functools import partial

import torch
from torch import Tensor

from perm_circuits.analysis.interventions.core import minimise_constant
from perm_circuits.devices import model_device
from perm_circuits.hooks import HookList, run_capture
from perm_circuits.models import ACTIVATIONS, model_config_of, run_blocks, unembed, weight_ops
from perm_circuits.optimal_solver import OPTIMAL_STEPS, lbfgs_constant
from perm_circuits.tasks.base import TaskBatch

__all__ = ["OPTIMAL_STEPS", "answer_loss", "optimise_constant", "upstream_hooks"]

_FAST = re.compile(r"^blocks\.(\d+)\.(attn\.hook_z|mlp\.hook_post|hook_mlp_out)$")


def answer_loss(logits: Tensor, batch: TaskBatch) -> Tensor:
    """Mean cross-entropy of the V answers (x positions predict the next y): the task loss."""
    log_probs = logits[:, 0::2].float().log_softmax(dim=-1)
    return -log_probs.gather(2, batch.extras["ys"][..., None]).mean()


def _downstream(model, w: dict[str, Tensor], layer: int, stage: str, value: Tensor, cache: dict[str, Tensor],
                keep: Tensor | None = None) -> Tensor:
    """Logits from the (replaced) activation ``value`` at ``stage`` of ``layer`` onwards, as the bridge
    computes them: the rest of ``layer`` here, then the later blocks and the unembedding with the
    study's one plain-PyTorch forward (:func:`perm_circuits.models.run_blocks`, as
    :func:`~perm_circuits.models.fast_forward`; checked against the bridge in the tests).
    ``keep`` (positions, for ``layer`` below the last): only those positions' logits,
    ``[batch, len(keep), vocab]``, the last layer's queries, MLP and unembedding run there only.
    """
    config = model_config_of(model)
    act = ACTIVATIONS[config.act_fn]
    norm, linear = weight_ops(config, w)

    def mlp(resid: Tensor, b: str) -> Tensor:
        return linear(act(linear(norm(resid, f"{b}.ln2"), f"{b}.mlp.in")), f"{b}.mlp.out")

    b = f"blocks.{layer}"
    if stage == "attn.hook_z":
        resid = cache["resid_pre"] + linear(value.flatten(-2), f"{b}.attn.o")
        resid = resid + mlp(resid, b)
    elif stage == "mlp.hook_post":
        resid = cache["resid_mid"] + linear(value, f"{b}.mlp.out")
    else:
        resid = cache["resid_mid"] + value
    resid = run_blocks(config, resid, norm, linear, layers=range(layer + 1, config.n_layers), queries=keep)
    return unembed(w, resid, norm)


def upstream_hooks(model, hook_name: str) -> list[str]:
    """Hook names whose activations the fast search needs besides ``hook_name`` (empty: it uses the bridge)."""
    match = _FAST.match(hook_name)
    if not match or model_config_of(model).normalization_type not in ("LN", None):
        return []
    layer = int(match.group(1))
    if match.group(2) == "attn.hook_z":
        return [f"blocks.{layer}.hook_resid_pre"]
    return [f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_attn_out"]


def _first_rows(key: Tensor) -> tuple[Tensor, Tensor]:
    """(first row, count) of every distinct row of ``key``."""
    n = len(key)
    _, inverse, count = torch.unique(key, dim=0, return_inverse=True, return_counts=True)
    first = torch.full((len(count),), n, dtype=torch.long, device=inverse.device).scatter_reduce(
        0, inverse, torch.arange(n, device=inverse.device), "amin")
    return first, count


def _distinct_x_rows(reference: TaskBatch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(row, x position, answer, count) per distinct (prefix, answer) of every x position.

    In a causal model without interventions the activations at position ``p`` depend on the
    tokens up to ``p`` only, so rows sharing the prefix and the answer have the same loss term.
    """
    tokens, answers = reference.tokens, reference.extras["ys"]
    rows, positions, targets, counts = [], [], [], []
    for j in range(answers.shape[1]):
        first, count = _first_rows(torch.cat([tokens[:, : 2 * j + 1], answers[:, j : j + 1]], dim=1))
        rows.append(first)
        positions.append(torch.full_like(first, 2 * j))
        targets.append(answers[first, j])
        counts.append(count)
    return torch.cat(rows), torch.cat(positions), torch.cat(targets), torch.cat(counts)


def optimise_constant(
    model,
    hook_name: str,
    mask: Tensor,
    reference: TaskBatch,
    hooks: HookList,
    activation: Tensor,
    *,
    steps: int = OPTIMAL_STEPS,
    upstream: dict[str, Tensor] | None = None,
) -> Tensor:
    """The constant ``c`` (shape ``activation.shape[1:]``) minimising the task loss with ``where(mask, c, act)``.

    ``activation``: the activation at ``hook_name`` on ``reference`` (under ``hooks``), whose batch
    mean is the start; entries outside ``mask`` keep it.  ``upstream``: the activations of
    :func:`upstream_hooks` on ``reference`` if already captured.  The callers validate the arguments.
    """
    config = model_config_of(model)
    device = model_device(model)  # the search runs beside the weights; no-ops when everything is there
    reference, activation, mask = reference.to(device), activation.to(device), mask.to(device)
    if upstream is not None:
        upstream = {name: value.to(device) for name, value in upstream.items()}
    names = upstream_hooks(model, hook_name)
    if not names or hooks:  # the bridge itself
        return minimise_constant(model, hook_name, mask, reference.tokens, partial(answer_loss, batch=reference), hooks,
                                 activation, steps=steps)
    match = _FAST.match(hook_name)
    assert match is not None
    layer, stage = int(match.group(1)), match.group(2)
    if upstream is None or any(name not in upstream for name in names):
        upstream = run_capture(model, reference.tokens, names, [])[1]
    cache = {"resid_pre": upstream[names[0]].detach().float()}
    if len(names) == 2:
        cache["resid_mid"] = cache["resid_pre"] + upstream[names[1]].detach().float()
    w = {k: v.detach() for k, v in model.state_dict().items()}
    captured = activation.detach().float()
    if layer == config.n_layers - 1:
        # last layer: each x position's loss depends on its own prefix only; one term per
        # distinct (prefix, answer), weighted by its count (the same mean loss, fewer rows)
        rows, positions, targets, counts = _distinct_x_rows(reference)
        cache = {key: value[rows, positions] for key, value in cache.items()}
        captured, row_mask = captured[rows, positions], mask[positions]
        weights = counts.float() / counts.sum()

        def loss_of(constant: Tensor) -> Tensor:
            value = torch.where(row_mask, constant[positions], captured)
            logits = _downstream(model, w, layer, stage, value, cache)
            losses = -logits.float().log_softmax(dim=-1).gather(1, targets[:, None])[:, 0]
            return (losses * weights).sum()
    else:
        # an earlier layer: whole sequences (later attention reads every position), each
        # distinct (sequence, answers) once, weighted by its count; logits of the x positions only
        rows, counts = _first_rows(torch.cat([reference.tokens, reference.extras["ys"]], dim=1))
        cache = {key: value[rows] for key, value in cache.items()}
        captured, answers = captured[rows], reference.extras["ys"][rows]
        weights = counts.float() / (counts.sum() * answers.shape[1])
        keep = torch.arange(0, 2 * answers.shape[1] - 1, 2, device=answers.device)

        def loss_of(constant: Tensor) -> Tensor:
            value = torch.where(mask, constant, captured)
            logits = _downstream(model, w, layer, stage, value, cache, keep)
            losses = -logits.float().log_softmax(dim=-1).gather(2, answers[..., None])[..., 0]
            return (losses * weights[:, None]).sum()

    return lbfgs_constant(model, loss_of, activation.float().mean(dim=0), steps)
