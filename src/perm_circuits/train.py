"""Training: the one :func:`train` of every task and model (which loop runs when: its docstring).

The study's epoch loop: Adam on the masked next-token loss, evaluated on the fixed test set every
epoch.  The recipe's defaults are: 50 epochs x 100,000 samples, batch 128, Adam (lr 1e-3),
cross-entropy on the y positions only.  Batches are drawn vectorized from a seeded
``torch.Generator``; the step runs :func:`~perm_circuits.models.fast_forward` (plain PyTorch on the
bridge's own parameters) with fused Adam.  Same seeds -> bit-identical weights and history on CPU,
for the same torch build and ATen CPU capability (``torch.backends.cpu.get_cpu_capability()``):
the AVX2 and AVX512 kernels of ``scaled_dot_product_attention``, ``softmax`` and ``log_softmax``
round differently in the last bit, and training amplifies that.  The shipped pretrained models were
trained with AVX2 kernels; on an AVX512 host, ``ATEN_CPU_CAPABILITY=avx2`` (set before starting
Python) reproduces their first epoch bit for bit (tests/test_reproduce_shipped.py).
With ``ModelConfig.dropout > 0`` the dropout masks come from a second, dedicated generator seeded
with :func:`dropout_seed` of ``TrainConfig.seed`` (never the global RNG), so dropout runs are just
as reproducible; evaluation runs in eval mode, without dropout.  A checkpoint stores the model, the
optimizer state and both generators' states, so resuming gives the same result as an uninterrupted
run.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from perm_circuits._util import dataclass_from_dict
from perm_circuits.checks import MAX_SAMPLES, MAX_SEQUENCES, check_int, check_number, check_seed, check_size
from perm_circuits.tasks.evaluation import Evaluation
from perm_circuits.tasks.permutation import evaluate_logits, value_probs
from perm_circuits.models import (
    CheckpointError,
    ModelConfig,
    build_model,
    check_permutation_fit,
    fast_forward,
    load_checkpoint,
    read_checkpoint_files,
    resolve_config,
    save_model,
)
from perm_circuits.tasks.permutation_posterior import bayes_posterior
from perm_circuits.devices import resolve_device, to_device
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import TaskConfig, make_batch, make_test_set, probe_sequence
from perm_circuits.tasks.runner import fit_task, task_model
from perm_circuits.tasks.base import FitConfig, FitResult, Task, task_entry
from perm_circuits.tasks.permutation import PermutationTask

__all__ = ["EpochState", "FitConfig", "FitResult", "StepInfo", "TrainConfig", "TrainResult", "TrainingHistory", "dropout_seed",
           "masked_loss", "train"]


def dropout_seed(seed: int) -> int:
    """The dropout-mask generator's seed for ``TrainConfig.seed = seed``: the first 8 bytes (little-endian,
    top bit cleared) of SHA-256 of ``"perm_circuits.dropout:{seed}"``, a stream unrelated to the data
    stream ``torch.Generator().manual_seed(seed)`` of any seed."""
    digest = hashlib.sha256(f"perm_circuits.dropout:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@dataclass(frozen=True)
class TrainConfig:
    """Optimization settings (defaults: the study's recipe).

    ``seed`` seeds the data stream and, through :func:`dropout_seed`, the dropout masks (the init
    seed is ``ModelConfig.seed``); ``test_size``/``test_seed`` the fixed evaluation set.
    ``checkpoint_every`` saves a resumable checkpoint every N epochs into ``checkpoint_dir``.
    ``early_stop_patience``: stop once the last-step subgroup accuracies are >= ``early_stop_accuracy``
    and the test loss improved by less than ``early_stop_min_delta`` over that many epochs.
    """

    epochs: int = 50
    samples_per_epoch: int = 100_000
    batch_size: int = 128
    lr: float = 1e-3
    seed: int = 0
    test_size: int = 5000
    test_seed: int = 1234
    checkpoint_every: int | None = None
    checkpoint_dir: str | None = None
    early_stop_patience: int | None = None
    early_stop_accuracy: float = 0.999
    early_stop_min_delta: float = 1e-3

    def __post_init__(self) -> None:
        for name in ("epochs", "samples_per_epoch", "batch_size", "test_size"):
            value = getattr(self, name)
            if check_int(name, value) <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        check_size("samples_per_epoch", self.samples_per_epoch, MAX_SAMPLES)  # before any batch is drawn
        for name in ("batch_size", "test_size"):
            check_size(name, getattr(self, name), MAX_SEQUENCES)
        check_size("epochs", self.epochs, MAX_SAMPLES)
        if not 0 < check_number("lr", self.lr, finite=False) < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr!r}")
        for name in ("checkpoint_every", "early_stop_patience"):
            value = getattr(self, name)
            if value is not None and check_int(name, value) <= 0:
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if self.checkpoint_every is not None and not self.checkpoint_dir:
            raise ValueError("checkpoint_every needs checkpoint_dir")
        check_seed(self.seed)
        check_seed(self.test_seed, "test_seed")
        for name in ("early_stop_accuracy", "early_stop_min_delta"):  # above 1: never stops; NaN: no meaning
            if math.isnan(check_number(name, getattr(self, name), finite=False)):
                raise ValueError(f"{name} must be a number, got nan")

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.samples_per_epoch / self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, complete: bool = False) -> TrainConfig:
        """From :meth:`to_dict` output; unknown fields (and missing ones if ``complete``) are errors."""
        return dataclass_from_dict(cls, data, complete=complete)


@dataclass(frozen=True)
class TrainingHistory:
    """One row per evaluated epoch (``epoch``, ``train_loss``, :meth:`Evaluation.summary` fields)."""

    rows: tuple[dict[str, Any], ...] = ()

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame(list(self.rows)).set_index("epoch") if self.rows else pd.DataFrame()

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class EpochState:
    """What a callback sees after each epoch."""

    epoch: int
    model: Any
    evaluation: Evaluation
    history: TrainingHistory


@dataclass(frozen=True)
class StepInfo:
    """What a step callback sees after each optimiser step: ``step`` (global, 1-based, across epochs
    and a resume), ``loss`` (detached 0-d tensor) and ``model``, still in train mode: a callback that
    evaluates must switch to eval mode and back, use ``torch.no_grad()`` and leave the parameters
    and every RNG it did not create untouched."""

    step: int
    epoch: int
    model: Any
    loss: Tensor


@dataclass(frozen=True)
class TrainResult:
    model: Any
    history: TrainingHistory
    evaluation: Evaluation
    model_config: ModelConfig
    task_config: TaskConfig
    train_config: TrainConfig
    epochs_run: int
    stopped_early: bool
    seconds: float = field(compare=False)


def masked_loss(
    logits: Float[Tensor, "batch seq vocab"], targets: Int[Tensor, "batch seq"], mask: Float[Tensor, "batch seq"]
) -> Float[Tensor, ""]:
    """Cross-entropy averaged over masked-in (y-prediction) positions, as in the study."""
    per_token = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (per_token * mask.flatten()).sum() / mask.sum()


def _optimizer(model, lr: float) -> torch.optim.Adam:
    try:
        return torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    except (RuntimeError, TypeError):  # fused unsupported on this device/build
        return torch.optim.Adam(model.parameters(), lr=lr)


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, Tensor]:
    out = {}
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            out[f"optim.{index}.{key}"] = value if isinstance(value, Tensor) else torch.tensor(float(value))
    return out


def _restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor]) -> None:
    state: dict[int, dict[str, Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("extra.optim."):
            _, _, index, name = key.split(".", 3)
            state.setdefault(int(index), {})[name] = value
    document = optimizer.state_dict()
    document["state"] = state
    optimizer.load_state_dict(document)


class EpochEvaluator:
    """The per-epoch evaluation of both trainers: the fixed test set, its posteriors computed once and
    the study's probe.  The logits are computed on ``device`` and come back to the CPU for the
    metrics: the one transfer per epoch besides the loss."""

    def __init__(self, task_config: TaskConfig, train_config: TrainConfig, name: str, device: torch.device):
        self.config, self.name = task_config, name
        self.test_set: TaskBatch = make_test_set(task_config, n=train_config.test_size, seed=train_config.test_seed)
        self.posteriors = (bayes_posterior(self.test_set.tokens, task_config, "uniform"),
                           bayes_posterior(self.test_set.tokens, task_config, "train"))
        self.tokens = self.test_set.tokens.to(device)
        self.probe = probe_sequence().to(device) if task_config.V == 5 else None

    def __call__(self, model, weights: dict[str, Tensor]) -> Evaluation:
        with torch.no_grad():
            logits = fast_forward(model, self.tokens, weights).cpu()
            probe = None if self.probe is None else (
                value_probs(fast_forward(model, self.probe, weights).cpu(), self.config.V)[0, -1].tolist())
        return evaluate_logits(logits, self.test_set, self.config, self.posteriors, self.name, probe)


def study_task(task: TaskConfig | PermutationTask | None, V: int) -> TaskConfig:
    """``task`` as the study's :class:`TaskConfig` for a model over ``V`` values: a ``PermutationTask``
    unwrapped (the same run bit for bit), ``None`` the plain task; TypeError/ValueError otherwise."""
    if isinstance(task, PermutationTask):  # the Task interface's wrapper of the study's task
        task = task.config
    task = TaskConfig(V=V) if task is None else task
    if not isinstance(task, TaskConfig):
        raise TypeError(f"task must be a TaskConfig or PermutationTask, got {type(task).__name__}")
    if task.V != V:
        raise ValueError(f"task V={task.V} does not match model V={V}")
    return task


def _study_model_config(config: ModelConfig | str) -> ModelConfig:
    """The study's loop's model config, checked against the permutation task it trains on."""
    return check_permutation_fit(resolve_config(config))


def converged(history: TrainingHistory, config: TrainConfig, has_recall: bool) -> bool:
    patience = config.early_stop_patience
    if patience is None or len(history) <= patience:
        return False
    last = history.rows[-1]
    if last["elimination_accuracy"] < config.early_stop_accuracy:
        return False
    if has_recall and not last["recall_accuracy"] >= config.early_stop_accuracy:
        return False
    return history.rows[-1 - patience]["test_loss"] - last["test_loss"] < config.early_stop_min_delta


def train(
    model: ModelConfig | str | torch.nn.Module | Mapping[str, Any] | None = "d32h2",
    task: TaskConfig | Task | None = None,
    recipe: TrainConfig | FitConfig | None = None,
    *,
    callbacks: Sequence[Callable[[Any], Any]] = (),
    step_callbacks: Sequence[Callable[[Any], Any]] = (),
    resume_from: str | Path | None = None,
    forward: Callable[[torch.nn.Module, Tensor], Tensor] | None = None,
    progress: bool = True,
    device: str | torch.device | None = None,
) -> TrainResult | FitResult:
    """Train a model on a task: the one training function of every task and model.

    The recipe picks the loop:

    * **The study's epoch loop** (a :class:`TrainConfig`, or no recipe with a permutation task):
      ``train("d16h1", TaskConfig(repeat_ratio=0.3), TrainConfig(epochs=5))`` builds the preset's
      bridge, trains and evaluates it every epoch (:class:`TrainingHistory`), checkpoints, stops
      early, resumes, and returns a :class:`TrainResult` (bit-identical per seed: module docstring).
    * **The step loop** (a :class:`~perm_circuits.tasks.FitConfig`, or any other task):
      ``train(model, task, FitConfig(steps=500, lr=1e-2))`` trains on ``task.sample`` batches with
      masked next-token loss (:func:`~perm_circuits.tasks.fit`) and returns a
      :class:`~perm_circuits.tasks.FitResult`; evaluate it with
      ``evaluate(result.model, task=task, forward=result.forward)``.

    Args:
        model: the study's loop: a :class:`ModelConfig` or preset name.  The step loop also takes a
            built ``tokens -> logits`` module (trained in place), ``None`` (the task's own model from
            its registry entry, else a default ``boot_native`` transformer sized from
            ``task.d_vocab`` and ``task.n_ctx``), or a dict of that model's fields (e.g.
            ``{"d_model": 64, "n_layers": 2}``).  A preset or ``ModelConfig`` that does not fit the
            task names the architecture (``d_model``, ``n_heads``, ``n_layers``) of that default
            transformer.  Built models are seeded with the recipe's ``seed``, a ``ModelConfig``
            with its own.
        task: a :class:`TaskConfig` (default the plain task, ``repeat_ratio=0``) or any registered
            :class:`~perm_circuits.tasks.Task`; a ``PermutationTask`` in the study's loop is
            unwrapped to its ``TaskConfig`` (the same run bit for bit).
        recipe: a :class:`TrainConfig` (default the study's) or a
            :class:`~perm_circuits.tasks.FitConfig` (default ``FitConfig()``).
        callbacks: the study's loop: called with an :class:`EpochState` after every epoch, ``True``
            stops training.  The step loop: called with a :class:`~perm_circuits.tasks.StepState`
            after every step; returns other than ``None`` are kept in ``FitResult.records``.
        step_callbacks: the study's loop: called with a :class:`StepInfo` after every optimiser
            step (e.g. :class:`perm_circuits.dynamics.DynamicsRecorder`).  The step loop: as
            ``callbacks``.
        resume_from: the study's loop: a checkpoint folder from ``checkpoint_every``, which fixes
            model, task and recipe; a ``recipe`` passed with it may change only
            :data:`RESUMABLE_FIELDS`.
        forward: the step loop: ``forward(model, tokens) -> logits`` (default: the task's
            registered forward for its own model, ``fast_forward`` for a ``build_model`` bridge,
            else ``model(tokens)``).
        device: where the model trains (``"cpu"``, ``"cuda"``, a ``torch.device``); default the CPU,
            or where a built model already is.  Batches are drawn on the CPU
            and moved once per step, so the CPU run is bit for bit the one without ``device``; on
            another device the float arithmetic and dropout's mask stream differ.
    """
    study_task = task is None or isinstance(task, (TaskConfig, PermutationTask))
    if resume_from is not None or isinstance(recipe, TrainConfig) or (
        recipe is None and study_task and isinstance(model, (str, ModelConfig))
    ):
        if forward is not None:
            raise ValueError("forward= belongs to the step loop (a FitConfig recipe); the study's loop runs fast_forward")
        if isinstance(recipe, FitConfig):
            raise TypeError("resume_from resumes the study's epoch loop: pass a TrainConfig recipe (or none)")
        if not study_task:
            raise TypeError(f"a TrainConfig (epochs) is the study's recipe for the permutation task; train task "
                            f"{getattr(task, 'name', task)!r} with a FitConfig (steps)")
        if resume_from is None and not isinstance(model, (str, ModelConfig)):
            raise TypeError(f"the study's loop builds its model from a ModelConfig or preset name, got "
                            f"{type(model).__name__}; train a built model with a FitConfig recipe")
        return _train_study(model, task, recipe, callbacks=callbacks, step_callbacks=step_callbacks,
                            resume_from=resume_from, progress=progress, device=resolve_device(device))
    return _train_steps(model, task, recipe, callbacks=[*callbacks, *step_callbacks], forward=forward,
                        progress=progress, device=None if device is None else resolve_device(device))


def _train_steps(model, task, recipe, *, callbacks, forward, progress, device=None) -> FitResult:
    """The step loop of :func:`train` (its docstring): resolve the task, the recipe and the model."""
    if task is None:
        raise TypeError("the step loop needs a task: train(model, task, FitConfig(...))")
    if isinstance(task, TaskConfig):
        task = PermutationTask(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be a TaskConfig or implement perm_circuits.tasks.Task, got {type(task).__name__}")
    recipe = FitConfig() if recipe is None else recipe
    if not isinstance(recipe, FitConfig):
        raise TypeError(f"recipe must be a TrainConfig or a FitConfig, got {type(recipe).__name__}")
    own_forward = None
    if model is None or isinstance(model, Mapping):
        model, own_forward = task_model(task, seed=recipe.seed, **dict(model or {}))
    elif isinstance(model, (str, ModelConfig)):
        config = resolve_config(model)
        if config.V + 1 == task.d_vocab and config.resolved_n_ctx >= task.n_ctx:
            model = build_model(config)
        elif task_entry(task.name).builder() is None:
            model, own_forward = task_model(task, seed=config.seed, d_model=config.d_model, n_heads=config.n_heads,
                                            n_layers=config.n_layers)
        else:
            raise TypeError(f"task {task.name!r} builds its own model: pass model=None or a dict of its fields "
                            f"{list(task_entry(task.name).model_keys)}, not {model!r}")
    forward = own_forward if forward is None else forward
    to_device(model, device)
    return fit_task(model, task, recipe, forward=forward, callbacks=callbacks, progress=progress)


def _train_study(
    model_config: ModelConfig | str | None,
    task_config: TaskConfig | PermutationTask | None,
    train_config: TrainConfig | None,
    *,
    callbacks: Sequence[Callable[[EpochState], Any]],
    step_callbacks: Sequence[Callable[[StepInfo], Any]],
    resume_from: str | Path | None,
    progress: bool,
    device: torch.device = torch.device("cpu"),
) -> TrainResult:
    """The study's epoch loop (:func:`train`), from scratch or from a checkpoint."""
    start = time.perf_counter()
    expected = (("callbacks", callbacks, "an EpochState"), ("step_callbacks", step_callbacks, "a StepInfo"))
    for name, given, seen in expected:
        for callback in given:
            if not callable(callback):
                raise TypeError(f"{name} must be callables taking {seen}, got {callback!r}")
    generator = torch.Generator()
    dropout_generator = torch.Generator()
    history = TrainingHistory()
    first_epoch = 1
    if resume_from is not None:
        asked_model, asked_task = model_config, task_config
        model, model_config, task_config, saved, tensors, meta = load_resumable(resume_from)
        if isinstance(asked_task, PermutationTask):
            asked_task = asked_task.config
        for name, asked, stored in (("task", asked_task, task_config), ("model", asked_model, model_config)):
            if isinstance(asked, (TaskConfig, ModelConfig)) and asked != stored:  # the checkpoint fixes both
                raise ValueError(f"resume_from {str(resume_from)!r} trains {name} {stored}, not the {name} passed ({asked}); "
                                 f"pass none to resume")
        train_config = saved if train_config is None else _resume_config(saved, train_config)
        generator.set_state(tensors["extra.generator"])
        if "extra.dropout_generator" in tensors:
            dropout_generator.set_state(tensors["extra.dropout_generator"])
        else:  # written before dropout existed (so dropout == 0): the masks' stream was never used
            dropout_generator.manual_seed(dropout_seed(train_config.seed))
        history = TrainingHistory(tuple(meta["history"]))
        first_epoch = int(meta["epoch"]) + 1
    else:
        model_config = _study_model_config(model_config)
        task_config = study_task(task_config, model_config.V)
        train_config = train_config or TrainConfig()
        model = build_model(model_config)
        generator.manual_seed(train_config.seed)
        dropout_generator.manual_seed(dropout_seed(train_config.seed))

    if device.type != "cpu":
        model.to(device)
        if model_config.dropout > 0:  # masks must come from a generator on the device
            dropout_generator = torch.Generator(device=device).manual_seed(dropout_seed(train_config.seed))
    optimizer = _optimizer(model, train_config.lr)
    if resume_from is not None:
        _restore_optimizer(optimizer, tensors)
    evaluator = EpochEvaluator(task_config, train_config, model_config.name, device)
    weights = model.state_dict(keep_vars=True)
    evaluation = evaluator(model, weights)
    stopped_early = False
    epoch = first_epoch - 1
    bar = tqdm(range(first_epoch, train_config.epochs + 1), disable=not progress, desc=f"train {model_config.name}")
    global_step = (first_epoch - 1) * train_config.steps_per_epoch
    for epoch in bar:
        model.train()
        running = torch.zeros((), device=device)
        remaining = train_config.samples_per_epoch
        for _ in range(train_config.steps_per_epoch):
            batch = make_batch(task_config, min(train_config.batch_size, remaining), generator=generator)
            remaining -= len(batch)
            # drawn on the CPU (the same batches anywhere), moved once (no-ops on the CPU)
            inputs, targets, mask = batch.tokens.to(device), batch.targets.to(device), batch.mask.to(device)
            logits = fast_forward(model, inputs, weights, generator=dropout_generator)
            loss = masked_loss(logits, targets, mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running += loss.detach()
            global_step += 1
            for callback in step_callbacks:
                callback(StepInfo(global_step, epoch, model, loss.detach()))
        model.eval()
        evaluation = evaluator(model, weights)
        row = {"epoch": epoch, "train_loss": float(running) / train_config.steps_per_epoch, **evaluation.summary()}
        history = TrainingHistory(history.rows + (row,))
        bar.set_postfix(loss=f"{row['test_loss']:.4f}", elim=f"{row['elimination_accuracy']:.3f}", recall=f"{row['recall_accuracy']:.3f}")
        if train_config.checkpoint_every and epoch % train_config.checkpoint_every == 0:
            save_training_checkpoint(Path(train_config.checkpoint_dir) / f"epoch_{epoch:04d}", model, optimizer,
                generator, task_config, train_config, history, epoch, dropout_generator=dropout_generator)
        stop = [callback(EpochState(epoch, model, evaluation, history)) for callback in callbacks]
        if any(s is True for s in stop) or converged(history, train_config, task_config.repeat_ratio > 0):
            stopped_early = epoch < train_config.epochs
            break
    bar.close()
    model.eval()
    return TrainResult(model=model, history=history, evaluation=evaluation, model_config=model_config,
        task_config=task_config, train_config=train_config, epochs_run=epoch, stopped_early=stopped_early,
        seconds=time.perf_counter() - start)


RESUMABLE_FIELDS = frozenset(
    {"epochs", "checkpoint_every", "checkpoint_dir", "early_stop_patience", "early_stop_accuracy", "early_stop_min_delta"}
)
"""The :class:`TrainConfig` fields a resumed run may change; the rest must match the checkpoint."""


def _resume_config(saved: TrainConfig, requested: TrainConfig) -> TrainConfig:
    changed = sorted(
        name for name in saved.to_dict() if name not in RESUMABLE_FIELDS and getattr(saved, name) != getattr(requested, name)
    )
    if changed:
        raise ValueError(
            f"cannot change {changed} when resuming (checkpoint has "
            f"{ {name: getattr(saved, name) for name in changed} }); only {sorted(RESUMABLE_FIELDS)} may change"
        )
    return requested


def load_resumable(path) -> tuple:
    """Load and validate everything a resumed run needs, before any training starts."""
    checkpoint = load_checkpoint(path)
    meta = checkpoint.metadata
    missing = [key for key in ("train_config", "epoch", "history") if key not in meta]
    if missing:
        raise CheckpointError(f"{path} is not a resumable training checkpoint (metadata lacks {missing}): resume from "
                              "a folder that checkpoint_every writes (perm-circuits train --checkpoint-every N: "
                              "OUT/checkpoints/epoch_NNNN), not a final checkpoint")
    try:
        saved = TrainConfig.from_dict(meta["train_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"invalid train_config in {path}: {error}") from None
    epoch = meta["epoch"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= saved.epochs:  # 0: before training
        raise CheckpointError(f"{path} has metadata epoch {epoch!r}: expected an int in [0, {saved.epochs}] (its train_config's epochs)")
    if not isinstance(meta["history"], list) or not all(isinstance(row, dict) for row in meta["history"]):
        raise CheckpointError(f"{path} has an invalid metadata history: expected a list of per-epoch dicts")
    _, tensors = read_checkpoint_files(path)
    state = tensors.get("extra.generator")
    reference = torch.Generator().get_state()
    if state is None or state.dtype != torch.uint8 or state.shape != reference.shape:
        raise CheckpointError(f"{path} has no valid data-generator state (extra.generator)")
    state = tensors.get("extra.dropout_generator")
    if state is None and checkpoint.model_config.dropout > 0:
        raise CheckpointError(f"{path} has dropout={checkpoint.model_config.dropout} but no extra.dropout_generator state")
    if state is not None and (state.dtype != torch.uint8 or state.shape != reference.shape):
        raise CheckpointError(f"{path} has an invalid dropout-generator state (extra.dropout_generator)")
    for name in ("extra.generator", "extra.dropout_generator"):
        if name in tensors:
            try:
                torch.Generator().set_state(tensors[name])
            except RuntimeError as error:
                raise CheckpointError(f"{path} has an invalid generator state {name}: {error}") from None
    parameters = list(checkpoint.model.parameters())
    for index, param in enumerate(parameters):
        for name, shape in (("step", torch.Size(())), ("exp_avg", param.shape), ("exp_avg_sq", param.shape)):
            value = tensors.get(f"extra.optim.{index}.{name}")
            if value is None or value.shape != shape or not value.is_floating_point():
                raise CheckpointError(
                    f"{path} lacks a valid optimizer state extra.optim.{index}.{name} "
                    f"(expected a float tensor of shape {tuple(shape)})"
                )
            if not torch.isfinite(value).all() or (name != "exp_avg" and (value < 0).any()):
                raise CheckpointError(f"{path} has a corrupted optimizer state extra.optim.{index}.{name} (NaN, "
                                      f"infinite{'' if name == 'exp_avg' else ' or negative'} values): resuming would "
                                      "train a broken model")
    unknown = sorted(key for key in tensors if key.startswith("extra.optim.")
                     and not (key.count(".") == 3 and key.split(".")[2].isdigit()
                              and int(key.split(".")[2]) < len(parameters)
                              and key.split(".")[3] in ("step", "exp_avg", "exp_avg_sq")))
    if unknown:
        raise CheckpointError(f"{path} has optimizer state {unknown[:3]} that belongs to no parameter of its model")
    return checkpoint.model, checkpoint.model_config, checkpoint.task_config, saved, tensors, meta


def save_training_checkpoint(
    path: Path, model, optimizer, generator: torch.Generator, task_config: TaskConfig,
    train_config: TrainConfig, history: TrainingHistory, epoch: int,
    dropout_generator: torch.Generator | None = None,
) -> Path:
    """A resumable checkpoint: weights, optimizer, data- and dropout-generator state, history so far."""
    extra = {"generator": generator.get_state(), **_optimizer_tensors(optimizer)}
    if dropout_generator is not None:
        extra["dropout_generator"] = dropout_generator.get_state()
    metadata = {"epoch": epoch, "train_config": train_config.to_dict(), "history": list(history.rows)}
    model.task_config = task_config
    return save_model(model, path, task=task_config, metadata=metadata, extra_tensors=extra)
