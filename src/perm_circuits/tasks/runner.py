"""The generic halves of :func:`perm_circuits.train` (:func:`fit_task`) and :func:`perm_circuits.evaluate`
(:func:`measure_task`) for any ``tokens -> logits`` model and task, and a task's model (:func:`task_model`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from perm_circuits.checks import MAX_SEQUENCES, check_int, check_size
from perm_circuits.devices import model_device
from perm_circuits.hooks import check_hooks, check_token_ids
from perm_circuits.models import ModelConfig, fast_forward
from perm_circuits.tasks.base import (FitConfig, FitResult, StepState, Task, TaskBatch, check_task_batch, fit,
                                      masked_cross_entropy, task_entry)
from perm_circuits.tasks.evaluation import Evaluation, reference_agreement

__all__ = ["DEFAULT_MODEL", "check_fit", "check_model_fields", "default_model", "fit_task",
           "measure_task", "model_name", "task_logits", "task_model"]

Forward = Callable[[torch.nn.Module, Tensor], Tensor]

DEFAULT_MODEL: dict[str, Any] = {"d_model": 32, "n_heads": 2, "n_layers": 1}
"""The default transformer's size when a task has no model builder and the caller names none."""


def model_name(model: torch.nn.Module) -> str:
    """The model's preset-style name (``"d32h2"``) where it has a ``ModelConfig``, else its class name."""
    config = getattr(model, "perm_config", None)
    name = getattr(config, "name", None)
    return name if isinstance(name, str) else type(model).__name__


def check_fit(model: object, task: object) -> None:
    """TypeError / ValueError before any work when the model and the task do not fit together."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module mapping tokens to logits, got {type(model).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must implement perm_circuits.tasks.Task, got {type(task).__name__}")
    cfg = getattr(model, "cfg", None)
    # task.d_vocab is the input vocabulary; the output may differ (perm_chain's logits are its N states)
    d_vocab = getattr(cfg, "d_vocab", None)
    if isinstance(d_vocab, int) and d_vocab > 0 and d_vocab != task.d_vocab:
        raise ValueError(f"the model's vocabulary ({d_vocab}) does not match task {task.name!r} (d_vocab={task.d_vocab})")
    n_ctx = getattr(cfg, "n_ctx", None)
    if isinstance(n_ctx, int) and n_ctx > 0 and n_ctx < task.n_ctx:
        raise ValueError(f"the model's context ({n_ctx}) is shorter than task {task.name!r}'s sequences ({task.n_ctx})")


def _default_config(task: Task, *, seed: int, d_model: int, n_heads: int, n_layers: int) -> dict[str, Any]:
    """The default transformer's config for a checked ``task``; the fields checked here (for every caller)."""
    for name, value in (("seed", seed), ("d_model", d_model), ("n_heads", n_heads), ("n_layers", n_layers)):
        check_int(name, value, low=0 if name == "seed" else 1)
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return dict(d_model=d_model, d_head=d_model // n_heads, n_heads=n_heads, n_layers=n_layers, n_ctx=task.n_ctx,
        d_vocab=task.d_vocab, d_mlp=2 * d_model, act_fn="relu", normalization_type="LN",
        positional_embedding_type="standard", seed=seed, tokenizer_prepends_bos=False,
        model_name=f"{task.name}_d{d_model}h{n_heads}" + (f"l{n_layers}" if n_layers != 1 else ""))


def default_model(task: Task, *, seed: int = 0, d_model: int = 32, n_heads: int = 2, n_layers: int = 1):
    """A fresh, seeded ``boot_native`` transformer sized from ``task`` (the study's block: LayerNorm,
    a ReLU MLP of width ``2 d_model``), in eval mode."""
    _check_task(task)
    return _boot(_default_config(task, seed=seed, d_model=d_model, n_heads=n_heads, n_layers=n_layers))


def _check_task(task: object) -> Task:
    if not isinstance(task, Task):
        raise TypeError(f"task must implement perm_circuits.tasks.Task, got {type(task).__name__}")
    return task


def _boot(config: dict[str, Any]):
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(TransformerBridgeConfig(**config))
    model.eval()
    return model


def _entry_fields(task: Task, fields: Mapping[str, Any]):
    entry = task_entry(_check_task(task).name)
    bad = sorted(set(fields) - set(entry.model_keys))
    if bad:
        raise ValueError(f"unknown model field(s) {bad} for task {task.name!r}; allowed: {list(entry.model_keys)}")
    builder = entry.builder()
    if builder is None:
        fields = {**DEFAULT_MODEL, **fields}
    return entry, builder, dict(fields)


def task_model(task: Task, *, seed: int = 0, **fields: Any) -> tuple[torch.nn.Module, Forward | None]:
    """``(model, forward)`` for ``task`` from its registry entry: the task's own builder and forward,
    else :func:`default_model` (fields default to :data:`DEFAULT_MODEL`) and ``forward=None``.  The
    model carries ``task_build = {"seed": seed, "model": fields}`` (with defaults), which
    :func:`~perm_circuits.tasks.checkpoint.save_task_model` records."""
    entry, builder, fields = _entry_fields(task, fields)
    if builder is None:
        model, forward = _boot(_default_config(task, seed=seed, **fields)), None  # task checked above
    else:
        model, forward = builder(task, seed=seed, **fields), entry.forward_fn()
    model.task_build = {"seed": seed, "model": dict(fields)}  # what rebuilds it (tasks.checkpoint)
    return model, forward


def check_model_fields(task: Task, *, seed: int = 0, **fields: Any) -> None:
    """Raise the error :func:`task_model` would raise for these fields (the default transformer is
    not booted)."""
    _, builder, fields = _entry_fields(task, fields)
    if builder is None:
        _default_config(task, seed=seed, **fields)
    else:
        builder(task, seed=seed, **fields)


def fit_task(
    model: torch.nn.Module,
    task: Task,
    recipe: FitConfig,
    *,
    forward: Forward | None = None,
    callbacks: Sequence[Callable[[StepState], Any]] = (),
    progress: bool = True,
) -> FitResult:
    """Train ``model`` on ``task`` with :func:`~perm_circuits.tasks.base.fit` and ``recipe``, after
    :func:`check_fit`.  A :func:`~perm_circuits.models.build_model` bridge without dropout trains
    through :func:`~perm_circuits.models.fast_forward` unless ``forward`` is given (same logits)."""
    check_fit(model, task)
    if not isinstance(recipe, FitConfig):
        raise TypeError(f"recipe must be a FitConfig, got {type(recipe).__name__}")
    config = getattr(model, "perm_config", None)
    run = forward
    if run is None and isinstance(config, ModelConfig) and config.dropout == 0:
        run = fast_forward  # a build_model bridge: the same logits, several times faster
    result = fit(model, task, **recipe.to_dict(), forward=run, callbacks=callbacks, progress=progress)
    return FitResult(result.model, result.losses, result.records, task, forward)


def task_logits(model: torch.nn.Module, tokens: Int[Tensor, "batch seq"], forward: Forward | None = None) -> Tensor:
    """``forward(model, tokens)`` (default ``model(tokens)``) without gradients, as float."""
    on_model = tokens.to(model_device(model))  # the forward runs on the model's device
    with torch.no_grad():
        logits = model(on_model) if forward is None else forward(model, on_model)
    if isinstance(logits, Tensor):
        logits = logits.to(tokens.device)
    if not isinstance(logits, Tensor) or logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"the model must return logits [batch, seq, vocab] for tokens {tuple(tokens.shape)}, got {shape}")
    return logits.detach().float()


def measure_task(
    model: torch.nn.Module,
    task: Task,
    test_set: TaskBatch | None = None,
    *,
    n: int = 2000,
    seed: int = 1234,
    forward: Forward | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> Evaluation:
    """The :class:`~perm_circuits.tasks.evaluation.Evaluation` of ``model`` on ``test_set`` (default
    ``task.test_set(n, seed)``): ``task.metrics``, the masked cross-entropy, the agreement with
    ``task.reference`` and, where the task has one, its ``evaluation_detail(logits, batch)`` (the
    permutation task's per-step breakdown).  ``forward(model, tokens)`` replaces ``model(tokens)``;
    ``hooks`` (a TransformerLens hook list, e.g. an ablation) run during the model's own forward pass
    and are always removed afterwards."""
    check_fit(model, task)
    if forward is not None and not callable(forward):
        raise TypeError(f"forward must be a callable (model, tokens) -> logits or None, got {type(forward).__name__}")
    if hooks is not None:
        if forward is not None:
            raise ValueError("hooks= need the model's own forward pass; pass forward=None (a custom forward skips hook points)")
        hooks = check_hooks(model, hooks)
    if test_set is None:
        check_size("n (test sequences)", check_int("n", n, low=1), MAX_SEQUENCES)
        test_set = check_task_batch(task.test_set(n, seed), task, n, "test_set")
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch (task.test_set(...)), got {type(test_set).__name__}")
    check_token_ids(test_set.tokens, task.d_vocab)  # non-empty, ids the task (and so the model) has
    test_set = test_set.to(model_device(model))  # once: the forward and the metrics run on the model's device
    with model.hooks(fwd_hooks=hooks) if hooks else nullcontext():  # forward is None under hooks
        logits = task_logits(model, test_set.tokens, forward)
    metrics = task.metrics(logits, test_set)
    missing = [name for name in task.metric_names if name not in metrics]
    if missing:
        raise ValueError(f"task {task.name!r}'s metrics() lacks the metrics it names: {missing}")
    test_loss = float(masked_cross_entropy(logits, test_set.targets, test_set.mask))
    reference = task.reference(test_set)
    agreement = {} if reference is None else reference_agreement(logits, test_set, reference)
    own_detail = getattr(task, "evaluation_detail", None)
    return Evaluation(task=task.name, model_name=model_name(model),
        metrics={name: float(metrics[name]) for name in task.metric_names}, test_loss=test_loss, reference=agreement,
        n_samples=len(test_set), task_dict=task.to_dict(),
        detail=own_detail(logits, test_set) if callable(own_detail) else None)

