"""Shared argument validation for the analysis modules, run *before* any forward pass: ``TypeError``
for a wrong type, ``ValueError`` out of range, the message naming the argument, the bad value and
what was expected.

Index rule: every index of a layer, a head, a sequence position or an entry of an activation axis
accepts Python-style negative values: ``i`` in ``[-size, size)`` is normalised to ``i % size``
(``layer=-1`` is the last layer), and results and labels report the normalised index.  ``bool``
is never an int.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from perm_circuits.checks import check_int, check_positive_int, check_seed
from perm_circuits.model_shape import model_shape
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.base import Task, TaskBatch, model_task
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = [
    "check_head",
    "check_index",
    "check_index_list",
    "check_int",
    "check_layer",
    "check_neurons",
    "check_position",
    "check_positions",
    "check_positive_int",
    "check_seed",
    "check_task_config",
    "resolve_task",
    "seq_len",
    "study_config",
]


def check_index(name: str, value: object, size: int, what: str = "") -> int:
    """An index into an axis of ``size`` entries, Python-style: ``[-size, size)`` -> ``[0, size)``.

    ``what`` describes the axis in the error message (e.g. ``"the model has 1 layer(s)"``).
    """
    if not -size <= check_int(name, value) < size:
        where = f" ({what})" if what else ""
        bound = f"[{-size}, {size - 1}]" if size > 0 else "[] (empty axis)"
        raise ValueError(f"{name} {value} out of range: {name} must be in {bound}{where}")
    return value % size


def check_layer(model, layer: object) -> int:
    """A layer index of ``model``; negative layers count from the end (``-1`` = the last layer).

    Any hooked model: the study's bridges through their ``ModelConfig``, others through
    :func:`~perm_circuits.model_shape.model_shape`.
    """
    n_layers = model_shape(model).n_layers
    return check_index("layer", layer, n_layers, f"the model has {n_layers} layer(s)")


def check_head(model, head: object) -> int:
    """A head index of ``model``; negative heads count from the end."""
    n_heads = model_shape(model).n_heads
    if n_heads is None:
        raise ValueError(f"{type(model).__name__} declares no number of heads (model.cfg.n_heads): cannot index a head")
    return check_index("head", head, n_heads, f"the model has {n_heads} head(s) per layer")


def seq_len(model) -> int:
    """Length ``2V - 1`` of the task's sequences for ``model``."""
    return 2 * model_config_of(model).V - 1


def check_position(position: object, size: int, name: str = "position") -> int:
    """One sequence position in ``[-size, size)``, normalised to ``[0, size)``."""
    return check_index(name, position, size, f"sequences have {size} positions")


def _check_distinct_indices(name: str, value: object, check_one: Callable[[object], int]) -> list[int] | None:
    """``None``, or the int / non-empty sequence (or 1-D integer tensor) ``value`` as distinct checked indices."""
    if value is None:
        return None
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(items, Tensor):
        if items.dtype.is_floating_point or items.dtype.is_complex or items.dtype == torch.bool or items.ndim > 1:
            raise TypeError(f"{name} must be ints, got a {items.dtype} tensor of shape {tuple(items.shape)}")
        items = [int(v) for v in items.tolist()]
    if not isinstance(items, (list, tuple, range)):
        raise TypeError(f"{name} must be an int or a sequence of ints, got {type(value).__name__} {value!r}")
    if len(items) == 0:
        raise ValueError(f"{name} must not be empty")
    out = [check_one(item) for item in items]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} has repeated entries: {list(items)}")
    return out


def check_positions(positions: object, size: int, name: str = "positions") -> list[int] | None:
    """``None`` (all positions), an int, or a non-empty sequence of distinct positions.

    Negative positions count from the end; the result holds the normalised positions.
    """
    return _check_distinct_indices(name, positions, lambda p: check_position(p, size, "position"))


def check_index_list(name: str, value: object, size: int) -> list[int] | None:
    """``None`` (everything), an int, or a non-empty sequence (or 1-D integer tensor) of distinct
    indices into an axis of ``size`` entries (negative indices count from the end)."""
    what = f"the axis has {size} entries"
    return _check_distinct_indices(name, value, lambda i: check_index(f"{name} entry", i, size, what))


def check_neurons(model, neurons: int | Sequence[int] | Tensor | None) -> list[int] | None:
    """Neuron indices of the model's MLP (``None`` = all; negative indices count from the end)."""
    return check_index_list("neurons", neurons, model_config_of(model).resolved_d_mlp)


def check_task_config(model, task: object, name: str = "task_config") -> TaskConfig:
    """The permutation task's settings a study analysis runs on: ``task`` (a
    :class:`~perm_circuits.tasks.PermutationTask` or its
    :class:`~perm_circuits.tasks.permutation_data.TaskConfig`; default: the task the model was trained
    on, ``task_config_of(model)``), checked to have the model's ``V``.  ``name`` is the argument the
    caller's user passed (``task=`` in the public tools)."""
    if isinstance(task, PermutationTask):
        task = task.config
    if task is not None and not isinstance(task, TaskConfig):
        raise TypeError(f"{name} must be a PermutationTask, a TaskConfig or None on a permutation-lookup model, "
                        f"got {type(task).__name__}")
    config = task if task is not None else task_config_of(model)
    V = model_config_of(model).V
    if config.V != V:
        raise ValueError(f"{name} has V={config.V} but the model has V={V}")
    return config


def study_config(task: object, name: str = "task") -> TaskConfig:
    """The permutation task's settings from ``task`` (a :class:`~perm_circuits.tasks.PermutationTask` or
    its bare :class:`~perm_circuits.tasks.permutation_data.TaskConfig`, the same either way), for the
    study's builders that take no model (the patching pairs, the binding-free reference)."""
    if isinstance(task, PermutationTask):
        return task.config
    if not isinstance(task, TaskConfig):
        raise TypeError(f"{name} must be a PermutationTask or a TaskConfig, got {type(task).__name__}")
    return task


def resolve_task(model, task: object, *, general: bool = False, name: str = "task") -> tuple[Task | None, TaskConfig | None]:
    """Which path ``task=`` of a public tool takes (the one way to say which task):
    ``(None, config)`` where the model's own analysis runs (the study's, on a permutation-lookup model):
    ``task`` is ``None`` or, on such a model, a :class:`~perm_circuits.tasks.PermutationTask` or a bare
    :class:`~perm_circuits.tasks.permutation_data.TaskConfig` (``config``: its checked settings, ``None``
    for the model's stored task).  ``(task, None)`` for the general path: any other
    :class:`~perm_circuits.tasks.Task`, or any task when ``general`` (the caller was given ``metric=`` or
    token ids), where a bare ``TaskConfig`` becomes its ``PermutationTask`` and ``None`` the model's own
    task (``model_task(model)``, ``None`` where it has none).  Anything else: ``TypeError`` naming ``name``."""
    if task is not None and not isinstance(task, (Task, TaskConfig)):
        raise TypeError(f"{name} must be a perm_circuits.tasks.Task (a PermutationTask or a TaskConfig on a "
                        f"permutation-lookup model) or None, got {type(task).__name__}")
    own = model_task(model)
    study = isinstance(own, PermutationTask)
    if not general and (task is None or (study and isinstance(task, (PermutationTask, TaskConfig)))):
        return None, None if task is None else check_task_config(model, task, name)
    if task is None:
        return own, None
    if isinstance(task, (PermutationTask, TaskConfig)) and study:
        return PermutationTask(check_task_config(model, task, name)), None
    return (PermutationTask(task) if isinstance(task, TaskConfig) else task), None


def task_test_set(model, task: object, test_set: object, n: int, seed: int, *, hint: str) -> TaskBatch | Tensor:
    """The batch a general tool runs on, on any task's model: ``test_set`` (a :class:`TaskBatch` or token
    ids ``[batch, seq]``), else ``task.test_set(n, seed)``; ``hint`` ends the message when neither is given."""
    if task is not None and not isinstance(task, Task):
        raise TypeError(f"task must be a perm_circuits.tasks.Task or None, got {type(task).__name__}")
    if test_set is None:
        if task is None:
            raise ValueError(f"{type(model).__name__} is not a permutation-lookup model: pass task= {hint}")
        check_int("n", n, 1)
        test_set = task.test_set(n, seed)
    if not isinstance(test_set, (TaskBatch, Tensor)):
        raise TypeError(f"test_set must be a TaskBatch or token ids [batch, seq] on a task's model, got "
                        f"{type(test_set).__name__}")
    return test_set
