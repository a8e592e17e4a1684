"""The task interface: what ``train``, ``evaluate``, the sweep and the report need from a task.

A task is a small object (usually a frozen dataclass of its settings) that

* makes batches of ``(tokens, targets, mask)`` from a ``torch.Generator`` (:meth:`Task.sample`),
  so the same generator state gives the same batch bit for bit;
* names its metrics and computes them from logits (:meth:`Task.metrics`);
* gives its exact or analytic reference where one exists (:meth:`Task.reference`, else ``None``);
* round-trips through JSON (:meth:`Task.to_dict` / :func:`task_from_dict`) so checkpoints and sweep
  rows can store it.

The permutation lookup of the study is one task behind this interface
(:class:`perm_circuits.tasks.permutation.PermutationTask`); the seed papers' systems
(induction-head bigrams, permutation-chain state tracking, factual recall) are others.  A new task
is one file: a class satisfying :class:`Task` plus ``register_task(name, cls)``.

:func:`fit` is the generic training loop for any ``tokens -> logits`` module (a TransformerLens
bridge or a ``HookedRootModule``): masked next-token cross-entropy, Adam or SGD on the parameters
that require grad (frozen parameters are declared by the model's config, never patched in here),
step callbacks, a silenceable tqdm bar, and bit-identical results for a fixed seed on CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from jaxtyping import Float, Int
from torch import Tensor

__all__ = ["FitResult", "StepState", "Task", "TaskBatch", "fit", "log_spaced_steps", "masked_cross_entropy",
           "register_task", "task_from_dict", "TASKS"]


@dataclass(frozen=True)
class TaskBatch:
    """One batch of any task.

    Attributes:
        tokens: model inputs.
        targets: the next token at every input position (any value where ``mask`` is 0).
        mask: loss weight per position (1.0 where the loss is taken, 0.0 elsewhere).
        extras: task-specific tensors with the batch as first dimension (e.g. the fact ids,
            the hidden chain states), for metrics and analyses.
    """

    tokens: Int[Tensor, "batch seq"]
    targets: Int[Tensor, "batch seq"]
    mask: Float[Tensor, "batch seq"]
    extras: Mapping[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tokens.shape != self.targets.shape or self.tokens.shape != self.mask.shape:
            raise ValueError(
                f"tokens, targets and mask must share a shape, got {tuple(self.tokens.shape)}, "
                f"{tuple(self.targets.shape)}, {tuple(self.mask.shape)}"
            )
        for name in ("tokens", "targets"):
            value = getattr(self, name)
            if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
                raise TypeError(f"{name} must be integer token ids, got dtype {value.dtype}")
        if not self.mask.dtype.is_floating_point:
            raise TypeError(f"mask must be a float tensor of loss weights, got dtype {self.mask.dtype}")
        for name, value in self.extras.items():
            if not isinstance(value, Tensor):
                raise TypeError(f"extras[{name!r}] must be a tensor, got {type(value).__name__}")
            if value.shape[:1] != self.tokens.shape[:1]:
                raise ValueError(f"extras[{name!r}] has batch size {value.shape[:1]}, tokens have {self.tokens.shape[0]}")

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def subset(self, index: Tensor) -> TaskBatch:
        """Rows selected by a boolean mask or an index tensor."""
        return TaskBatch(self.tokens[index], self.targets[index], self.mask[index],
                         {k: v[index] for k, v in self.extras.items()})


@runtime_checkable
class Task(Protocol):
    """What every task provides (see the module docstring)."""

    name: ClassVar[str]

    @property
    def d_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def metric_names(self) -> tuple[str, ...]: ...

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch: ...

    def test_set(self, n: int = 2000, seed: int = 1234) -> TaskBatch: ...

    def metrics(self, logits: Tensor, batch: TaskBatch) -> dict[str, float]: ...

    def reference(self, batch: TaskBatch) -> Tensor | None:
        """The exact or analytic answer on ``batch``, or ``None`` where the task has none.

        Either the reference's next-token distribution over the full vocabulary,
        ``Float[batch, seq, vocab]`` (e.g. the Bayesian posterior), or its next token,
        ``Int[batch, seq]``; only positions where ``batch.mask`` > 0 are compared
        (:func:`perm_circuits.task_eval.evaluate_task`).
        """
        ...

    def to_dict(self) -> dict[str, Any]: ...


TASKS: dict[str, type] = {}
"""Registered task classes by name (``to_dict()["task"]`` names the class)."""


def register_task(name: str, cls: type) -> type:
    """Register ``cls`` under ``name`` for :func:`task_from_dict` (a new task's one line of wiring)."""
    if not isinstance(name, str):
        raise TypeError(f"task name must be a non-empty string, got {type(name).__name__} {name!r}")
    if not name:
        raise ValueError(f"task name must be a non-empty string, got {name!r}")
    if not isinstance(cls, type) or not callable(getattr(cls, "from_dict", None)):
        raise TypeError(f"a task class needs a from_dict classmethod (for task_from_dict), got {cls!r}")
    if name in TASKS and TASKS[name] is not cls:
        raise ValueError(f"task name {name!r} is already registered to {TASKS[name].__name__}")
    TASKS[name] = cls
    return cls


def _import_task_modules() -> None:
    """Import every module of :mod:`perm_circuits.tasks`, so the built-in tasks are registered."""
    import importlib
    import pkgutil

    import perm_circuits.tasks as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def task_from_dict(data: Mapping[str, Any]) -> Task:
    """Rebuild a task from its :meth:`Task.to_dict` (which carries ``"task": name``)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a task dict must be a mapping with a 'task' key, got {type(data).__name__}")
    if "task" not in data:
        raise ValueError(f"a task dict needs a 'task' key naming one of {sorted(TASKS)}, got {data!r}")
    name = data["task"]
    if name not in TASKS:
        _import_task_modules()
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; registered tasks: {sorted(TASKS)}")
    cls = TASKS[name]
    return cls.from_dict({k: v for k, v in data.items() if k != "task"})


def masked_cross_entropy(
    logits: Float[Tensor, "batch seq vocab"], targets: Int[Tensor, "batch seq"], mask: Float[Tensor, "batch seq"]
) -> Tensor:
    """Mean next-token cross-entropy over the positions where ``mask`` > 0 (weighted by it)."""
    losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    weights = mask.flatten().to(losses.dtype)
    total = weights.sum()
    if total <= 0:
        raise ValueError("the loss mask selects no position")
    return (losses * weights).sum() / total


def log_spaced_steps(total: int, n: int = 40, first: int = 1) -> tuple[int, ...]:
    """About ``n`` distinct integer steps from ``first`` to ``total``, spaced evenly in log(step)."""
    if total < first or first < 1 or n < 1:
        raise ValueError(f"need 1 <= first <= total and n >= 1, got first={first}, total={total}, n={n}")
    if n == 1:
        return (total,)
    ratio = math.log(total / first) / (n - 1)
    return tuple(sorted({min(total, round(first * math.exp(i * ratio))) for i in range(n)} | {total}))


@dataclass(frozen=True)
class StepState:
    """What a :func:`fit` callback sees after an optimiser step (``step`` counts from 1)."""

    step: int
    loss: float
    model: torch.nn.Module
    task: Task


@dataclass(frozen=True)
class FitResult:
    """The trained model, the per-step training loss and the callbacks' records."""

    model: torch.nn.Module
    losses: tuple[float, ...]
    records: tuple[Any, ...]


def fit(
    model: torch.nn.Module,
    task: Task,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    seed: int = 0,
    forward: Callable[[torch.nn.Module, Tensor], Tensor] | None = None,
    callbacks: Sequence[Callable[[StepState], Any]] = (),
    progress: bool = True,
) -> FitResult:
    """Train ``model`` on ``task`` for ``steps`` optimiser steps of masked next-token loss.

    Only parameters with ``requires_grad`` train (the model's config declares the frozen ones).
    Batches come from one ``torch.Generator`` seeded with ``seed``, so a fixed seed gives
    bit-identical weights and losses on CPU.  ``forward(model, tokens)`` defaults to
    ``model(tokens)`` (pass e.g. :func:`perm_circuits.models.fast_forward` for a bridge).  Each
    callback gets a :class:`StepState` after every step; whatever it returns that is not ``None``
    is kept in ``FitResult.records`` (a callback decides its own cadence, e.g. with
    :func:`log_spaced_steps`).  The model is left in eval mode.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module mapping tokens to logits, got {type(model).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must implement perm_circuits.tasks.Task, got {type(task).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if forward is not None and not callable(forward):
        raise TypeError(f"forward must be a callable (model, tokens) -> logits, got {forward!r}")
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not (isinstance(lr, (int, float)) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if optimizer not in ("adam", "adamw", "sgd"):
        raise ValueError(f"optimizer must be 'adam', 'adamw' or 'sgd', got {optimizer!r}")
    for callback in callbacks:
        if not callable(callback):
            raise TypeError(f"callbacks must be callables taking a StepState, got {callback!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameter (every parameter has requires_grad=False)")
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    elif optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    run = forward or (lambda m, tokens: m(tokens))
    generator = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    records: list[Any] = []
    from tqdm.auto import tqdm

    model.train()
    try:
        for step in tqdm(range(1, steps + 1), disable=not progress, desc=f"fit {task.name}", leave=False):
            batch = task.sample(batch_size, generator, "train")
            loss = masked_cross_entropy(run(model, batch.tokens), batch.targets, batch.mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if callbacks:
                model.eval()
                state = StepState(step, losses[-1], model, task)
                with torch.no_grad():
                    for callback in callbacks:
                        record = callback(state)
                        if record is not None:
                            records.append(record)
                model.train()
    finally:
        model.eval()
    return FitResult(model, tuple(losses), tuple(records))
