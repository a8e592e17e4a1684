"""Checkpoints of a model trained on any registered task: its weights plus the record
``{"task": task.to_dict(), "model": fields, "seed": seed}`` under ``config.json``'s
:data:`~perm_circuits.models.TASK_RECORD` key (a study model's checkpoint,
:func:`perm_circuits.models.save_model`, stores its configs instead), from which the task and its
model (:func:`~perm_circuits.tasks.runner.task_model`) are rebuilt.  Nothing is unpickled; a user's
task must be registered before loading (``perm-circuits report PATH --import MODULE``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perm_circuits.checks import check_int
from perm_circuits.checkpoint_io import check_storable, read_checkpoint_document
from perm_circuits.models import (CONFIG_FILE, TASK_RECORD, WEIGHTS_FILE, CheckpointError, load_weights,
                                  read_checkpoint_files, write_checkpoint_files)
from perm_circuits.tasks.base import DEFAULT_MODEL_KEYS, TASKS, Task, task_entries, task_entry, task_from_dict
from perm_circuits.tasks.runner import task_logits, task_model

__all__ = ["TaskCheckpoint", "load_task_checkpoint", "save_task_model", "task_record"]


@dataclass(frozen=True)
class TaskCheckpoint:
    """A loaded task checkpoint: the model (eval mode, ``task_model(task, seed=seed, **model_fields)``
    with the stored weights, carrying ``metadata`` and ``task_build``), its task, the task's ``forward``
    (``None``: ``model(tokens)``; evaluate with it), the saved ``metadata`` and the folder ``path``."""

    model: Any
    task: Task
    forward: Callable[[Any, torch.Tensor], torch.Tensor] | None
    model_fields: Mapping[str, Any]
    seed: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None


def _build_of(model: torch.nn.Module, task: Task, model_fields: Mapping[str, Any] | None,
              seed: int | None) -> tuple[dict[str, Any], int]:
    """(fields, seed) that rebuild ``model``: given, else its ``task_build``, else its TransformerLens config."""
    build = getattr(model, "task_build", None)
    if isinstance(build, Mapping):
        model_fields = build.get("model") if model_fields is None else model_fields
        seed = build.get("seed") if seed is None else seed
    cfg = getattr(model, "cfg", None)
    if model_fields is None:
        if task_entry(task.name).builder() is not None or not all(hasattr(cfg, k) for k in DEFAULT_MODEL_KEYS):
            raise ValueError(
                f"cannot tell how to rebuild this {type(model).__name__} for task {task.name!r}: pass "
                f"model_fields= (the fields {list(task_entry(task.name).model_keys)} it was built with) and seed="
            )
        model_fields = {key: getattr(cfg, key) for key in DEFAULT_MODEL_KEYS}
    if seed is None:
        seed = getattr(cfg, "seed", None) or 0
    if not isinstance(model_fields, Mapping) or not all(isinstance(k, str) for k in model_fields):
        raise TypeError(f"model_fields must be a dict of the model's fields, got {model_fields!r}")
    return dict(model_fields), check_int("seed", seed, low=0)


def save_task_model(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    task: Task,
    *,
    model_fields: Mapping[str, Any] | None = None,
    seed: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Save ``model``, trained on registered ``task``, as checkpoint folder ``path`` (atomically) that
    records the task; returns ``path``.

    ``task_model(task, seed=seed, **model_fields)`` must rebuild ``model``; ``model_fields`` and ``seed``
    default to ``model.task_build``, else the default transformer's ``d_model``, ``n_heads``, ``n_layers``.
    Before anything is written, the rebuilt model with these weights must give ``model``'s logits on a
    few test sequences (ValueError otherwise, e.g. another activation), so the checkpoint loads as this model.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must implement perm_circuits.tasks.Task, got {type(task).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a folder path (str or Path), got {type(path).__name__}")
    description = task.to_dict()
    if not isinstance(description, Mapping) or description.get("task") != task.name:
        raise ValueError(f"task.to_dict() must carry 'task': {task.name!r} (its registry name), got {description!r}")
    if task_from_dict(description).to_dict() != description:
        raise ValueError(f"task_from_dict(task.to_dict()) does not give back task {task!r}: it cannot be recorded")
    fields, seed = _build_of(model, task, model_fields, seed)
    fresh, forward = task_model(task, seed=seed, **fields)
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    check_storable(tensors)  # float32 and finite, as the loader wants (before comparing logits)
    theirs = {key: tuple(value.shape) for key, value in fresh.state_dict().items()}
    rebuild = f"task_model({task.name!r}, seed={seed}, **{fields}) does not rebuild this model"
    if {key: tuple(value.shape) for key, value in tensors.items()} != theirs:
        raise ValueError(f"{rebuild} (its keys or shapes differ): pass the model_fields it was built with")
    fresh.load_state_dict(tensors, strict=True)
    fresh.eval()
    tokens = task.test_set(4, 0).tokens
    training = model.training
    model.eval()
    try:
        same = torch.allclose(task_logits(fresh, tokens, forward), task_logits(model, tokens, forward),
                              rtol=1e-4, atol=1e-4)  # float noise only (the model may run on another device)
    finally:
        model.train(training)
    if not same:
        raise ValueError(f"{rebuild} (same weights, other logits: another architecture): pass the model_fields it "
                         "was built with")
    record = {"task": dict(description), "model": fields, "seed": seed}
    return write_checkpoint_files(path, tensors, {TASK_RECORD: record}, metadata)


def task_record(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The task record of checkpoint folder ``path`` (``None``: no such folder, or a study checkpoint):
    the record in its weights' header, else its ``config.json``.  Reads no tensor."""
    if not (Path(path) / CONFIG_FILE).is_file() and not (Path(path) / WEIGHTS_FILE).is_file():
        return None
    try:
        document = read_checkpoint_document(path)
    except (OSError, CheckpointError):
        return None  # loading it says what is wrong
    record = document.get(TASK_RECORD)
    return record if isinstance(record, dict) else None


def load_task_checkpoint(path: str | os.PathLike[str], *, device: str | torch.device | None = None) -> TaskCheckpoint:
    """Load a checkpoint written by :func:`save_task_model`: its task, rebuilt by registry name, and
    its model, rebuilt with the checked weights (eval mode, on ``device``; default the CPU).
    CheckpointError (a ValueError) for a missing or corrupted checkpoint, a study checkpoint, an
    unregistered task, settings the task rejects or weights that do not fit."""
    document, tensors = read_checkpoint_files(path)
    record = document.get(TASK_RECORD)
    if record is None:
        raise CheckpointError(f"checkpoint {str(path)!r} has no {TASK_RECORD!r} task record: it is a permutation-lookup "
                              "model's checkpoint (load it with perm_circuits.models.load_model)")
    if not (isinstance(record, dict) and isinstance(record.get("task"), dict) and isinstance(record.get("model"), dict)
            and isinstance(record.get("seed"), int)):
        raise CheckpointError(f"the {TASK_RECORD!r} record of {str(path)!r} must be "
                              f"{{'task': {{'task': NAME, ...}}, 'model': {{...}}, 'seed': INT}}, got {record!r}")
    name = record["task"].get("task")
    if not isinstance(name, str) or name not in TASKS:
        task_entries()  # imports the built-in tasks
        if not isinstance(name, str) or name not in TASKS:
            raise CheckpointError(
                f"checkpoint {str(path)!r} was trained on task {name!r}, which is not registered; registered tasks: "
                f"{sorted(TASKS)}. Import the module that defines and registers it first "
                "(perm-circuits report PATH --import MODULE_OR_FILE.py)"
            )
    try:
        task = task_from_dict(record["task"])
        model, forward = task_model(task, seed=record["seed"], **record["model"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"cannot rebuild task {name!r} and its model from {str(path)!r}: {error}") from None
    load_weights(model, tensors, f"task {name!r}'s model {record['model']}")
    if device is not None:
        from perm_circuits.devices import to_device

        to_device(model, device)
    model.eval()
    metadata = document.get("metadata", {})
    if not isinstance(metadata, dict):
        raise CheckpointError(f"metadata in {Path(path) / CONFIG_FILE} must be a JSON object")
    model.metadata = metadata
    return TaskCheckpoint(model, task, forward, dict(record["model"]), record["seed"], metadata, Path(path))
