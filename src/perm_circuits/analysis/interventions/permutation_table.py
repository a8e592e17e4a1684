"""The permutation study's ablation table: every head and MLP under every mode, on one test set, as
the one :class:`~perm_circuits.analysis.interventions.ablation_table.AblationTable` with the
permutation task's metrics (:data:`ABLATION_METRICS`).

The any-task loop (:func:`~perm_circuits.analysis.interventions.core.component_sweep`) with the study's
hooks (zero / mean / resample / binding_free / optimal; Wang et al. 2022; Chan et al. 2022; Li & Janson
2024) and metrics (:func:`~perm_circuits.evaluate.evaluate_run`, the posteriors computed once).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_positions, check_seed, check_task_config
from perm_circuits.analysis.interventions.ablation_table import AblationRow, AblationTable
from perm_circuits.analysis.interventions.hooks import check_reference
from perm_circuits.analysis.interventions.core import (
    HOWS,
    ablation_fn,
    check_how,
    component_hook,
    component_sweep,
    components_of,
    resample_rows,
    selection,
)
from perm_circuits.analysis.interventions.optimal import optimise_constant, upstream_hooks
from perm_circuits.analysis.interventions.references import binding_free_reference
from perm_circuits.devices import model_device
from perm_circuits.evaluate import evaluate_run
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.hooks import HookList, check_hooks, run_capture
from perm_circuits.models import model_config_of
from perm_circuits.tasks.permutation_posterior import bayes_posterior
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set, permutation_batch, validate_tokens

if TYPE_CHECKING:
    from perm_circuits.tasks.evaluation import Evaluation

__all__ = ["ABLATION_METRICS", "study_ablation_table"]

ABLATION_METRICS: tuple[str, ...] = (
    "elimination_accuracy", "recall_accuracy", "early_mae_train", "elimination_loss", "recall_loss",
    "follows_reference",
)
"""The permutation task's metrics in its :class:`~perm_circuits.analysis.interventions.ablation_table.AblationTable`
rows: ``recall_accuracy`` is the last-step accuracy on the memorization subgroup (the last query
repeats ``x1``; nan without such rows), ``elimination_accuracy`` the last-step accuracy on the
others, ``early_mae_train`` the mean over steps ``1..V-1`` of the MAE against the train-prior
posterior, ``elimination_loss`` / ``recall_loss`` the last-step cross-entropy of each subgroup
(the row's ``test_loss`` is the mean cross-entropy over all steps and samples).  ``follows_reference``
(resample and binding_free only, else nan): the share of samples whose last-step prediction is the
last-step target of the reference sample that replaced the activation; 1 means the component's
output decides the answer and carries it from the reference."""


def study_row(component: str, how: str, layer: int | None, head: int | None, evaluation: Evaluation,
              follows_reference: float = math.nan) -> AblationRow:
    """The permutation task's :class:`AblationRow` (:data:`ABLATION_METRICS`) from one run's evaluation."""
    detail = evaluation.detail
    memorization = detail.memorization
    metrics = {"elimination_accuracy": detail.elimination.accuracy, "recall_accuracy": detail.recall_accuracy,
               "early_mae_train": detail.early_mae_train, "elimination_loss": detail.elimination.loss,
               "recall_loss": memorization.loss if memorization is not None else math.nan,
               "follows_reference": follows_reference}
    return AblationRow(component, how, layer, head, metrics, evaluation.test_loss)


def study_table(model_name: str, rows: Sequence[AblationRow], *, reference: str, positions: tuple[int, ...] | None,
                n_samples: int, n_recall: int, seed: int) -> AblationTable:
    """The permutation task's :class:`AblationTable` of ``rows`` (:data:`ABLATION_METRICS`)."""
    return AblationTable(task=PermutationTask.name, model_name=model_name, metric_names=ABLATION_METRICS,
                         rows=tuple(rows), n_samples=n_samples, seed=seed, reference=reference,
                         positions=positions, n_recall=n_recall)


def study_ablation_table(model, hows: object, test_set: object, *, task: object = None,
                         **options: object) -> AblationTable:
    """The permutation task's own ablation table (``own_analysis(model, "ablation_table")``): every
    mode of ``hows`` (default all five :data:`HOWS`) through :func:`ablation_runs`, on ``task`` (a
    :class:`~perm_circuits.tasks.PermutationTask` or its ``TaskConfig``; default the model's own)."""
    if isinstance(hows, (list, tuple)) and not hows:  # as on a task's model: a table of no mode is a mistake
        raise TypeError(f"hows must be a non-empty list or tuple of modes from {HOWS}, got {hows!r}")
    return ablation_runs(model, HOWS if hows is None else hows, test_set, config=task, **options)[0]


def ablation_runs(
    model,
    hows: Sequence[str],
    test_set: TaskBatch | None,
    *,
    reference: TaskBatch | str = "test",
    positions: int | Sequence[int] | None = None,
    config: PermutationTask | TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    seed: int = 0,
) -> tuple[AblationTable, dict[tuple[str, str], HookList], dict[tuple[str, str], Tensor]]:
    """Ablate every head and every MLP under each mode in ``hows`` and evaluate on ``test_set``.

    Measures, per (component, how) and for an unablated ``"none"`` baseline, the last-step
    elimination and recall (memorization-subgroup) accuracies, the steps ``1..V-1`` MAE against
    the train-prior posterior and the loss, exactly as :func:`~perm_circuits.evaluate.evaluate`
    with the ablation's hooks (plus ``hooks``, applied in every run including the reference one).

    Args:
        hows: modes among :data:`HOWS` (``"zero"``, ``"mean"``, ``"resample"``, ``"binding_free"``, ``"optimal"``).
        test_set: default ``make_test_set(config)`` (the model's training task, so with its
            ``repeat_ratio`` there is a memorization subgroup).
        config: the permutation task's settings (a ``PermutationTask`` or its ``TaskConfig``;
            default the model's own), named ``task`` in messages (the public ``task=``).
        reference: ``"test"`` (mean / resample / optimal over the test set itself, random
            pairing), ``"binding_free"`` (:func:`binding_free_reference` built on the test set's
            queries, resample paired by row: same queries, independent answers) or a TaskBatch
            (random pairing).  The ``"binding_free"`` mode always uses the binding-free
            reference built on the test set's queries, row-paired, whatever ``reference`` is.
        positions: ablate only at these positions (e.g. ``[-1]``: the last query only, so
            steps ``1..V-1`` are untouched and the last step's elimination and recall subgroups
            can be compared); default all.
        seed: the resample seed: which reference sample replaces each test sample under
            ``"resample"`` with random pairing, and the seed of :func:`binding_free_reference`
            (its answers are drawn with ``seed + 1``) for the ``"binding_free"`` mode and
            ``reference="binding_free"``.  It does not choose the test set (pass ``test_set``).

    Resample and binding-free rows also report ``follows_reference``: how often the last-step
    prediction is the answer of the reference sample whose activation was swapped in.

    Returns the table, plus each (component, how)'s hooks and logits (``("none", "none")``: the
    baseline): the head-role verdict reuses them (recall signals, joint ablations) instead of
    rebuilding every ablation, optimal constants included.
    """
    config = check_task_config(model, config, name="task")
    model_config = model_config_of(model)
    if isinstance(hows, str) or not isinstance(hows, (list, tuple)):
        raise TypeError(f"hows must be a sequence of modes from {HOWS}, got {hows!r}")
    hows = [check_how(how) for how in hows]
    check_seed(seed)
    if test_set is None:
        test_set = make_test_set(config)
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch, got {type(test_set).__name__}")
    validate_tokens(test_set.tokens, model_config.V)
    test_set = permutation_batch(test_set).to(model_device(model))  # once: every run below stays on the model's device
    position_list = check_positions(positions, 2 * model_config.V - 1)
    pairing = "random"
    if isinstance(reference, str):
        if reference == "test":
            reference_batch, label = test_set, "test set"
        elif reference == "binding_free":
            reference_batch = binding_free_reference(config, seed=seed, queries=test_set)
            label, pairing = "binding-free (same queries, independent answers; row-paired)", "row"
        else:
            raise ValueError(f"reference must be 'test', 'binding_free' or a TaskBatch, got {reference!r}")
    else:
        reference_batch = check_reference(reference, model_config.V).to(model_device(model))
        label = f"batch of {len(reference)}"
    hooks = check_hooks(model, hooks)

    components = components_of(model)
    names = list(dict.fromkeys(component_hook(layer, head) for _, layer, head in components))

    posteriors = tuple(bayes_posterior(test_set.tokens, config, prior) for prior in ("uniform", "train"))

    answers = {"resample": reference_batch.extras["ys"][:, -1] if pairing == "row" else
               reference_batch.extras["ys"][resample_rows(len(reference_batch), len(test_set), seed), -1]}
    activations: dict[str, Tensor] = {}
    if any(how in ("mean", "resample", "optimal") for how in hows):
        extra_names = [u for name in names for u in upstream_hooks(model, name)] if "optimal" in hows else []
        activations = run_capture(model, reference_batch.tokens, list(dict.fromkeys(names + extra_names)), hooks)[1]
    free: dict[str, Tensor] = {}
    if "binding_free" in hows:
        free_batch = binding_free_reference(config, seed=seed, queries=test_set)
        free = run_capture(model, free_batch.tokens, names, hooks)[1]
        answers["binding_free"] = free_batch.extras["ys"][:, -1]

    def build(hook_name: str, head: int | None, how: str) -> HookList:
        index, activation, constant = None if head is None else [head], activations.get(hook_name), None
        if how == "binding_free":
            activation = free[hook_name]
        elif how == "optimal":
            assert activation is not None
            mask = selection(activation.shape, "pos", index, position_list, activation.device)
            constant = optimise_constant(model, hook_name, mask, reference_batch, hooks, activation,
                                         upstream=activations)
        return [(hook_name, ablation_fn(how, "pos", index, position_list, activation, seed, pairing, constant))]

    runs = component_sweep(components, hows, build, lambda extra: evaluate_run(model, test_set, config, hooks + extra,
                                                                               posteriors=posteriors, reference=False))
    rows, hook_lists, all_logits = [], {}, {}
    for component, how, layer, head, extra, (logits, evaluation) in runs:
        follows = float((logits[:, -1].argmax(-1) == answers[how]).float().mean()) if how in answers else math.nan
        rows.append(study_row(component, how, layer, head, evaluation, follows))
        hook_lists[component, how], all_logits[component, how] = extra, logits
    table = study_table(model_config.name, rows, reference=label,
                        positions=tuple(position_list) if position_list is not None else None,
                        n_samples=len(test_set), n_recall=int(test_set.extras["repeated"].sum()), seed=seed)
    return table, hook_lists, all_logits
