"""The one evaluation: :func:`evaluate` measures any model on any task (``task=``:
:func:`perm_circuits.tasks.runner.measure_task`) and returns one result type,
:class:`~perm_circuits.tasks.evaluation.Evaluation`.  The study's permutation-lookup models are
measured by default, and the permutation task's ``detail`` (:class:`PermutationDetail`) holds, per
y-prediction step ``1..V`` of a fixed test set: accuracy, the Bayesian predictor's
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
from perm_circuits.models import bridge_task, model_config_of, task_config_of
from perm_circuits.tasks.permutation_posterior import Posterior
from perm_circuits.tasks.permutation_data import (TaskConfig, exhaustive_batch, make_batch, make_test_set, permutation_batch,
                                                  probe_sequence)
from perm_circuits.tasks.runner import measure_task, task_logits
from perm_circuits.tasks.base import Task, TaskBatch, model_task
from perm_circuits.tasks.evaluation import Evaluation
from perm_circuits.tasks.permutation import (
    PermutationDetail,
    PermutationTask,
    StepMetrics,
    SubgroupMetrics,
    evaluate_logits,
    value_probs,
)

__all__ = [
    "Evaluation",
    "PermutationDetail",
    "RecallGeneralisation",
    "StepMetrics",
    "SubgroupMetrics",
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
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int | None = None,
    seed: int = 1234,
    probe: bool = True,
    forward: Callable | None = None,
) -> Evaluation:
    """Evaluate ``model`` on a task: the one evaluation of every task and model, one result type
    (:class:`Evaluation`: the task's metrics, the test loss, the agreement with the task's
    reference, and the task's own ``detail``).

    * On one of the study's permutation-lookup models (default task: the one stored with the model;
      ``task=`` a :class:`~perm_circuits.tasks.PermutationTask` or its ``TaskConfig``): the study's
      evaluation, whose ``detail`` (:class:`~perm_circuits.tasks.permutation.PermutationDetail`)
      holds the per-step metrics against the Bayesian posteriors, the last-step subgroups and the
      probe; ``str()`` renders its tables.
    * Any other model (a bridge, a ``HookedRootModule``, any ``tokens -> logits`` module) on any
      registered :class:`~perm_circuits.tasks.Task` (default: the task the model carries,
      ``tasks.base.model_task``), measured by :func:`~perm_circuits.tasks.runner.measure_task`.

    Args:
        test_set: default: the task's fixed test set of ``n`` samples drawn with ``seed`` (the
            study's: from the test permutations, with the model's training ``repeat_ratio`` and
            ``repeat_sources``).
        task: the task; a ``TaskConfig`` means its ``PermutationTask``.
        hooks: a TransformerLens hook list active during the forward pass (always removed
            afterwards, also after an exception).
        n: test-set size; default 5000 for the study's evaluation, 2000 for any other.
        probe: the study's evaluation also runs its probe sequence (a batch of one) under ``hooks``;
            turn off for hooks tied to the test set's batch size (row-paired resampling).
        forward: ``forward(model, tokens) -> logits`` instead of ``model(tokens)`` (not with
            ``hooks``).
    """
    if task is not None and not isinstance(task, (Task, TaskConfig)):
        raise TypeError(f"task must be a perm_circuits.tasks.Task, a TaskConfig or None, got {type(task).__name__}")
    if forward is not None and not callable(forward):
        raise TypeError(f"forward must be a callable (model, tokens) -> logits or None, got {type(forward).__name__}")
    if hooks is not None and forward is not None:
        raise ValueError("hooks= need the model's own forward pass; pass forward=None (a custom forward skips hook points)")
    if n is not None:
        check_int("n", n, low=1)
    if isinstance(task, TaskConfig):
        task = PermutationTask(task)
    study = bridge_task(model)  # the study's task of one of its bridges, else None
    if task is None:
        task = study if study is not None else model_task(model)
        if task is None:
            raise TypeError(f"{type(model).__name__} carries no task: evaluate(model, task=task) measures a model of "
                            "any task")
    if study is None or not isinstance(task, PermutationTask):
        return measure_task(model, task, test_set, n=2000 if n is None else n, seed=seed, forward=forward, hooks=hooks)
    config = task.config
    if config.V != study.config.V:
        raise ValueError(f"task has V={config.V} but the model has V={study.config.V}")
    if test_set is None:
        test_set = make_test_set(config, n=5000 if n is None else n, seed=seed)
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch, got {type(test_set).__name__}")
    test_set = permutation_batch(test_set).to(model_device(model))  # once: the forward and the posteriors run on the model's device
    return evaluate_run(model, test_set, config, hooks, probe=probe, forward=forward)[1]


def evaluate_run(
    model, test_set: TaskBatch, config: TaskConfig, hooks: Sequence[tuple[str, Callable]] | None = None, *,
    posteriors: tuple[Posterior, Posterior] | None = None, probe: bool = False, forward: Callable | None = None,
    reference: bool = True,
) -> tuple[Float[Tensor, "batch seq vocab"], Evaluation]:
    """The logits on ``test_set`` under ``hooks`` (or from ``forward(model, tokens)``) and their
    :class:`Evaluation` (:func:`evaluate_logits`, whose ``posteriors`` an ablation table caches across
    its runs, and whose ``reference`` it turns off); ``probe`` also runs the probe sequence (V = 5)."""
    if forward is None:
        logits = run_logits(model, test_set.tokens, hooks)
        probs = probe_probabilities(model, hooks).tolist() if probe and config.V == 5 else None
    else:
        logits = task_logits(model, test_set.tokens, forward)
        probs = (value_probs(task_logits(model, probe_sequence().to(test_set.tokens.device), forward), config.V)[0, -1]
                 .tolist() if probe and config.V == 5 else None)
    return logits, evaluate_logits(logits, test_set, config, posteriors=posteriors,
                                   model_name=model_config_of(model).name, probe=probs, reference=reference)


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
    task: PermutationTask | TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int | None = 2000,
    seed: int = 99,
) -> RecallGeneralisation:
    """Measure recall when the repeated query is ``x_k`` for every ``k`` (test permutations) on one of
    the study's permutation-lookup models.

    The batch ``k`` repeats ``x_k`` in every sample, the same batches whatever the task's
    ``repeat_sources``.  ``task``: a :class:`~perm_circuits.tasks.PermutationTask` or its
    ``TaskConfig`` (its split; default: the task stored with the model).  ``n=None``: every test
    permutation with every order of the queries
    (:func:`~perm_circuits.tasks.permutation_data.exhaustive_batch`; 2,880 per ``k`` for the study's split).
    """
    if isinstance(task, PermutationTask):
        task = task.config
    if task is not None and not isinstance(task, TaskConfig):
        raise TypeError(f"task must be a PermutationTask, a TaskConfig or None, got {type(task).__name__}")
    if n is not None and check_int("n", n) < 1:
        raise ValueError(f"n must be a positive int or None (exhaustive), got {n!r}")
    check_seed(seed)
    config = task or task_config_of(model)

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
