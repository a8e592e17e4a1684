"""The one evaluation result of every task (:class:`Evaluation`, what :func:`perm_circuits.evaluate`
returns) and how close a model comes to a task's reference (:func:`reference_agreement`).

Every task's evaluation has the same generic numbers: the task's metrics (in its
``metric_names`` order), the masked test loss and the agreement with the task's exact reference.
A task with a richer breakdown adds it as the evaluation's ``detail`` (an
:class:`EvaluationDetail`): the permutation task's per-step accuracy and error against the Bayesian
posterior, its last-step subgroups and the probe (:class:`~perm_circuits.tasks.permutation.PermutationDetail`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.tasks.base import TaskBatch

__all__ = ["FRAME_COLUMNS", "Evaluation", "EvaluationDetail", "reference_agreement"]

FRAME_COLUMNS = ("value", "kind")
"""The columns of :meth:`Evaluation.to_dataframe` (indexed by ``metric``), for every task."""


@runtime_checkable
class EvaluationDetail(Protocol):
    """A task's own breakdown of an :class:`Evaluation` (e.g. the permutation task's
    :class:`~perm_circuits.tasks.permutation.PermutationDetail`): frozen, and rendered through the
    evaluation it belongs to."""

    def summary(self, evaluation: Evaluation) -> dict[str, float]:
        """The evaluation's headline numbers, flat (training history, checkpoint metadata, sweep rows)."""
        ...

    def to_markdown(self, evaluation: Evaluation) -> str:
        """The task's tables (``str(evaluation)``, the CLI's ``evaluate``)."""
        ...


@dataclass(frozen=True)
class Evaluation:
    """A model measured on a task's test set: what :func:`perm_circuits.evaluate` returns, for every
    task and model.

    Attributes:
        task: the task's name; ``task_dict`` its full settings (``Task.to_dict()``).
        model_name: the model's preset name (``"d32h2"``), else its class name.
        metrics: the task's metrics, ``Task.metric_names`` in order.
        test_loss: next-token cross-entropy over the test set's scored positions.
        reference: :func:`reference_agreement` against ``Task.reference`` (empty: the task has none, or
            an internal run did not measure it, e.g. one row of the study's ablation table).
        n_samples: test sequences.
        detail: the task's own breakdown (an :class:`EvaluationDetail`; ``None``: the task has
            none).  The permutation task's holds the per-step metrics, the last-step subgroups
            (elimination, memorization, ``recall_x{k}``) and the probe; its ``summary`` gives the
            study's headline keys.
    """

    task: str
    model_name: str
    metrics: Mapping[str, float]
    test_loss: float
    reference: Mapping[str, float] = field(default_factory=dict)
    n_samples: int = 0
    task_dict: Mapping[str, Any] = field(default_factory=dict)
    detail: EvaluationDetail | None = None

    def summary(self) -> dict[str, float]:
        """Flat dict of headline numbers (training history, checkpoint metadata, sweep rows): the
        detail's where the task has one (the permutation study: ``test_loss``,
        ``elimination_accuracy``, ``recall_accuracy``, ``early_mae_train``, per-step numbers and the
        probe, the keys of its shipped checkpoints), else the task's metrics, ``test_loss`` and the
        reference agreement."""
        if self.detail is not None:
            return self.detail.summary(self)
        return {**self.metrics, "test_loss": self.test_loss, **self.reference}

    def to_dataframe(self) -> pd.DataFrame:
        """The same shape for every task: one row per number, indexed by ``metric``, with columns
        ``value`` and ``kind``: ``"task"`` (the task's metrics, in order), ``"loss"``
        (``test_loss``), ``"reference"`` (the reference agreement), then ``"detail"`` (the detail's
        other headline numbers, e.g. the permutation task's per-step errors and probe)."""
        rows = [(k, float(v), "task") for k, v in self.metrics.items() if k != "test_loss"]
        rows.append(("test_loss", float(self.test_loss), "loss"))
        rows += [(k, float(v), "reference") for k, v in self.reference.items()]
        seen = {name for name, _, _ in rows}
        if self.detail is not None:
            rows += [(k, float(v), "detail") for k, v in self.summary().items() if k not in seen]
        frame = pd.DataFrame(rows, columns=["metric", *FRAME_COLUMNS])
        return frame.set_index("metric")

    def to_markdown(self) -> str:
        """The detail's tables where the task has one (the permutation study's per-step and subgroup
        tables), else one line per headline number."""
        if self.detail is not None:
            return self.detail.to_markdown(self)
        lines = [f"{self.model_name} on {self.task}: {self.n_samples} test sequences"]
        lines += [f"  {k}: {'nan' if math.isnan(v) else f'{v:.4f}'}" for k, v in self.summary().items()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_markdown()


def reference_agreement(
    logits: Float[Tensor, "batch seq vocab"], batch: TaskBatch, reference: Tensor
) -> dict[str, float]:
    """How close the model is to a task's reference, over the positions where ``batch.mask`` > 0.

    A distribution ``[batch, seq, vocab]`` gives ``reference_tv`` (mean total variation ½ Σ|p − q|
    of the model's softmax), ``reference_max_ae`` (largest error of one probability),
    ``reference_loss`` (the reference's own masked cross-entropy) and ``reference_agreement`` (share
    of positions where the model's top token has the reference's top probability, ties included);
    ``[batch, vocab]`` is that distribution at the last position only (e.g. factual recall's EOS); one
    over fewer classes than the logits covers their first ids, the others having probability 0 (factual
    recall's answers are ids ``0..RD-1``: its own model reads out only those, a full-vocabulary model all).
    Token ids ``[batch, seq]`` give ``reference_agreement`` (model top token = reference token) and
    ``reference_accuracy`` (the reference's accuracy on the targets).
    """
    rows = batch.mask > 0
    if (reference.ndim == 2 and reference.dtype.is_floating_point and reference.shape[0] == logits.shape[0]
            and reference.shape[1] < logits.shape[2] and reference.shape != batch.tokens.shape):
        reference = torch.nn.functional.pad(reference, (0, logits.shape[2] - reference.shape[1]))
    if reference.ndim == 2 and reference.shape == (logits.shape[0], logits.shape[2]) and reference.dtype.is_floating_point:
        if bool(rows[:, :-1].any()):
            raise ValueError("a reference [batch, vocab] is the distribution at the last position only, but the loss "
                             "mask selects earlier positions too")
        full = torch.zeros(logits.shape, dtype=reference.dtype, device=logits.device)
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
            "reference_loss": float(-ref.gather(1, target).clamp(min=1e-30).log().mean()) + 0.0,  # never -0.0
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
