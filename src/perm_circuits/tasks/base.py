"""The task interface: what ``train``, ``evaluate``, the sweep and the report need from a task.

A task (usually a frozen dataclass of its settings, :class:`DataclassTask`) makes batches of
``(tokens, targets, mask)`` from a ``torch.Generator`` (same generator state, same batch bit for
bit), computes its named metrics from logits, gives its exact reference where one exists, and
round-trips through JSON.  A new task is one file: a :class:`Task` class plus
``register_task(name, cls)``, whose :class:`TaskEntry` also carries its model builder, sweep keys
and reproduction.  :func:`fit` is the generic step loop under :func:`perm_circuits.train`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.checks import MAX_SEQUENCES, check_int, check_number, check_seed, check_size
from perm_circuits.user_modules import file_module_name, import_module_or_file, load_object  # noqa: F401 (re-exported)

__all__ = ["DEFAULT_MODEL_KEYS", "SPLITS", "TASKS", "DataclassTask", "FitConfig", "FitResult", "StepState", "Task",
           "TaskBatch", "TaskEntry", "check_sample", "check_target_classes", "check_task_batch", "file_module_name", "fit",
           "import_module_or_file", "load_object",
           "log_spaced_steps", "masked_cross_entropy", "model_task", "own_analysis", "register_task", "task_entries", "task_entry",
           "task_from_dict"]


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

    def top_target(self) -> int:
        """The largest target under the loss mask (-1 when no position is scored)."""
        scored = self.targets[self.mask > 0]
        return int(scored.max()) if scored.numel() else -1

    def subset(self, index: Tensor) -> TaskBatch:
        """Rows selected by a boolean mask or an index tensor."""
        return TaskBatch(self.tokens[index], self.targets[index], self.mask[index],
                         {k: v[index] for k, v in self.extras.items()})

    def to(self, device: torch.device | str) -> TaskBatch:
        """The batch on ``device`` (itself when every tensor is already there)."""
        tensors = (self.tokens, self.targets, self.mask, *self.extras.values())
        moved = [t.to(device) for t in tensors]
        if all(a is b for a, b in zip(moved, tensors)):
            return self
        return TaskBatch(*moved[:3], dict(zip(self.extras, moved[3:])))


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
        """The exact or analytic answer on ``batch`` (``None``: none): a next-token distribution
        ``Float[batch, seq, vocab]`` (e.g. the Bayesian posterior) or next tokens ``Int[batch, seq]``,
        compared where ``batch.mask`` > 0 (:func:`perm_circuits.evaluate`)."""
        ...

    def to_dict(self) -> dict[str, Any]: ...


SPLITS = ("train", "test")


def check_sample(n: object, generator: object, split: object) -> None:
    """The checks of a task's ``sample(n, generator, split)``: ``n >= 1``, a ``torch.Generator``,
    ``split`` one of :data:`SPLITS`."""
    check_size("n (sequences drawn at once)", check_int("n", n, low=1), MAX_SEQUENCES)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def check_task_batch(batch: object, task: Any, n: int | None = None, made_by: str = "sample") -> TaskBatch:
    """``batch``, the result of ``task.sample(n, ...)`` (or ``task.test_set(n, ...)``: ``made_by``), if
    it is what training and evaluation assume (ValueError/TypeError naming the task otherwise): a
    :class:`TaskBatch` (whose own checks give one shape to tokens, targets and mask and integer ids)
    of ``n`` rows of ``[1, task.n_ctx]`` tokens, token ids and the targets scored (mask > 0) in
    ``[0, task.d_vocab)``, and a finite, non-negative mask.  Checked once per batch drawn, on the
    CPU tensors the task made: a few reductions, negligible beside a training step (an
    out-of-vocabulary target would otherwise fail mid-training with an IndexError, and a NaN
    mask or a short batch would train silently)."""
    where = f"task {getattr(task, 'name', type(task).__name__)!r}'s {made_by}({'' if n is None else n}, ...)"
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"{where} returned a {type(batch).__name__}, not a TaskBatch")
    tokens, targets, mask = batch.tokens, batch.targets, batch.mask
    n_ctx, vocab = task.n_ctx, task.d_vocab
    if tokens.ndim != 2 or (n is not None and tokens.shape[0] != n) or not 1 <= tokens.shape[1] <= n_ctx:
        raise ValueError(f"{where} returned tokens of shape {tuple(tokens.shape)}: expected [{'n' if n is None else n}, "
                         f"1..{n_ctx}] (task.n_ctx {n_ctx})")
    low, high = (int(v) for v in torch.aminmax(tokens))
    if low < 0 or high >= vocab:
        raise ValueError(f"{where} returned token ids {low}..{high}, outside the task's vocabulary [0, {vocab}) "
                         "(task.d_vocab)")
    weight_low, weight_high = (float(v) for v in torch.aminmax(mask))  # NaN propagates into both
    if not (weight_low >= 0 and math.isfinite(weight_high)):
        raise ValueError(f"{where} returned a mask with NaN, infinite or negative loss weights "
                         f"(from {weight_low} to {weight_high})")
    low, high = (int(v) for v in torch.aminmax(torch.where(mask > 0, targets, 0)))  # 0: a valid id, unscored
    if low < 0 or high >= vocab:
        raise ValueError(f"{where} returned targets {low}..{high} under the loss mask, outside the task's vocabulary "
                         f"[0, {vocab}) (task.d_vocab)")
    return batch


class DataclassTask:
    """The parts of :class:`Task` shared by a task that is a dataclass of its settings: the test set
    is ``sample(n, torch.Generator().manual_seed(seed), "test")``, and ``to_dict`` / ``from_dict``
    round-trip its init fields."""

    name: ClassVar[str]

    def test_set(self, n: int = 2000, seed: int = 1234) -> TaskBatch:
        return self.sample(n, torch.Generator().manual_seed(check_seed(seed)), "test")

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.name, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        known = sorted(f.name for f in dataclasses.fields(cls) if f.init)
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {unknown}; expected a subset of {known}")
        return cls(**data)


TASKS: dict[str, type] = {}
"""Registered task classes by name (``to_dict()["task"]`` names the class)."""

Builder = Callable[..., Any]
"""``builder(task, *, seed, **fields)`` -> a ``tokens -> logits`` module: a task's own model."""


@dataclass(frozen=True)
class TaskEntry:
    """What the registry knows about a task besides its class: everything the rest of the library
    (training, sweeps, reproductions) needs, so that no other module holds per-task code.

    Attributes:
        name, cls: the registry name and the task class.
        model: the task's own model builder ``builder(task, *, seed, **fields)``, or a
            ``"module:function"`` string naming one (imported on first use, so a task file never
            imports the model module that imports it), or ``None``: the task trains a default
            ``boot_native`` transformer sized from ``task.d_vocab`` and ``task.n_ctx``
            (:func:`perm_circuits.tasks.runner.task_model`).
        model_keys: the builder's keyword fields a sweep spec may set (with ``model=None``: the
            default transformer's :data:`DEFAULT_MODEL_KEYS`, ``d_model``, ``n_heads``, ``n_layers``).
        forward: the ``forward(model, tokens) -> logits`` that trains and evaluates the builder's
            models (a callable, a ``"module:function"`` string, or ``None``: ``model(tokens)``).
        fit_defaults: the task's own defaults for the fit recipe (:class:`FitConfig` fields) in a sweep.
        reproduction: ``(name, "module", title)`` of the seed paper's headline experiment, whose
            module defines ``run(quick, progress) -> Reproduction`` (``perm-circuits reproduce NAME``).
        recognise: ``recognise(model) -> task or None`` (or a ``"module:function"`` string): the task
            a model of the task's own kind was built for (e.g. a study bridge's permutation task),
            which :func:`model_task` returns, so that a general tool gets its defaults (metric,
            tokens, positions) from the task and never asks what kind of model it has.
    """

    name: str
    cls: type
    model: Builder | str | None = None
    model_keys: tuple[str, ...] = ()
    forward: Callable[..., Any] | str | None = None
    fit_defaults: Mapping[str, Any] = field(default_factory=dict)
    reproduction: tuple[str, str, str] | None = None
    recognise: Callable[[Any], Any] | str | None = None

    def builder(self) -> Builder | None:
        """The model builder, imported if named by a string."""
        return load_object(self.model) if isinstance(self.model, str) else self.model

    def forward_fn(self) -> Callable[..., Any] | None:
        """The forward, imported if named by a string."""
        return load_object(self.forward) if isinstance(self.forward, str) else self.forward


_ENTRIES: dict[str, TaskEntry] = {}

DEFAULT_MODEL_KEYS = ("d_model", "n_heads", "n_layers")
"""The fields of the default transformer of a task without a model builder of its own."""


def register_task(
    name: str,
    cls: type,
    *,
    model: Builder | str | None = None,
    model_keys: Sequence[str] | None = None,
    forward: Callable[..., Any] | str | None = None,
    fit_defaults: Mapping[str, Any] | None = None,
    reproduction: tuple[str, str, str] | None = None,
    recognise: Callable[[Any], Any] | str | None = None,
) -> type:
    """Register ``cls`` under ``name``; returns ``cls``.  With only these the task gets
    :func:`task_from_dict`, training, evaluation and sweeps on a default transformer sized from the
    task; the keywords describe its own model, sweep defaults and reproduction (:class:`TaskEntry`)."""
    if not isinstance(name, str):
        raise TypeError(f"task name must be a non-empty string, got {type(name).__name__} {name!r}")
    if not name:
        raise ValueError(f"task name must be a non-empty string, got {name!r}")
    if not isinstance(cls, type) or not callable(getattr(cls, "from_dict", None)):
        raise TypeError(f"a task class needs a from_dict classmethod (for task_from_dict), got {cls!r}")
    if name in TASKS and TASKS[name] is not cls:
        raise ValueError(f"task name {name!r} is already registered to {TASKS[name].__name__}")
    for label, value in (("model", model), ("forward", forward), ("recognise", recognise)):
        if value is not None and not (callable(value) or isinstance(value, str)):
            raise TypeError(f"{label} must be a callable, a 'module:function' string or None, got {value!r}")
    if model_keys is not None and not isinstance(model_keys, (list, tuple)):  # a str would become its letters
        raise TypeError(f"model_keys must be a list or tuple of field names or None, got {type(model_keys).__name__} "
                        f"{model_keys!r}")
    keys = DEFAULT_MODEL_KEYS if model is None and model_keys is None else tuple(model_keys or ())
    if not all(isinstance(key, str) for key in keys):
        raise TypeError(f"model_keys must be strings, got {keys!r}")
    if fit_defaults is not None and not isinstance(fit_defaults, Mapping):
        raise TypeError(f"fit_defaults must be a mapping of FitConfig fields, got {fit_defaults!r}")
    unknown = sorted(set(fit_defaults or {}) - set(FitConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown fit_defaults {unknown}; FitConfig fields: {sorted(FitConfig.__dataclass_fields__)}")
    try:
        FitConfig(**(fit_defaults or {}))  # the recipe's own checks, now rather than at the first sweep
    except (TypeError, ValueError) as error:
        raise type(error)(f"fit_defaults {dict(fit_defaults or {})!r}: {error}") from None
    if reproduction is not None and (len(reproduction) != 3 or not all(isinstance(x, str) for x in reproduction)):
        raise TypeError(f"reproduction must be (name, 'module', title), got {reproduction!r}")
    TASKS[name] = cls
    _ENTRIES[name] = TaskEntry(name, cls, model, keys, forward, dict(fit_defaults or {}), reproduction, recognise)
    return cls


_IMPORTED: list[bool] = []


def model_task(model: object) -> Task | None:
    """The task ``model`` was built for: ``model.task`` where it is a :class:`Task`, else what the first
    registered task's ``recognise(model)`` (:class:`TaskEntry`) returns, else ``None`` (a tool then
    needs ``task=`` or ``metric=``).  The general tools read their defaults from it."""
    own = getattr(model, "task", None)
    if own is not None and isinstance(own, Task):
        return own
    if not _IMPORTED:
        _import_task_modules()
        _IMPORTED.append(True)
    for entry in _ENTRIES.values():
        if entry.recognise is not None:
            recognise = load_object(entry.recognise) if isinstance(entry.recognise, str) else entry.recognise
            task = recognise(model)
            if task is not None:
                return task
    return None


def own_analysis(model: object, name: str) -> Callable[..., Any] | None:
    """The task's own version of the general analysis ``name``, for a model of that task: where the
    model's task (:func:`model_task`) names one in its ``analyses`` mapping (analysis name ->
    ``"module:function"``), that function, else ``None``.  A general tool given no ``task=`` or
    ``metric=`` runs it (the permutation task's: the study's per-subgroup tables); a new task adds
    a richer analysis with one line of its ``analyses``."""
    reference = getattr(model_task(model), "analyses", {}).get(name)
    return None if reference is None else load_object(reference)


def task_entry(name: str) -> TaskEntry:
    """The registry entry of task ``name`` (ValueError listing the registered tasks if unknown)."""
    if not isinstance(name, str):
        raise TypeError(f"a task name must be a string, got {type(name).__name__} {name!r}")
    return _ENTRIES[_registered(name, _ENTRIES)]


def task_entries() -> tuple[TaskEntry, ...]:
    """Every registered task's entry (the built-in tasks included), sorted by name."""
    _import_task_modules()
    return tuple(_ENTRIES[name] for name in sorted(_ENTRIES))


def _registered(name: Any, registry: Mapping[str, Any]) -> str:
    """``name`` once ``registry`` holds it (the built-in tasks imported first if it does not yet), else ValueError."""
    if name not in registry:
        _import_task_modules()
    if name not in registry:
        raise ValueError(f"unknown task {name!r}; registered tasks: {sorted(registry)}")
    return name


def _import_task_modules() -> None:
    """Import every module beside this one (the built-in tasks), so that they are registered."""
    import importlib
    import pkgutil
    from pathlib import Path

    package = __name__.rsplit(".", 1)[0]
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{package}.{module.name}")


def check_target_classes(top: int, n_classes: int, whose: str = "the batch's", classes: str = "logits'") -> None:
    """ValueError when a scored target (the largest, ``top``: :meth:`TaskBatch.top_target`) is no class of
    the ``n_classes`` scored (a metric would otherwise clamp it and score the wrong class)."""
    if top >= n_classes:
        raise ValueError(f"{whose} targets under the loss mask reach {top}, outside the {classes} {n_classes} classes")


def task_from_dict(data: Mapping[str, Any]) -> Task:
    """Rebuild a task from its :meth:`Task.to_dict` (which carries ``"task": name``)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a task dict must be a mapping with a 'task' key, got {type(data).__name__}")
    if "task" not in data:
        raise ValueError(f"a task dict needs a 'task' key naming one of {sorted(TASKS)}, got {data!r}")
    cls = TASKS[_registered(data["task"], TASKS)]
    return cls.from_dict({k: v for k, v in data.items() if k != "task"})


def masked_cross_entropy(
    logits: Float[Tensor, "batch seq vocab"], targets: Int[Tensor, "batch seq"], mask: Float[Tensor, "batch seq"]
) -> Tensor:
    """Mean next-token cross-entropy over the positions where ``mask`` > 0 (weighted by it); the
    targets elsewhere may be any value (:class:`TaskBatch`), so they are never looked up."""
    targets = torch.where(mask > 0, targets, torch.zeros_like(targets))
    losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    weights = mask.flatten().to(losses.dtype)
    total = weights.sum()
    if total <= 0:
        raise ValueError("the loss mask selects no position")
    return (losses * weights).sum() / total


def log_spaced_steps(total: int, n: int = 40, first: int = 1) -> tuple[int, ...]:
    """About ``n`` distinct integer steps from ``first`` to ``total``, spaced evenly in log(step)."""
    for name, value in (("total", total), ("n", n), ("first", first)):
        check_int(name, value)
    if total < first or first < 1 or n < 1:
        raise ValueError(f"need 1 <= first <= total and n >= 1, got first={first}, total={total}, n={n}")
    if n == 1:
        return (total,)
    ratio = math.log(total / first) / (n - 1)
    return tuple(sorted({min(total, round(first * math.exp(i * ratio))) for i in range(n)} | {total}))


@dataclass(frozen=True)
class FitConfig:
    """The recipe of the generic loop (:func:`fit`): ``steps`` optimiser steps on batches of
    ``batch_size``, ``optimizer`` (``"adam"``, ``"adamw"`` or ``"sgd"``) with ``lr``,
    ``momentum`` (SGD) and ``weight_decay``; ``seed`` seeds the data stream (and, in
    :func:`perm_circuits.train`, a model it builds).  The defaults are a sweep's."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    optimizer: str = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            check_int(name, getattr(self, name), low=1)
        check_seed(self.seed)
        check_number("lr", self.lr, low=0, strict=True, finite=False)
        if self.optimizer not in ("adam", "adamw", "sgd"):
            raise ValueError(f"optimizer must be 'adam', 'adamw' or 'sgd', got {self.optimizer!r}")
        for name in ("momentum", "weight_decay"):
            check_number(name, getattr(self, name), low=0, finite=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FitConfig:
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown FitConfig field(s) {unknown}; fields: {sorted(cls.__dataclass_fields__)}")
        return cls(**data)


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
    task: Task | None = None
    """The task trained on (set by :func:`perm_circuits.train`)."""
    forward: Callable[[torch.nn.Module, Tensor], Tensor] | None = None
    """The forward pass training used (``None``: ``model(tokens)``); evaluate with the same one."""


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

    Only parameters with ``requires_grad`` train.  Batches come from one ``torch.Generator`` seeded
    with ``seed`` (bit-identical weights and losses on CPU).  ``forward(model, tokens)`` defaults to
    ``model(tokens)``.  Each callback gets a :class:`StepState` after every step; what it returns,
    if not ``None``, is kept in ``FitResult.records``.  The model is left in eval mode.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module mapping tokens to logits, got {type(model).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must implement perm_circuits.tasks.Task, got {type(task).__name__}")
    if forward is not None and not callable(forward):
        raise TypeError(f"forward must be a callable (model, tokens) -> logits, got {forward!r}")
    FitConfig(steps=steps, batch_size=batch_size, lr=lr, optimizer=optimizer, momentum=momentum,
              weight_decay=weight_decay, seed=seed)  # the recipe's checks
    for callback in callbacks:
        if not callable(callback):
            raise TypeError(f"callbacks must be callables taking a StepState, got {callback!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameter (every parameter has requires_grad=False)")
    sgd = {"momentum": momentum} if optimizer == "sgd" else {}
    optimizers = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    opt = optimizers[optimizer](params, lr=lr, weight_decay=weight_decay, **sgd)
    run = forward or (lambda m, tokens: m(tokens))
    vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)  # a TransformerLens model's vocabulary
    generator = torch.Generator().manual_seed(seed)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))  # the model's device
    losses: list[Tensor] = []  # kept on the model's device: no transfer per step
    records: list[Any] = []
    from tqdm.auto import tqdm

    model.train()
    try:
        for step in tqdm(range(1, steps + 1), disable=not progress, desc=f"fit {task.name}", leave=False):
            batch = task.sample(batch_size, generator, "train")  # drawn on the CPU: the same batches anywhere
            check_task_batch(batch, task, batch_size)
            if step == 1 and isinstance(vocab, int) and vocab > 0 and int(batch.tokens.max()) >= vocab:
                raise ValueError(
                    f"task {task.name!r} draws token ids up to {int(batch.tokens.max())} but the model's vocabulary "
                    f"has {vocab} ids (cfg.d_vocab): a model built for another task?"
                )
            tokens, targets, mask = (t.to(device) for t in (batch.tokens, batch.targets, batch.mask))
            loss = masked_cross_entropy(run(model, tokens), targets, mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            if callbacks:
                model.eval()
                state = StepState(step, float(losses[-1]), model, task)
                with torch.no_grad():
                    for callback in callbacks:
                        record = callback(state)
                        if record is not None:
                            records.append(record)
                model.train()
    finally:
        model.eval()
    return FitResult(model, tuple(torch.stack(losses).tolist()) if losses else (), tuple(records))
