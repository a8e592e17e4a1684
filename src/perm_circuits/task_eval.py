"""Train and evaluate any model on any task (the :class:`~perm_circuits.tasks.base.Task` interface).

:func:`train_task` is the generic :func:`~perm_circuits.tasks.base.fit` loop after checking that
the model and the task fit together; :func:`evaluate_task` measures a trained model on the task's
fixed test set: the task's own metrics, the masked test loss, and, where the task has an exact or
analytic reference (:meth:`Task.reference`), how far the model's next-token distribution is from
it.  Both work for any ``tokens -> logits`` module: a TransformerLens bridge or a
``HookedRootModule``.  (The study's permutation-specific :func:`~perm_circuits.train.train` and
:func:`~perm_circuits.evaluate.evaluate` are unchanged; :class:`PermutationTask` runs through
both.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.models import ModelConfig, fast_forward
from perm_circuits.tasks.base import FitResult, StepState, Task, TaskBatch, fit, masked_cross_entropy

__all__ = ["TaskEvaluation", "evaluate_task", "reference_agreement", "task_logits", "train_task"]

Forward = Callable[[torch.nn.Module, Tensor], Tensor]


def model_name(model: torch.nn.Module) -> str:
    """The model's preset name (``model.perm_config.name``) where it has one, else its class name."""
    config = getattr(model, "perm_config", None)
    name = getattr(config, "name", None)
    return name if isinstance(name, str) else type(model).__name__


def check_fit(model: object, task: object) -> None:
    """TypeError / ValueError before any work when the model and the task do not fit together."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module mapping tokens to logits, got {type(model).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must implement perm_circuits.tasks.Task, got {type(task).__name__}")
    cfg = getattr(model, "cfg", None)
    d_vocab = getattr(cfg, "d_vocab_out", None)
    if not (isinstance(d_vocab, int) and d_vocab > 0):
        d_vocab = getattr(cfg, "d_vocab", None)
    if isinstance(d_vocab, int) and d_vocab > 0 and d_vocab != task.d_vocab:
        raise ValueError(f"the model's vocabulary ({d_vocab}) does not match task {task.name!r} (d_vocab={task.d_vocab})")
    n_ctx = getattr(cfg, "n_ctx", None)
    if isinstance(n_ctx, int) and n_ctx > 0 and n_ctx < task.n_ctx:
        raise ValueError(f"the model's context ({n_ctx}) is shorter than task {task.name!r}'s sequences ({task.n_ctx})")


def train_task(
    model: torch.nn.Module,
    task: Task,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    callbacks: Sequence[Callable[[StepState], Any]] = (),
    progress: bool = True,
    **fit_options: Any,
) -> FitResult:
    """Train ``model`` on ``task`` with :func:`~perm_circuits.tasks.base.fit` (masked next-token loss).

    Checks first that the model's vocabulary equals ``task.d_vocab`` and its context holds
    ``task.n_ctx`` tokens (where the model has a TransformerLens ``cfg``).  ``fit_options`` are
    :func:`fit`'s other keywords (``optimizer``, ``weight_decay``, ``momentum``, ``forward``).
    A bridge from :func:`~perm_circuits.models.build_model` without dropout trains through
    :func:`~perm_circuits.models.fast_forward` unless ``forward`` is given (same logits, faster);
    any other module through ``model(tokens)``.
    A fixed ``seed`` gives bit-identical weights, losses and records on CPU.
    """
    check_fit(model, task)
    config = getattr(model, "perm_config", None)
    if fit_options.get("forward") is None and isinstance(config, ModelConfig) and config.dropout == 0:
        fit_options["forward"] = fast_forward  # a build_model bridge: the same logits, several times faster
    return fit(model, task, steps=steps, batch_size=batch_size, lr=lr, seed=seed, callbacks=callbacks,
               progress=progress, **fit_options)


def task_logits(model: torch.nn.Module, tokens: Int[Tensor, "batch seq"], forward: Forward | None = None) -> Tensor:
    """``forward(model, tokens)`` (default ``model(tokens)``) without gradients, as float."""
    with torch.no_grad():
        logits = model(tokens) if forward is None else forward(model, tokens)
    if not isinstance(logits, Tensor) or logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"the model must return logits [batch, seq, vocab] for tokens {tuple(tokens.shape)}, got {shape}")
    return logits.detach().float()


def reference_agreement(
    logits: Float[Tensor, "batch seq vocab"], batch: TaskBatch, reference: Tensor
) -> dict[str, float]:
    """How close the model is to a task's reference, over the positions where ``batch.mask`` > 0.

    A distribution ``[batch, seq, vocab]`` gives ``reference_tv`` (mean total-variation distance
    ½ Σ|p − q| between the model's softmax and the reference), ``reference_max_ae`` (largest
    absolute error of one probability), ``reference_loss`` (the reference's own masked
    cross-entropy: the loss a perfect match would have) and ``reference_agreement`` (share of
    positions where the model's top token has the reference's top probability, ties included).
    A distribution ``[batch, vocab]`` is the reference at the last position, for tasks whose loss
    mask selects only that position (e.g. factual recall's EOS readout).
    Token ids ``[batch, seq]`` give ``reference_agreement`` (share of positions where the model's
    top token is the reference's token) and ``reference_accuracy`` (the reference's accuracy on
    the targets).
    """
    rows = batch.mask > 0
    if reference.ndim == 2 and reference.shape == (logits.shape[0], logits.shape[2]) and reference.dtype.is_floating_point:
        if bool(rows[:, :-1].any()):
            raise ValueError("a reference [batch, vocab] is the distribution at the last position only, but the loss "
                             "mask selects earlier positions too")
        full = torch.zeros(logits.shape, dtype=reference.dtype)
        full[:, -1] = reference
        reference = full
    if reference.shape == logits.shape:
        if not reference.dtype.is_floating_point:
            raise TypeError(f"a reference distribution must be a float tensor, got {reference.dtype}")
        probs = logits.softmax(dim=-1)[rows]
        ref = reference.float()[rows]
        error = (probs - ref).abs()
        top = probs.argmax(dim=-1, keepdim=True)
        best = ref.max(dim=-1, keepdim=True).values
        target = batch.targets[rows][:, None]
        return {
            "reference_tv": float(0.5 * error.sum(dim=-1).mean()),
            "reference_max_ae": float(error.max()),
            "reference_loss": float(-ref.gather(1, target).clamp(min=1e-30).log().mean()),
            "reference_agreement": float((ref.gather(1, top) >= best - 1e-6).float().mean()),
        }
    if reference.shape == batch.tokens.shape:
        if reference.dtype.is_floating_point or reference.dtype == torch.bool:
            raise TypeError(f"a reference answer must be an integer tensor of token ids, got {reference.dtype}")
        answer = reference[rows]
        return {
            "reference_agreement": float((logits.argmax(dim=-1)[rows] == answer).float().mean()),
            "reference_accuracy": float((answer == batch.targets[rows]).float().mean()),
        }
    raise ValueError(
        f"a task reference must be a distribution {tuple(logits.shape)} or token ids {tuple(batch.tokens.shape)}, "
        f"got shape {tuple(reference.shape)}"
    )


@dataclass(frozen=True)
class TaskEvaluation:
    """A model measured on a task's test set (:func:`evaluate_task`).

    Attributes:
        task: the task's name; ``task_dict`` its full settings (:meth:`Task.to_dict`).
        model_name: the model's preset name, else its class name.
        metrics: the task's metrics, :attr:`Task.metric_names` in order.
        test_loss: masked next-token cross-entropy on the test set.
        reference: :func:`reference_agreement` against :meth:`Task.reference` (empty: no reference).
        n_samples: test sequences.
    """

    task: str
    model_name: str
    metrics: Mapping[str, float]
    test_loss: float
    reference: Mapping[str, float] = field(default_factory=dict)
    n_samples: int = 0
    task_dict: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        """Flat dict: the task's metrics, ``test_loss``, then the reference agreement."""
        return {**self.metrics, "test_loss": self.test_loss, **self.reference}

    def to_dataframe(self) -> pd.DataFrame:
        """One row per number: ``metric``, ``value``, ``kind`` (``"task"``, ``"loss"`` or ``"reference"``)."""
        rows = [{"metric": k, "value": v, "kind": "task"} for k, v in self.metrics.items() if k != "test_loss"]
        rows.append({"metric": "test_loss", "value": self.test_loss, "kind": "loss"})
        rows += [{"metric": k, "value": v, "kind": "reference"} for k, v in self.reference.items()]
        return pd.DataFrame(rows, columns=["metric", "value", "kind"]).set_index("metric")

    def __str__(self) -> str:
        lines = [f"{self.model_name} on {self.task}: {self.n_samples} test sequences"]
        lines += [f"  {k}: {'nan' if math.isnan(v) else f'{v:.4f}'}" for k, v in self.summary().items()]
        return "\n".join(lines)


def evaluate_task(
    model: torch.nn.Module,
    task: Task,
    test_set: TaskBatch | None = None,
    *,
    n: int = 2000,
    seed: int = 1234,
    forward: Forward | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> TaskEvaluation:
    """Measure ``model`` on ``task``: its metrics, the test loss and the agreement with its reference.

    Args:
        model: any ``tokens -> logits`` module (a bridge, a ``HookedRootModule``).
        task: any :class:`~perm_circuits.tasks.base.Task`.
        test_set: default ``task.test_set(n, seed)``.
        forward: ``forward(model, tokens) -> logits``; default ``model(tokens)``.
        hooks: a TransformerLens hook list (e.g. an ablation) run during the forward pass and
            removed afterwards, always; needs the model's own forward (not ``forward``).
    """
    check_fit(model, task)
    if hooks is not None:
        from perm_circuits.hooks import check_hooks

        if forward is not None:
            raise ValueError("hooks= need the model's own forward pass; pass forward=None (a custom forward skips hook points)")
        hooks = check_hooks(model, hooks)
    if test_set is None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        test_set = task.test_set(n, seed)
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch (task.test_set(...)), got {type(test_set).__name__}")
    if hooks:
        with model.hooks(fwd_hooks=hooks):
            logits = task_logits(model, test_set.tokens)
    else:
        logits = task_logits(model, test_set.tokens, forward)
    metrics = task.metrics(logits, test_set)
    missing = [name for name in task.metric_names if name not in metrics]
    if missing:
        raise ValueError(f"task {task.name!r}'s metrics() lacks the metrics it names: {missing}")
    test_loss = float(masked_cross_entropy(logits, test_set.targets, test_set.mask))
    reference = task.reference(test_set)
    agreement = {} if reference is None else reference_agreement(logits, test_set, reference)
    return TaskEvaluation(
        task=task.name,
        model_name=model_name(model),
        metrics={name: float(metrics[name]) for name in task.metric_names},
        test_loss=test_loss,
        reference=agreement,
        n_samples=len(test_set),
        task_dict=task.to_dict(),
    )


# former private names, kept as aliases for callers not yet renamed
_model_name = model_name
_check_fit = check_fit
