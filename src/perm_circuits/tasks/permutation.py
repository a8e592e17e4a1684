"""The study's in-context permutation lookup behind the :class:`~perm_circuits.tasks.base.Task` interface.

:class:`PermutationTask` wraps a :class:`~perm_circuits.task.TaskConfig` and delegates to the
task module: :meth:`PermutationTask.sample` is :func:`~perm_circuits.task.make_batch` with the
given generator (the same tokens bit for bit), :meth:`PermutationTask.test_set` is
:func:`~perm_circuits.task.make_test_set`, the metrics are :func:`~perm_circuits.evaluate.evaluate_logits`'
(elimination / recall / per-step accuracy, test loss) and the reference is the exact Bayesian
posterior of :mod:`perm_circuits.posterior` (uniform prior over all ``V!`` permutations).
``TaskConfig``, ``make_batch``, ``make_test_set`` and ``Batch`` keep working unchanged; this is an
adapter, not a second implementation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.posterior import bayes_posterior
from perm_circuits.task import Batch, TaskConfig, make_batch, make_test_set, repeat_source_of
from perm_circuits.tasks.base import TaskBatch, register_task

__all__ = ["PermutationTask", "as_batch", "as_task_batch"]

_EXTRAS = ("xs", "ys", "perms", "repeated", "repeat_source")


def as_task_batch(batch: Batch) -> TaskBatch:
    """A :class:`~perm_circuits.task.Batch` as a :class:`TaskBatch` (its fields kept in ``extras``)."""
    if not isinstance(batch, Batch):
        raise TypeError(f"batch must be a perm_circuits.Batch, got {type(batch).__name__}")
    return TaskBatch(batch.inputs, batch.targets, batch.mask, {name: getattr(batch, name) for name in _EXTRAS})


def as_batch(batch: TaskBatch) -> Batch:
    """A permutation-lookup :class:`TaskBatch` back as a :class:`~perm_circuits.task.Batch`.

    Uses ``extras`` when :meth:`PermutationTask.sample` made the batch; otherwise rebuilds the
    fields from the tokens (queries, answers, the repeated query, and the permutation, whose one
    unrevealed value on a repeated sequence is the value left over).
    """
    if isinstance(batch, Batch):
        return batch
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch, got {type(batch).__name__}")
    if all(name in batch.extras for name in _EXTRAS):
        return Batch(batch.tokens, batch.targets, batch.mask, *(batch.extras[name] for name in _EXTRAS))
    inputs, targets = batch.tokens, batch.targets
    xs = inputs[:, 0::2]
    ys = targets[:, 0::2]
    V = xs.shape[1]
    perms = torch.zeros_like(xs).scatter_(1, xs - 1, ys)
    left = V * (V + 1) // 2 - perms.sum(dim=1)  # the value no revealed pair uses (0 when all revealed)
    perms = torch.where(perms == 0, left[:, None].expand_as(perms), perms)
    source = repeat_source_of(inputs)
    return Batch(inputs, targets, batch.mask, xs, ys, perms, source >= 0, source)


@dataclass(frozen=True)
class PermutationTask:
    """In-context permutation lookup (the study): sequences ``x1 y1 ... xV``, loss on the y predictions.

    Attributes:
        config: the data distribution (:class:`~perm_circuits.task.TaskConfig`; default: V = 5,
            no repeated query).
    """

    config: TaskConfig = field(default_factory=TaskConfig)
    name: ClassVar[str] = "permutation"

    def __post_init__(self) -> None:
        if not isinstance(self.config, TaskConfig):
            raise TypeError(f"config must be a perm_circuits.TaskConfig, got {type(self.config).__name__}")

    @property
    def d_vocab(self) -> int:
        """``V + 1`` (token 0 unused)."""
        return self.config.d_vocab

    @property
    def n_ctx(self) -> int:
        """``2V - 1`` input tokens."""
        return self.config.seq_len

    @property
    def metric_names(self) -> tuple[str, ...]:
        """Elimination and recall accuracy of the last step, each step's accuracy, and the test loss."""
        steps = tuple(f"step{k}_accuracy" for k in range(1, self.config.V + 1))
        return ("elimination_accuracy", "recall_accuracy", *steps, "test_loss")

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
        """``make_batch(config, n, split=split, generator=generator)`` as a TaskBatch (same tokens)."""
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        return as_task_batch(make_batch(self.config, n, split=split, generator=generator))

    def test_set(self, n: int = 2000, seed: int = 1234) -> TaskBatch:
        """``make_test_set(config, n, seed)``: ``n`` seeded sequences from the test permutations."""
        return as_task_batch(make_test_set(self.config, n=n, seed=seed))

    def metrics(self, logits: Float[Tensor, "batch seq vocab"], batch: TaskBatch) -> dict[str, float]:
        """:func:`~perm_circuits.evaluate.evaluate_logits` on ``batch``, read off as :attr:`metric_names`
        (``recall_accuracy`` is nan when no last query repeats)."""
        from perm_circuits.evaluate import evaluate_logits  # evaluate accepts a PermutationTask: no cycle

        evaluation = evaluate_logits(logits, as_batch(batch), self.config)
        summary = evaluation.summary()
        return {name: float(summary[name]) for name in self.metric_names}

    def reference(self, batch: TaskBatch) -> Float[Tensor, "batch seq vocab"]:
        """The exact Bayesian posterior (uniform prior over all permutations, :func:`bayes_posterior`)
        over the full vocabulary at every y-prediction position; rows at x positions (no loss) are
        uniform over the values."""
        posterior = bayes_posterior(batch.tokens, self.config, "uniform").probs  # [batch, step, value]
        n, seq = batch.tokens.shape
        V = self.config.V
        probs = torch.zeros(n, seq, V + 1)
        probs[:, :, 1:] = 1.0 / V
        probs[:, 0::2, 1:] = posterior
        return probs

    def token_labels(self, tokens: list[int]) -> list[str]:
        """``["x=2", "y=4", "x=5", ...]``: queries at even positions, answers at odd ones (for views)."""
        return [f"{'x' if pos % 2 == 0 else 'y'}={token}" for pos, token in enumerate(tokens)]

    def to_dict(self) -> dict[str, Any]:
        """``{"task": "permutation", **config.to_dict()}``."""
        return {"task": self.name, **self.config.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PermutationTask:
        """From :meth:`to_dict` output (with or without the ``"task"`` key)."""
        data = dict(data)
        name = data.pop("task", cls.name)
        if name != cls.name:
            raise ValueError(f"not a {cls.name!r} task dict: 'task' is {name!r}")
        return cls(TaskConfig.from_dict(data))


register_task(PermutationTask.name, PermutationTask)
