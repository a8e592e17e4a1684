"""The ablation table of any task's model: every head (``blocks.L.attn.hook_z``) and MLP (``blocks.L.hook_mlp_out``)
ablated by :func:`~perm_circuits.analysis.interventions.core.ablate_tokens` (Wang et al. 2022, the IOI paper,
section 3; Chan et al. 2022; Li & Janson 2024), the task's own metrics next to the unablated baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_seed
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
from perm_circuits.metric import Metric, bind_metric, check_metric, metric_rows, reduce_rows
from perm_circuits.model_shape import model_shape
from perm_circuits.tasks.base import Task, TaskBatch, masked_cross_entropy
from perm_circuits.tasks.runner import measure_task, model_name

__all__ = [
    "TASK_HOWS",
    "TaskAblationRow",
    "TaskAblationTable",
    "ablate_tokens",
    "check_hook_point",
    "components_of",
    "reference_tokens",
    "task_table",
]


@dataclass(frozen=True)
class TaskAblationRow:
    """The task's metrics with one component ablated (``component="none"``: the baseline).

    ``component`` is ``"none"``, ``"L{layer}H{head}"`` or ``"L{layer}MLP"``; ``metrics`` are the
    task's own (:attr:`Task.metric_names`), or ``{"metric": mean over rows}`` of a table built with
    ``metric=``; ``test_loss`` is the masked next-token loss (nan on token ids: no targets).
    """

    component: str
    how: str
    layer: int | None
    head: int | None
    metrics: Mapping[str, float]
    test_loss: float


@dataclass(frozen=True)
class _Measured:
    """One run of a ``metric=`` table: what :func:`measure_task` gives a task's table."""

    metrics: Mapping[str, float]
    test_loss: float
    model_name: str


@dataclass(frozen=True)
class TaskAblationTable:
    """Every component ablated under every mode, measured on one test set of ``task``."""

    task: str
    model_name: str
    metric_names: tuple[str, ...]
    rows: tuple[TaskAblationRow, ...]
    n: int
    seed: int

    @property
    def baseline(self) -> TaskAblationRow:
        return self.rows[0]

    @property
    def primary_metric(self) -> str:
        """The metric the report plots: the first whose name has ``"acc"``, else the first one."""
        return next((m for m in self.metric_names if "acc" in m), self.metric_names[0])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (component, mode): the metrics, ``test_loss`` and ``delta_<metric>`` vs the baseline."""
        base = self.baseline.metrics
        return pd.DataFrame([
            {"component": row.component, "how": row.how, "layer": row.layer, "head": row.head, **row.metrics,
             "test_loss": row.test_loss, **{f"delta_{m}": row.metrics[m] - base[m] for m in self.metric_names}}
            for row in self.rows
        ])

    def get(self, component: str, how: str) -> TaskAblationRow:
        for row in self.rows:
            if row.component == component and row.how == how:
                return row
        raise KeyError(f"no row for component {component!r} under how={how!r}")


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
    test_seed: int = 1234,
    progress: bool = False,
    metric: Metric | None = None,
) -> TaskAblationTable:
    """Ablate every head and MLP of ``model`` under each of ``hows`` and measure ``task``'s metrics on ``test_set``,
    or, with ``metric`` (:mod:`perm_circuits.metric`: ``metric(logits, test_set) -> [batch]``), that
    metric's mean over rows (``task`` may then be None and ``test_set`` / ``reference`` token ids).

    ``reference`` gives the mean, the resample pool (``resample_seed`` seeds the draw) and the
    batch whose masked loss the optimal constant minimises; ``test_seed`` is recorded only.  Most
    callers want :func:`~perm_circuits.analysis.interventions.ablation.ablation_table`, which builds
    the defaults.
    """
    shape = model_shape(model)
    if isinstance(hows, str) or not isinstance(hows, (list, tuple)) or not hows:
        raise TypeError(f"hows must be a non-empty list or tuple of modes from {ANY_TASK_HOWS}, got {hows!r}")
    for how in hows:
        if how not in ANY_TASK_HOWS:
            raise ValueError(f"hows entries must be in {ANY_TASK_HOWS} on a task's model, got {how!r}")
    check_seed(resample_seed, "resample_seed")
    if metric is None and not isinstance(task, Task):
        raise TypeError(f"task must be a perm_circuits.tasks.Task (or pass metric=), got {type(task).__name__}")
    allowed = (TaskBatch,) if metric is None else (TaskBatch, Tensor)
    what = "a TaskBatch" if metric is None else "a TaskBatch or token ids [batch, seq]"
    if not isinstance(test_set, allowed):
        raise TypeError(f"test_set must be {what}, got {type(test_set).__name__}")
    if reference is not None and not isinstance(reference, allowed):
        raise TypeError(f"reference must be {what} or None, got {type(reference).__name__}")
    tokens_of = lambda batch: batch.tokens if isinstance(batch, TaskBatch) else batch  # noqa: E731
    check_token_ids(tokens_of(test_set), shape.d_vocab)  # non-empty, ids the model embeds
    if reference is not None:
        check_token_ids(tokens_of(reference), shape.d_vocab)
    if metric is not None:
        check_metric(metric)
    hooks = check_hooks(model, hooks)
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
                             positions=positions, seed=resample_seed, hooks=hooks)

    if metric is None:
        measure = lambda extra: measure_task(model, task, test_set, hooks=hooks + extra or None)  # noqa: E731
    else:
        measure = _metric_measure(model, bind_metric(metric, test_set), test_set, hooks)
    # the baseline runs first: a wrong metric is refused there (metric_rows), before any ablation
    runs = component_sweep(components, hows, build, measure, by_mode=True, progress=progress, desc="task ablation")
    rows = tuple(TaskAblationRow(component, how, layer, head, dict(result.metrics), result.test_loss)
                 for component, how, layer, head, _, result in runs)
    names = ("metric",) if metric is not None else tuple(task.metric_names)
    name = task.name if task is not None else "metric"
    return TaskAblationTable(name, runs[0][-1].model_name, names, rows, len(tokens_of(test_set)), test_seed)


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

