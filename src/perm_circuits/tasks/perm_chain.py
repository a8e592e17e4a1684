"""Permutation-chain state tracking (Forner, Kühn, Thamm, Rosenow 2026, section 3.1), as a :class:`Task`.

``d_g`` fixed permutations ``sigma_1..sigma_{d_g}`` of ``[N]`` are the actions (drawn once from
``perm_seed``).  A sequence draws ``L`` actions ``g_1..g_L`` i.i.d. uniformly and an initial state
``s_0`` uniformly, and chains them (the paper's eq. 1)::

    s_t = sigma_{g_t}(s_{t-1}),   t = 1..L

The token sequence is the paper's eq. 2, ``(g_1..g_L, s_0, s_1..s_L)``, ``2L + 1`` tokens.  Token
ids follow the bundled embedding of the paper's appendix C: actions are ``0..d_g-1`` (action ``a``
is token ``a``) and states are ``d_g..d_g+N-1`` (state ``s`` is token ``d_g + s``), with states
and actions counted from 0 here (the paper counts from 1).

Model inputs are the first ``2L`` tokens (``x_1..x_{2L}``); the loss is teacher-forced on
``s_1..s_L`` only (eq. 7): position ``p`` in ``L..2L-1`` (0-based; it holds ``s_{p-L}``) predicts
``s_{p-L+1}``.  The model predicts *states*, so ``targets`` hold the next state's index in
``[0, N)`` (not its token id) and a model's logits have ``N`` entries (the paper's ``z``).

Inference is greedy rollout (:func:`rollout`): from the prefix ``(g_1..g_L, s_0)`` the model
generates ``s_1..s_L`` one token at a time, each generated state fed back as the next input.  The
metrics are the teacher-forced (one-step) accuracy, the paper's ``rho``, and the final rollout
accuracy ``P(s_hat_L = s_L)`` (section 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.checks import check_int, check_seed
from perm_circuits.tasks.base import (DataclassTask, TaskBatch, check_sample, load_object, masked_cross_entropy,
                                      register_task)

__all__ = ["PermutationChainTask", "RolloutResult", "build_chain_model", "chain_states", "permutation_matrices", "rollout"]


def chain_states(
    perms: Int[Tensor, "d_g N"], actions: Int[Tensor, "batch L"], s0: Int[Tensor, " batch"]
) -> Int[Tensor, "batch L_plus_1"]:
    """The states ``s_0..s_L`` of eq. 1: ``s_t = perms[g_t][s_{t-1}]`` (``perms[a]`` is sigma_a as a table)."""
    states = [s0]
    for t in range(actions.shape[1]):
        states.append(perms[actions[:, t], states[-1]])
    return torch.stack(states, dim=1)


def permutation_matrices(perms: Int[Tensor, "d_g N"]) -> Float[Tensor, "d_g N N"]:
    """``O(sigma_a)`` with ``O(sigma_a) e_j = e_{sigma_a(j)}`` (section 3.2): entry ``[a, sigma_a(j), j] = 1``."""
    d_g, N = perms.shape
    out = torch.zeros(d_g, N, N)
    out[torch.arange(d_g)[:, None], perms, torch.arange(N)[None, :]] = 1.0
    return out


@dataclass(frozen=True)
class PermutationChainTask(DataclassTask):
    """The permutation-chain task (module docstring): ``N`` states (paper: 32), ``d_g`` distinct
    action permutations (paper: 32; drawn with ``torch.randperm`` from ``perm_seed``, rejecting
    repeats), chains of length ``L`` (paper: 10)."""

    N: int = 8
    d_g: int = 8
    L: int = 10
    perm_seed: int = 0
    perms: Tensor = field(init=False, repr=False, compare=False)

    name: ClassVar[str] = "perm_chain"

    def __post_init__(self) -> None:
        for name, low in (("N", 2), ("d_g", 1), ("L", 1), ("perm_seed", 0)):
            check_int(name, getattr(self, name), low)
        check_seed(self.perm_seed, "perm_seed")
        if self.d_g > math.factorial(min(self.N, 20)):
            raise ValueError(f"d_g must be <= N! = {math.factorial(self.N)} (distinct permutations), got {self.d_g}")
        generator = torch.Generator().manual_seed(self.perm_seed)
        perms: dict[tuple[int, ...], Tensor] = {}  # distinct, in order of drawing
        while len(perms) < self.d_g:
            p = torch.randperm(self.N, generator=generator)
            perms.setdefault(tuple(p.tolist()), p)
        object.__setattr__(self, "perms", torch.stack(list(perms.values())))

    @property
    def d_vocab(self) -> int:
        """Input vocabulary: ``d_g`` action tokens then ``N`` state tokens."""
        return self.d_g + self.N

    @property
    def n_ctx(self) -> int:
        """Model input length ``2L`` (``x_1..x_{2L}``; ``x_{2L+1} = s_L`` is only ever a target)."""
        return 2 * self.L

    @property
    def metric_names(self) -> tuple[str, ...]:
        return ("loss", "teacher_forced_accuracy")

    @property
    def teacher_matrices(self) -> Float[Tensor, "d_g N N"]:
        """The teacher's logic module ``M*_a = O(sigma_a)`` (section 3.3)."""
        return permutation_matrices(self.perms)

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
        """``n`` chains (both splits alike)."""
        check_sample(n, generator, split)
        actions = torch.randint(self.d_g, (n, self.L), generator=generator)
        s0 = torch.randint(self.N, (n,), generator=generator)
        return self.batch_from(actions, s0)

    def batch_from(self, actions: Int[Tensor, "batch L"], s0: Int[Tensor, " batch"]) -> TaskBatch:
        """The batch for given actions (values in ``[0, d_g)``) and initial states (in ``[0, N)``)."""
        if actions.ndim != 2 or actions.shape[1] != self.L:
            raise ValueError(f"actions must have shape [batch, L={self.L}], got {tuple(actions.shape)}")
        if s0.shape != actions.shape[:1]:
            raise ValueError(f"s0 must have shape [{actions.shape[0]}], got {tuple(s0.shape)}")
        if actions.numel() and (actions.min() < 0 or actions.max() >= self.d_g):
            raise ValueError(f"actions must lie in [0, {self.d_g}), got values {actions.min()}..{actions.max()}")
        if s0.numel() and (s0.min() < 0 or s0.max() >= self.N):
            raise ValueError(f"s0 must lie in [0, {self.N}), got values {s0.min()}..{s0.max()}")
        states = chain_states(self.perms, actions, s0)
        L = self.L
        tokens = torch.cat([actions, self.d_g + states[:, :L]], dim=1)
        targets = torch.zeros_like(tokens)
        targets[:, L:] = states[:, 1:]
        mask = torch.zeros(tokens.shape, dtype=torch.float32)
        mask[:, L:] = 1.0
        return TaskBatch(tokens, targets, mask, {"actions": actions, "states": states})

    def metrics(self, logits: Tensor, batch: TaskBatch) -> dict[str, float]:
        """Masked cross-entropy and teacher-forced accuracy (the paper's one-step accuracy ``rho``)."""
        if logits.shape[:2] != batch.tokens.shape or logits.shape[-1] != self.N:
            raise ValueError(f"logits must have shape [*{tuple(batch.tokens.shape)}, N={self.N}], got {tuple(logits.shape)}")
        mask = batch.mask > 0
        correct = (logits.argmax(-1) == batch.targets)[mask]
        return {"loss": float(masked_cross_entropy(logits.detach(), batch.targets, batch.mask)),
                "teacher_forced_accuracy": float(correct.float().mean())}

    def reference(self, batch: TaskBatch) -> Tensor | None:
        """The exact next state (the teacher's prediction) at every position; it equals ``targets``."""
        return batch.targets


def build_chain_model(task: PermutationChainTask, *, seed: int = 0, **fields: Any):
    """The solvable model of Forner et al. (2026) for ``task``
    (:class:`perm_circuits.systems.forner_model.FornerModel`; ``fields``: ``d_h``, ``rope_theta``, ``logic_init``)."""
    config = load_object("perm_circuits.systems.forner_model:FornerConfig")
    model = load_object("perm_circuits.systems.forner_model:FornerModel")
    return model(config(N=task.N, d_g=task.d_g, L=task.L, perm_seed=task.perm_seed, seed=seed, **fields))


register_task(PermutationChainTask.name, PermutationChainTask, model=build_chain_model,
    model_keys=("d_h", "rope_theta", "logic_init"), forward="perm_circuits.systems.forner_model:fast_forward",
    reproduction=("forner", "perm_circuits.systems.forner", "Permutation-chain state tracking (Forner et al. 2026)"))


@dataclass(frozen=True)
class RolloutResult:
    """Greedy rollout: the generated ``s_hat_1..s_hat_L`` ``[batch, L]``, ``P(s_hat_L = s_L)`` (the
    paper's final rollout accuracy, section 5), ``P(s_hat_t = s_t)`` per ``t`` and the share of chains
    with every generated state right."""

    states: Tensor
    final_accuracy: float
    step_accuracy: tuple[float, ...]
    sequence_accuracy: float


def rollout(model, batch: TaskBatch, task: PermutationChainTask | None = None, forward=None) -> RolloutResult:
    """Greedy rollout (the paper's inference, section 3.1): from ``(g_1..g_L, s_0)``, append the argmax
    of the last state logits ``[batch, seq, N]`` as the next state token, ``L`` times.  ``task``
    defaults to ``model.task``; ``forward(model, tokens)`` replaces ``model(tokens)``."""
    task = task if task is not None else getattr(model, "task", None)
    if not isinstance(task, PermutationChainTask):
        raise TypeError(f"rollout needs a PermutationChainTask (argument or model.task), got {type(task).__name__}")
    if batch.tokens.shape[1] != task.n_ctx or "states" not in batch.extras:
        raise ValueError(f"batch must come from the task (tokens [batch, {task.n_ctx}], extras['states']), "
                         f"got tokens {tuple(batch.tokens.shape)} and extras {sorted(batch.extras)}")
    L = task.L
    tokens = batch.tokens[:, : L + 1].clone()
    generated = []
    with torch.no_grad():
        for _ in range(L):
            logits = model(tokens) if forward is None else forward(model, tokens)
            nxt = logits[:, -1].argmax(-1)
            generated.append(nxt)
            tokens = torch.cat([tokens, (task.d_g + nxt)[:, None]], dim=1)
    states = torch.stack(generated, dim=1)
    right = states == batch.extras["states"][:, 1:]
    return RolloutResult(states, float(right[:, -1].float().mean()),
                         tuple(float(v) for v in right.float().mean(0)), float(right.all(1).float().mean()))
