"""The one evaluation: :func:`evaluate` measures any model on any task (``task=``:
:func:`perm_circuits.tasks.runner.measure_task`), and the study's permutation-lookup models by
default, per y-prediction step ``1..V`` of a fixed test set: accuracy, the Bayesian predictor's
accuracy (its mean probability on the target), mean and max absolute error against each posterior
(:mod:`perm_circuits.posterior`: uniform and train-split prior) and the loss.  The last step is split
into the elimination subgroup (a new query) and the memorization subgroup (a repeated query, where
recall must beat elimination; the study's section 07), and that into ``recall_x{k}`` per repeated
``x_k`` (``TaskConfig.repeat_sources``).  Distributions are the full-vocabulary softmax restricted
to tokens ``1..V`` (mass on the unused token 0 counts as error); accuracy is the full-vocabulary
argmax equal to the target (preferring token 0 is wrong).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
from jaxtyping import Float
from torch import Tensor

from perm_circuits.checks import check_int, check_seed
from perm_circuits.devices import model_device
from perm_circuits.hooks import run_logits
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.permutation_posterior import Posterior
from perm_circuits.tasks.permutation_data import (TaskConfig, exhaustive_batch, make_batch, make_test_set, permutation_batch,
                                                  probe_sequence)
from perm_circuits.tasks.runner import TaskEvaluation, measure_task
from perm_circuits.tasks.base import Task, TaskBatch
from perm_circuits.tasks.permutation import (
    Evaluation,
    PermutationTask,
    StepMetrics,
    SubgroupMetrics,
    evaluate_logits,
    value_probs,
)

__all__ = [
    "Evaluation",
    "RecallGeneralisation",
    "StepMetrics",
    "SubgroupMetrics",
    "TaskEvaluation",
    "evaluate",
    "evaluate_logits",
    "evaluate_run",
    "probe_probabilities",
    "recall_generalisation",
    "value_probs",
]


def probe_probabilities(
    model, hooks: Sequence[tuple[str, Callable]] | None = None
) -> Float[Tensor, " value"]:
    """P(y = v) for v = 1..5 at the last position of the study's probe ``[2,4,5,3,4,5,3,2,2]``."""
    V = model_config_of(model).V
    if V != 5:
        raise ValueError(f"the study's probe sequence is defined for V=5, model has V={V}")
    logits = run_logits(model, probe_sequence(), hooks)
    return value_probs(logits, V)[0, -1]


def evaluate(
    model,
    test_set: TaskBatch | None = None,
    *,
    task: Task | TaskConfig | None = None,
    task_config: TaskConfig | PermutationTask | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int | None = None,
    seed: int = 1234,
    probe: bool = True,
    forward: Callable | None = None,
) -> Evaluation | TaskEvaluation:
    """Evaluate ``model``: the one evaluation of every task and model.

    * ``evaluate(model)`` (or ``task_config=``) on a permutation-lookup model: the study's
      per-step :class:`Evaluation` against the Bayesian posteriors.
    * ``evaluate(model, task=task)``: any model (a bridge, a ``HookedRootModule``, any
      ``tokens -> logits`` module) on any registered :class:`~perm_circuits.tasks.Task`
      (a ``TaskConfig`` means its ``PermutationTask``): a :class:`TaskEvaluation` with the task's
      own metrics, the masked test loss and the agreement with the task's reference.

    Args:
        test_set: default: the task's fixed test set of ``n`` samples drawn with ``seed`` (the
            study's: from the test permutations, with the model's training ``repeat_ratio`` and
            ``repeat_sources``).
        task_config: the study's task; default: the one stored with the model.  A
            :class:`~perm_circuits.tasks.PermutationTask` (and a ``TaskBatch`` from it) is
            unwrapped: the same :class:`Evaluation`.
        hooks: a TransformerLens hook list active during the forward pass (always removed
            afterwards, also after an exception).
        n: test-set size; default 5000 for the study's evaluation, 2000 with ``task=``.
        probe: also run the study's probe sequence (a batch of one) under ``hooks``; turn off
            for hooks tied to the test set's batch size (row-paired resampling).
        forward: with ``task=``: ``forward(model, tokens) -> logits`` instead of ``model(tokens)``
            (not with ``hooks``).
    """
    if task is not None:
        if task_config is not None:
            raise ValueError("pass task= (any task) or task_config= (the study's evaluation), not both")
        if isinstance(task, TaskConfig):
            task = PermutationTask(task)
        return measure_task(model, task, test_set, n=2000 if n is None else n, seed=seed, forward=forward, hooks=hooks)
    if forward is not None:
        raise ValueError("forward= applies to evaluate(model, task=task); the study's evaluation runs the model itself")
    if isinstance(task_config, PermutationTask):  # the Task interface's wrapper of the study's task
        task_config = task_config.config
    if task_config is None:
        try:
            task_config = task_config_of(model)
        except TypeError as error:
            raise TypeError(f"{error}. evaluate(model, task=task) measures a model of any task") from None
    if test_set is None:
        test_set = make_test_set(task_config, n=5000 if n is None else n, seed=seed)
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch, got {type(test_set).__name__}")
    test_set = permutation_batch(test_set).to(model_device(model))  # once: the forward and the posteriors run on the model's device
    return evaluate_run(model, test_set, task_config, hooks, probe=probe)[1]


def evaluate_run(
    model, test_set: TaskBatch, config: TaskConfig, hooks: Sequence[tuple[str, Callable]] | None = None, *,
    posteriors: tuple[Posterior, Posterior] | None = None, probe: bool = False,
) -> tuple[Float[Tensor, "batch seq vocab"], Evaluation]:
    """The logits on ``test_set`` under ``hooks`` and their :class:`Evaluation` (:func:`evaluate_logits`, whose
    ``posteriors`` an ablation table caches across its runs); ``probe`` also runs the probe sequence (V = 5)."""
    logits = run_logits(model, test_set.tokens, hooks)
    probs = probe_probabilities(model, hooks).tolist() if probe and config.V == 5 else None
    return logits, evaluate_logits(logits, test_set, config, posteriors=posteriors,
                                   model_name=model_config_of(model).name, probe=probs)


@dataclass(frozen=True)
class RecallGeneralisation:
    """Recall accuracy when the last query repeats ``x_k``, for each ``k = 1..V-1``, whatever the
    model was trained on: a model with general in-context recall answers every ``k``, a position-1
    shortcut only ``k = 1`` (the study trains on ``x1`` only).  ``elimination`` is the accuracy on
    non-repeated last queries; ``trained_sources`` the ``k`` seen in training
    (``TaskConfig.repeat_sources``)."""

    model_name: str
    recall: tuple[float, ...]
    elimination: float
    n_per_source: int
    trained_sources: tuple[int, ...] = (1,)

    def to_dataframe(self) -> pd.DataFrame:
        rows = [{"repeats": f"x{k}", "recall_accuracy": acc} for k, acc in enumerate(self.recall, start=1)]
        return pd.DataFrame(rows).set_index("repeats")


def recall_generalisation(
    model,
    *,
    task_config: TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int | None = 2000,
    seed: int = 99,
) -> RecallGeneralisation:
    """Measure recall when the repeated query is ``x_k`` for every ``k`` (test permutations).

    The batch ``k`` repeats ``x_k`` in every sample, the same batches whatever the task's
    ``repeat_sources``.  ``n=None``: every test permutation with every order of the queries
    (:func:`~perm_circuits.tasks.permutation_data.exhaustive_batch`; 2,880 per ``k`` for the study's split).
    """
    if n is not None and check_int("n", n) < 1:
        raise ValueError(f"n must be a positive int or None (exhaustive), got {n!r}")
    check_seed(seed)
    config = task_config or task_config_of(model)

    def accuracy(source: int | None, offset: int) -> tuple[float, int]:
        """Last-step accuracy on a fresh batch repeating ``x_{source+1}`` (None: no repeat), and its size."""
        if n is None:
            batch = exhaustive_batch(config, split="test", repeat_source=source)
        else:
            batch = make_batch(config, n, split="test", seed=seed + offset, repeat_ratio=0.0 if source is None else 1.0,
                               repeat_source=source)
        batch = batch.to(model_device(model))  # once, right after it is drawn
        logits = run_logits(model, batch.tokens, hooks)
        return float((logits[:, -1].argmax(-1) == batch.extras["ys"][:, -1]).float().mean()), len(batch)

    recall, sizes = zip(*(accuracy(source, source) for source in range(config.V - 1)))
    elimination = accuracy(None, -1)[0]
    return RecallGeneralisation(model_config_of(model).name, recall, elimination, sizes[-1], config.repeat_sources)
