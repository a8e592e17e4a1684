"""The one ablation table (:class:`AblationTable` of :class:`AblationRow`), and how any task's model fills
it: every head (``blocks.L.attn.hook_z``) and MLP (``blocks.L.hook_mlp_out``) ablated by
:func:`~perm_circuits.analysis.interventions.core.ablate_tokens` (Wang et al. 2022, the IOI paper,
section 3; Chan et al. 2022; Li & Janson 2024), the task's own metrics next to the unablated baseline.
The permutation study fills the same table with its task's metrics
(:mod:`~perm_circuits.analysis.interventions.permutation_table`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_positions, check_seed
from perm_circuits.analysis.interventions.core import (
    ANY_TASK_HOWS,
    TASK_HOWS,
    ablate_tokens,
    check_hook_point,
    component_sweep,
    components_of,
    reference_tokens,
)
from perm_circuits.devices import model_device
from perm_circuits.hooks import HookList, check_hooks, check_token_ids
from perm_circuits.metric import Metric, bind_metric, metric_rows, reduce_rows
from perm_circuits.model_shape import model_shape
from perm_circuits.tasks.base import Task, TaskBatch, masked_cross_entropy
from perm_circuits.tasks.runner import measure_task, model_name

__all__ = [
    "TASK_HOWS",
    "AblationRow",
    "AblationTable",
    "ablate_tokens",
    "check_hook_point",
    "components_of",
    "reference_tokens",
    "task_table",
]


@dataclass(frozen=True)
class AblationRow:
    """The task's metrics with one component ablated (``component="none"``, ``how="none"``: the baseline).

    ``component`` is ``"none"``, ``"L{layer}H{head}"`` or ``"L{layer}MLP"`` (``"L0H0+L1H0"`` for heads
    ablated together by the study's joint ablation; ``layer`` is then None when they span layers);
    ``metrics`` maps each of the table's :attr:`AblationTable.metric_names` to its value (the task's
    own, :attr:`Task.metric_names`; the permutation study's
    :data:`~perm_circuits.analysis.interventions.permutation_table.ABLATION_METRICS`; or
    ``{"metric": mean over rows}`` of a table built with ``metric=``); ``row[name]`` reads one.
    ``test_loss`` is the masked next-token cross-entropy over the test set (nan on token ids: no
    targets; the permutation task's: the mean over every step and sample).
    """

    component: str
    how: str
    layer: int | None
    head: int | None
    metrics: Mapping[str, float]
    test_loss: float

    def __getitem__(self, name: str) -> float:
        """The metric ``name`` of this row (``row.metrics[name]``)."""
        try:
            return self.metrics[name]
        except KeyError:
            raise KeyError(f"no metric {name!r} in this ablation row; it has {list(self.metrics)}") from None


@dataclass(frozen=True)
class _Measured:
    """One run of a ``metric=`` table: what :func:`measure_task` gives a task's table."""

    metrics: Mapping[str, float]
    test_loss: float
    model_name: str


@dataclass(frozen=True)
class AblationTable:
    """Every component ablated under every mode, measured on one test set of ``task`` (the result of
    :func:`~perm_circuits.analysis.interventions.ablation.ablation_table`, on every model).

    ``task`` names the task whose metrics were measured (``"permutation"`` for the study's table,
    ``"metric"`` for a ``metric=`` table); ``metric_names`` are the rows' metrics in order;
    ``reference`` says where mean / resample / optimal values came from (``"test set"``,
    ``"batch of N"``, the study's binding-free or per-skill references); ``positions`` the ablated
    positions (None: all); ``n_samples`` the test set's rows; ``seed`` the resample seed (which
    reference row replaces each sample).  ``n_recall`` is the permutation task's: the test rows whose
    last query repeats an earlier one (the ``recall_accuracy`` subgroup); None on other tasks.
    """

    task: str
    model_name: str
    metric_names: tuple[str, ...]
    rows: tuple[AblationRow, ...]
    n_samples: int
    seed: int
    reference: str = "test set"
    positions: tuple[int, ...] | None = None
    n_recall: int | None = None

    @property
    def baseline(self) -> AblationRow:
        """The unablated row (``component="none"``, ``how="none"``)."""
        return self.get("none", "none")

    @property
    def primary_metric(self) -> str:
        """The metric the report plots: the first whose name has ``"acc"``, else the first one."""
        return next((m for m in self.metric_names if "acc" in m), self.metric_names[0])

    def to_dataframe(self) -> pd.DataFrame:
        """Tidy, one row per (component, how), the baseline first: ``component``, ``how``, ``layer``,
        ``head``, each of :attr:`metric_names`, ``test_loss``, then ``delta_<metric>`` (the row's metric
        minus the baseline's) per metric.  (A task metric named ``test_loss``, as the permutation
        task's evaluation has, is that same masked loss: one column.)"""
        base = self.baseline.metrics
        return pd.DataFrame([
            {"component": row.component, "how": row.how, "layer": row.layer, "head": row.head,
             **{m: row.metrics[m] for m in self.metric_names}, "test_loss": row.test_loss,
             **{f"delta_{m}": row.metrics[m] - base[m] for m in self.metric_names}}
            for row in self.rows
        ])

    def get(self, component: str, how: str) -> AblationRow:
        """The row of ``component`` ablated under ``how`` (KeyError when the table has none)."""
        for row in self.rows:
            if row.component == component and row.how == how:
                return row
        raise KeyError(f"no row for component={component!r}, how={how!r}")


def task_table(
    model,
    task: Task | None,
    hows: Sequence[str],
    test_set: TaskBatch | Tensor,
    *,
    reference: TaskBatch | Tensor | None,
    resample_seed: int = 0,
    positions: int | Sequence[int] | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    progress: bool = False,
    metric: Metric | None = None,
) -> AblationTable:
    """Ablate every head and MLP of ``model`` under each of ``hows`` and measure ``task``'s metrics on ``test_set``,
    or, with ``metric`` (:mod:`perm_circuits.metric`: ``metric(logits, test_set) -> [batch]``), that
    metric's mean over rows (``task`` may then be None and ``test_set`` / ``reference`` token ids).

    ``reference`` gives the mean, the resample pool (``resample_seed`` seeds the draw) and the
    batch whose masked loss the optimal constant minimises (None: no reference, zero ablation only).
    Most callers want :func:`~perm_circuits.analysis.interventions.ablation.ablation_table`, which builds
    the defaults.
    """
    check_seed(resample_seed, "resample_seed")
    if metric is None and not isinstance(task, Task):
        raise TypeError(f"task must be a perm_circuits.tasks.Task (or pass metric=), got {type(task).__name__}")
    allowed = (TaskBatch,) if metric is None else (TaskBatch, Tensor)
    what = "a TaskBatch" if metric is None else "a TaskBatch or token ids [batch, seq]"
    if not isinstance(test_set, allowed):
        raise TypeError(f"test_set must be {what}, got {type(test_set).__name__}")
    if reference is not None and not isinstance(reference, allowed):
        raise TypeError(f"reference must be {what} or None, got {type(reference).__name__}")
    d_vocab = model_shape(model).d_vocab
    check_token_ids(_tokens_of(test_set), d_vocab)  # non-empty, ids the model embeds
    if reference is not None:
        check_token_ids(_tokens_of(reference), d_vocab)
    return shared_task_table(model, task, hows, test_set, reference, resample_seed, positions, hooks, progress, metric)


def _tokens_of(batch: TaskBatch | Tensor) -> Tensor:
    return batch.tokens if isinstance(batch, TaskBatch) else batch


def shared_task_table(model, task: Task | None, hows: object, test_set: TaskBatch | Tensor,
                      reference: TaskBatch | Tensor | None, resample_seed: int, positions: object, hooks: object,
                      progress: bool, metric: object) -> AblationTable:
    """:func:`task_table` after the checks of its batches, task and seed, which ``task_table`` and
    ``ablation_table`` each ran themselves (internal: not in ``__all__``); ``hows``, ``positions``, ``hooks``
    and ``metric`` (in ``bind_metric``) are checked here for both, before any forward."""
    shape = model_shape(model)
    if isinstance(hows, str) or not isinstance(hows, (list, tuple)) or not hows:
        raise TypeError(f"hows must be a non-empty list or tuple of modes from {ANY_TASK_HOWS}, got {hows!r}")
    for how in hows:
        if how not in ANY_TASK_HOWS:
            raise ValueError(f"hows entries must be in {ANY_TASK_HOWS} on a task's model, got {how!r}")
    tokens_of = _tokens_of
    position_list = check_positions(positions, tokens_of(test_set).shape[1])
    hooks = check_hooks(model, hooks)
    label = "test set" if reference is None or reference is test_set else f"batch of {len(tokens_of(reference))}"
    test_set = test_set.to(model_device(model))  # once: every run below stays on the model's device
    reference = None if reference is None else reference.to(model_device(model))
    components = components_of(model)
    if not components:
        raise ValueError(
            f"{type(model).__name__} has no blocks.L.attn.hook_z or blocks.L.hook_mlp_out hook point "
            f"({shape.n_layers} layer(s)): nothing to ablate"
        )
    if reference is None and any(how != "zero" for how in hows):
        raise ValueError(f"modes {[h for h in hows if h != 'zero']} need a reference TaskBatch")

    def build(hook_name: str, head: int | None, how: str) -> HookList:
        return ablate_tokens(model, hook_name, how, reference=None if how == "zero" else reference, index=head,
                             positions=position_list, seed=resample_seed, hooks=hooks)

    if metric is None:
        measure = lambda extra: measure_task(model, task, test_set, hooks=hooks + extra or None)  # noqa: E731
    else:
        measure = _metric_measure(model, bind_metric(metric, test_set), test_set, hooks)
    # the baseline runs first: a wrong metric is refused there (metric_rows), before any ablation
    runs = component_sweep(components, hows, build, measure, by_mode=True, progress=progress, desc="task ablation")
    rows = tuple(AblationRow(component, how, layer, head, dict(result.metrics), result.test_loss)
                 for component, how, layer, head, _, result in runs)
    names = ("metric",) if metric is not None else tuple(task.metric_names)
    name = task.name if task is not None else "metric"
    return AblationTable(task=name, model_name=runs[0][-1].model_name, metric_names=names, rows=rows,
                         n_samples=len(tokens_of(test_set)), seed=resample_seed, reference=label,
                         positions=None if position_list is None else tuple(position_list))


def _metric_measure(model, bound: Callable[[Tensor], Tensor], test_set: TaskBatch | Tensor,
                    hooks: HookList) -> Callable[[HookList], _Measured]:
    """``measure(extra)`` of a ``metric=`` table: one no-grad forward with ``hooks + extra``, the
    metric's mean over rows and the masked loss (nan on token ids)."""
    tokens = test_set.tokens if isinstance(test_set, TaskBatch) else test_set
    name = model_name(model)

    def measure(extra: HookList) -> _Measured:
        with torch.no_grad(), model.hooks(fwd_hooks=hooks + extra):
            logits = model(tokens)
        value = float(reduce_rows(metric_rows(bound, logits, len(tokens))))
        loss = (float(masked_cross_entropy(logits, test_set.targets, test_set.mask))
                if isinstance(test_set, TaskBatch) else math.nan)
        return _Measured({"metric": value}, loss, name)

    return measure

