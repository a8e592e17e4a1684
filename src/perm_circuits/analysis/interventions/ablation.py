"""Ablation on every model (Wang et al. 2022, "Interpretability in the Wild"; Chan et al. 2022 on
resample ablation; Li & Janson 2024, "Optimal ablation for interpretability"): the hook builders of
:mod:`.hooks` and :mod:`.core`, and :func:`ablation_table`, which runs the permutation study's table
(:mod:`.permutation_table`) or any task's (:mod:`.ablation_table`), both as the one
:class:`AblationTable`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_int, check_layer, check_positions, check_seed  # noqa: F401 (re-exported)
from perm_circuits.analysis.interventions.hooks import (
    HOWS,
    PAIRINGS,
    ablate,
    ablate_head,
    ablate_mlp,
    binding_free_reference,
    optimal_constant,
    reference_activations,
    resample_rows,
)
from perm_circuits.analysis.interventions.core import ANY_TASK_HOWS, TASK_HOWS, ablate_tokens, reference_tokens
from perm_circuits.analysis.interventions.ablation_table import AblationRow, AblationTable, shared_task_table
from perm_circuits.metric import Metric
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.tasks.base import Task, TaskBatch, model_task, own_analysis

__all__ = [
    "ANY_TASK_HOWS",
    "HOWS",
    "PAIRINGS",
    "TASK_HOWS",
    "AblationRow",
    "AblationTable",
    "ablate",
    "ablate_head",
    "ablate_mlp",
    "ablate_tokens",
    "ablation_table",
    "binding_free_reference",
    "optimal_constant",
    "reference_activations",
    "resample_rows",
]


def ablation_table(
    model,
    hows: Sequence[str] | None = None,
    test_set: TaskBatch | Tensor | None = None,
    *,
    task: Task | TaskConfig | None = None,
    reference: TaskBatch | Tensor | str = "test",
    positions: int | Sequence[int] | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    seed: int = 0,
    n: int = 500,
    test_seed: int = 1234,
    progress: bool = False,
    metric: Metric | None = None,
) -> AblationTable:
    """Ablate every head and every MLP under each mode in ``hows`` and evaluate on ``test_set``: one
    :class:`AblationTable` (a row per component and mode after the unablated ``"none"`` baseline, each
    with the task's metrics and the masked loss) on every model.

    - A model whose task has a table of its own (:func:`~perm_circuits.tasks.base.own_analysis`;
      a study bridge's permutation task), given no ``metric`` and no token-id ``test_set``, with
      ``task`` None (the model's own task) or, on a permutation-lookup model, a
      :class:`~perm_circuits.tasks.PermutationTask` or its ``TaskConfig`` (the study's task with
      those settings): that task's table; the study's has the metrics of
      :data:`~perm_circuits.analysis.interventions.permutation_table.ABLATION_METRICS`
      (:func:`~perm_circuits.analysis.interventions.permutation_table.ablation_runs` says what
      ``test_set`` and ``reference`` default to); ``hows`` defaults to all five :data:`HOWS`;
      ``n``, ``test_seed`` and ``progress`` are unused (``n`` and ``test_seed`` still checked).
    - Otherwise (``task`` required): the task's own metrics (:attr:`Task.metric_names`) and
      masked loss; ``hows`` defaults to :data:`TASK_HOWS`, any of :data:`ANY_TASK_HOWS` allowed
      (``"optimal"`` minimises the reference's masked loss); ``test_set`` defaults to
      ``task.test_set(n, test_seed)``, ``reference`` is ``"test"`` or a TaskBatch.
    - With ``metric`` (:mod:`perm_circuits.metric`: ``metric(logits, test_set) -> [batch]``, one
      number per row), any model: that metric's mean over rows (the metric ``"metric"``) and the
      masked loss (nan on token ids); ``test_set`` is a TaskBatch or token ids (default
      ``task.test_set(n, test_seed)`` when ``task`` is given), ``reference`` ``"test"``, a TaskBatch
      or token ids.  The metric is checked on the unablated run, before any ablated one.

    In all, ``seed`` is the resample seed (which reference row replaces each sample; the table's
    ``seed``), ``positions`` restricts every ablation and ``hooks`` are active in every run (the
    reference runs included).
    """
    check_int("n", n, 1)  # on every path (unused by a task's own table, but a bad value is refused, not ignored)
    check_seed(test_seed, "test_seed")
    own = None
    if metric is None and not isinstance(test_set, Tensor) and (
            task is None or (isinstance(task, (PermutationTask, TaskConfig))
                             and isinstance(model_task(model), PermutationTask))):
        own = own_analysis(model, "ablation_table")  # the model's task's own table (the study's, on its bridges)
    if own is not None:
        return own(model, hows, test_set, task=task, reference=reference, positions=positions, hooks=hooks, seed=seed)
    if isinstance(task, TaskConfig):
        raise TypeError(f"task is a TaskConfig (the permutation task's settings), but {type(model).__name__} is not "
                        "a permutation-lookup model; pass a perm_circuits.tasks.Task or metric=")
    if metric is not None:  # the metric itself is checked (bind_metric) before the table's first forward
        if task is not None and not isinstance(task, Task):
            raise TypeError(f"task must be a perm_circuits.tasks.Task or None, got {type(task).__name__}")
    elif not isinstance(task, Task):
        raise TypeError(
            f"ablation_table on {type(model).__name__} needs task= (a perm_circuits.tasks.Task whose metrics "
            f"are measured) or metric= (metric(logits, batch) -> [batch]), got {type(task).__name__}"
        )
    check_seed(seed)
    batches = (TaskBatch,) if metric is None else (TaskBatch, Tensor)
    what = "a TaskBatch" if metric is None else "a TaskBatch or token ids"
    if test_set is None:
        if task is None:
            raise ValueError("ablation_table with metric= and no task= needs test_set= (a TaskBatch or token ids "
                             "[batch, seq])")
        test_set = task.test_set(n, test_seed)
    if not isinstance(test_set, batches):
        raise TypeError(f"test_set must be {what} (task.test_set(...)) for a task's table, got "
                        f"{type(test_set).__name__}")
    if isinstance(reference, str):
        if reference != "test":
            raise ValueError(f"reference must be 'test' or {what} on a task's model, got {reference!r}")
        reference = test_set
    elif not isinstance(reference, batches):
        raise TypeError(f"reference must be 'test' or {what} on a task's model, got {type(reference).__name__}")
    tokens = test_set.tokens if isinstance(test_set, TaskBatch) else test_set
    reference_tokens(model, tokens)
    reference_tokens(model, reference, positions=tokens.shape[1])
    return shared_task_table(model, task, list(TASK_HOWS) if hows is None else hows, test_set, reference, seed,
                             positions, hooks, progress, metric)  # task_table's own checks ran here
