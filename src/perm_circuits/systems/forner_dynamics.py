"""Order parameters of Forner et al. 2026 (section 4.1) measured on a model, and training runs that log them.

* ``A = (1/L) sum_{i=L+1}^{2L} pi_{i,i-L}`` (eq. 8): attention mass on the correct action;
* ``R = (1/d_g) sum_a Tr(M*_a^T M_a) / N`` (eq. 9a): alignment with the teacher's matrices;
* ``S = 1/(d_g (d_g-1)) sum_{a != b} Tr(M*_a^T M_b) / N`` (eq. 9b): off-target overlap;

plus ``zeta = sum_a sum_rs [M_a]_rs / (d_g N)`` (eq. 40, constant under training) and the teacher's
own overlap ``tau`` (eq. 57).  :func:`train_chain` logs them over training (:func:`chain_snapshot`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.checks import check_int
from perm_circuits.devices import model_device, to_device
from perm_circuits.systems.forner_model import FornerConfig, FornerModel, fast_forward
from perm_circuits.systems.forner_theory import rollout_accuracy
from perm_circuits.tasks.base import (
    StepState,
    TaskBatch,
    fit,
    log_spaced_steps,
    masked_cross_entropy,
)
from perm_circuits.tasks.perm_chain import rollout

__all__ = ["ChainRun", "OrderParameters", "chain_snapshot", "crossing", "order_parameters", "overlaps", "train_chain"]


def overlaps(teacher: Float[Tensor, "d_g N N"], student: Float[Tensor, "d_g N N"]) -> Float[Tensor, "d_g d_g"]:
    """``[a, b] = Tr(M*_a^T M_b) / N``, the matrix overlaps behind eq. 9."""
    if teacher.shape != student.shape or teacher.ndim != 3 or teacher.shape[1] != teacher.shape[2]:
        raise ValueError(f"need two [d_g, N, N] stacks of one shape, got {tuple(teacher.shape)} and {tuple(student.shape)}")
    return torch.einsum("arn,brn->ab", teacher.double(), student.double()) / teacher.shape[1]


@dataclass(frozen=True)
class OrderParameters:
    """The paper's order parameters of one model (eqs. 8, 9a, 9b), ``zeta`` (eq. 40) and the teacher's ``tau`` (eq. 57)."""

    A: float
    R: float
    S: float
    zeta: float
    tau: float


def _off_diagonal_mean(matrix: Tensor) -> float:
    d = matrix.shape[0]
    if d < 2:
        return float("nan")
    return float((matrix.sum() - matrix.diagonal().sum()) / (d * (d - 1)))


def order_parameters(model: FornerModel, batch: TaskBatch | None = None) -> OrderParameters:
    """``A``, ``R``, ``S`` of ``model`` (section 4.1); ``A`` is read from ``blocks.0.attn.hook_pattern``
    on ``batch`` (default: 16 chains of the model's task; the pattern does not depend on the tokens
    while the embeddings are fixed) and averaged over the batch."""
    if not isinstance(model, FornerModel):
        raise TypeError(f"model must be a FornerModel, got {type(model).__name__}")
    task = model.task
    batch = (batch if batch is not None else task.test_set(16, seed=0)).to(model_device(model))
    L = task.L
    with torch.no_grad():
        _, cache = model.run_with_cache(batch.tokens, names_filter="blocks.0.attn.hook_pattern")
        pattern = cache["blocks.0.attn.hook_pattern"][:, 0]
        index = torch.arange(L, 2 * L, device=pattern.device)
        A = float(pattern[:, index, index - L].mean())
        teacher = task.teacher_matrices.to(pattern.device)
        student = overlaps(teacher, model.M.detach())
        own = overlaps(teacher, teacher)
    return OrderParameters(
        A=A,
        R=float(student.diagonal().mean()),
        S=_off_diagonal_mean(student),
        zeta=float(model.M.detach().double().sum() / (task.d_g * task.N)),
        tau=_off_diagonal_mean(own),
    )


def chain_snapshot(model: FornerModel, batch: TaskBatch, *, step: int = 0, lr: float = 0.5) -> dict[str, float | int]:
    """One row of the training log: order parameters, loss, one-step accuracy ``rho``, measured
    final rollout accuracy and eq. 18's prediction from ``rho``, and the correct / other logits'
    means and variances over ``batch`` (at the ``L`` predicting positions)."""
    task = model.task
    L, N = task.L, task.N
    batch = batch.to(model_device(model))  # a no-op for a batch already on the model's device
    params = order_parameters(model, batch.subset(torch.arange(min(16, len(batch)), device=batch.tokens.device)))
    with torch.no_grad():
        logits = fast_forward(model, batch.tokens)
        loss = float(masked_cross_entropy(logits, batch.targets, batch.mask))
        z = logits[:, L:].double()
        target = batch.targets[:, L:]
        correct = z.gather(-1, target[..., None])[..., 0]
        others = z.masked_fill(torch.nn.functional.one_hot(target, N).bool(), float("nan"))
        rho = float((z.argmax(-1) == target).double().mean())
        roll = rollout(model, batch, task, forward=fast_forward)
    other_values = others[~others.isnan()]
    return {
        "step": step,
        "alpha": step / (task.d_g * N),
        **{name: getattr(params, name) for name in ("A", "R", "S", "zeta")},
        "loss": loss,
        "rho": rho,
        "rollout": roll.final_accuracy,
        "rollout_eq18": float(rollout_accuracy(rho, N, L)),
        "mu_correct": float(correct.mean()),
        "mu_other": float(other_values.mean()),
        "var_correct": float(correct.var()),
        "var_other": float(other_values.var()),
        "lr": lr,
    }


@dataclass(frozen=True)
class ChainRun:
    """A trained model and its log (one row per logged step, step 0 = initialisation)."""

    model: FornerModel
    log: pd.DataFrame
    config: FornerConfig
    lr: float
    batch_size: int

    def to_dataframe(self) -> pd.DataFrame:
        return self.log.copy()


def train_chain(
    cfg: FornerConfig,
    *,
    steps: int = 1600,
    batch_size: int = 2048,
    lr: float = 0.5,
    n_test: int = 4096,
    n_log: int = 60,
    progress: bool = True,
    device: str | torch.device | None = None,
) -> ChainRun:
    """Train the solvable model with plain SGD (the paper's optimiser, ``lr`` its 0.5) on fresh batches
    of ``batch_size`` chains per step (the paper: one fixed set of 32,768 chains, full batch), logging
    :func:`chain_snapshot` on a fixed test set of ``n_test`` chains at step 0 and about ``n_log``
    log-spaced steps.  The batch stream is seeded by ``cfg.seed``, so a seed gives identical runs.
    ``device`` (default the CPU): where the model trains; batches are drawn on the CPU and moved."""
    check_int("steps", steps, low=1)
    check_int("n_test", n_test, low=16)
    model = to_device(FornerModel(cfg), device)  # initialised on the CPU: the same weights anywhere
    test = cfg.task.test_set(n_test, seed=10_000 + cfg.seed).to(model_device(model))
    logged = set(log_spaced_steps(steps, n_log))
    rows = [chain_snapshot(model, test, step=0, lr=lr)]

    def log(state: StepState) -> dict | None:
        if state.step in logged:
            return {**chain_snapshot(state.model, test, step=state.step, lr=lr), "train_loss": state.loss}
        return None

    result = fit(model, cfg.task, steps=steps, batch_size=batch_size, lr=lr, optimizer="sgd", seed=cfg.seed,
                 forward=fast_forward, callbacks=[log], progress=progress)
    log_table = pd.DataFrame(rows + list(result.records))
    log_table.insert(0, "seed", cfg.seed)
    return ChainRun(model, log_table, cfg, lr, batch_size)


def crossing(alpha: np.ndarray, values: np.ndarray, level: float) -> float:
    """First ``alpha`` where ``values`` reaches ``level`` (linear interpolation), nan if never."""
    values = np.asarray(values, dtype=float)
    above = np.nonzero(values >= level)[0]
    if not above.size:
        return float("nan")
    i = int(above[0])
    if i == 0:
        return float(alpha[0])
    a0, a1, v0, v1 = alpha[i - 1], alpha[i], values[i - 1], values[i]
    return float(a0 + (level - v0) / (v1 - v0) * (a1 - a0)) if v1 != v0 else float(a1)
