"""Sweeps over any registered task: ``task = "NAME"`` in a spec's ``[fixed]``.

A spec whose ``[fixed]`` names a registered task other than ``"permutation"`` sweeps that task
instead of the study's.  Everything task-specific comes from the task's registry entry
(:func:`perm_circuits.tasks.register_task`), so a new task is swept with no code here.  A spec's
keys are then

* the task's own dataclass fields (e.g. ``S``, ``R``, ``D`` of ``factual_recall``),
* its model's fields (the entry's ``model_keys``: e.g. ``d_model``, ``d_mlp`` of the factual
  model; for a task without a model builder, the default transformer's ``d_model``, ``n_heads``,
  ``n_layers``),
* the fit recipe (:class:`~perm_circuits.tasks.FitConfig`: ``steps``, ``batch_size``, ``lr``,
  ``optimizer``, ``momentum``, ``weight_decay``; defaults :data:`FIT_DEFAULTS` updated by the
  entry's ``fit_defaults``), and ``seed`` (the model's initialisation and the data stream).

Each run builds the task's model (:func:`~perm_circuits.tasks.runner.task_model`), trains and evaluates
it; its row holds the config columns, the task's metrics and the final training loss (``final_train_loss``).  With
``keep_models`` its model is kept as a checkpoint that records its task
(:func:`~perm_circuits.tasks.checkpoint.save_task_model`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from perm_circuits.checks import check_seed
from perm_circuits.sweep.store import checkpoint_files, guarded_row

__all__ = ["FIT_DEFAULTS", "is_task_spec", "resolve_task_run", "run_task", "run_task_keeping", "task_keys"]

FIT_DEFAULTS: dict[str, Any] = {"steps": 1000, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                                "momentum": 0.0, "weight_decay": 0.0}
"""The fit recipe of a task run (any of them may be set in a spec; ``seed`` is the run's seed)."""


def is_task_spec(values: dict[str, Any]) -> bool:
    """Whether a grid point names a task other than the study's."""
    return values.get("task", "permutation") != "permutation"


def _entry(name: str):
    from perm_circuits.tasks import task_entries, task_entry

    try:
        return task_entry(name)
    except ValueError:
        names = [entry.name for entry in task_entries()]
        raise ValueError(f"task {name!r} cannot be swept; sweepable tasks: {names}") from None


def _sweepable(name: str):
    """The registry entry of task ``name`` and its settings' field names; ValueError (naming the
    sweepable tasks) when it is not registered or its class is not a dataclass of its settings."""
    entry = _entry(name)
    if not dataclasses.is_dataclass(entry.cls):
        raise ValueError(f"task {name!r} cannot be swept: its class {entry.cls.__name__} is not a dataclass of its settings")
    return entry, [f.name for f in dataclasses.fields(entry.cls) if f.init]


def _keys(entry, fields: list[str]) -> list[str]:
    return sorted({"task", "seed", *fields, *entry.model_keys, *FIT_DEFAULTS})


def task_keys(name: str) -> list[str]:
    """Every key a spec of task ``name`` may hold."""
    return _keys(*_sweepable(name))


def resolve_task_run(values: dict[str, Any]) -> dict[str, Any]:
    """The resolved config of one grid point (raises the task's and the model's own errors)."""
    from perm_circuits.tasks import FitConfig
    from perm_circuits.tasks.runner import check_model_fields

    name = values["task"]
    entry, fields = _sweepable(name)  # the task is checked once
    allowed = set(_keys(entry, fields))
    bad = sorted(set(values) - allowed)
    if bad:
        raise ValueError(f"unknown key(s) {bad} for task {name!r}; allowed keys: {sorted(allowed)}")
    task_fields = set(fields)
    task = entry.cls(**{k: v for k, v in values.items() if k in task_fields})
    seed = check_seed(values.get("seed", 0))
    model_fields = {k: v for k, v in values.items() if k in entry.model_keys}
    defaults = {k: v for k, v in entry.fit_defaults.items() if k != "seed"}
    fit = {**FIT_DEFAULTS, **defaults, **{k: v for k, v in values.items() if k in FIT_DEFAULTS}}
    FitConfig(**fit, seed=seed)  # validates the recipe
    check_model_fields(task, seed=seed, **model_fields)  # validates the model's fields now, before anything runs
    return {"task": task.to_dict(), "model": model_fields, "fit": fit, "seed": seed}


def run_task(run_id: str, config: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one task run; never raises (a failure is a ``status="failed"`` row)."""
    return run_task_keeping(run_id, config, keep_model=False)[0]


def run_task_keeping(run_id: str, config: dict[str, Any],
                     keep_model: bool = False) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """:func:`run_task`'s row and, with ``keep_model``, the model's checkpoint files as ``{file name:
    bytes}`` (``None`` for a failed run)."""
    from perm_circuits.evaluate import evaluate
    from perm_circuits.tasks import FitConfig, task_from_dict
    from perm_circuits.tasks.checkpoint import save_task_model
    from perm_circuits.tasks.runner import task_model
    from perm_circuits.train import train

    def work(row: dict[str, Any]) -> dict[str, bytes] | None:
        task = task_from_dict(config["task"])
        row.update({**config["task"], "task": task.name, "seed": config["seed"], **config["model"], **config["fit"]})
        model, forward = task_model(task, seed=config["seed"], **config["model"])
        result = train(model, task, FitConfig(**config["fit"], seed=config["seed"]), forward=forward, progress=False)
        metrics = evaluate(result.model, task=task, forward=forward).summary()
        row.update(metrics)
        row["final_train_loss"] = result.losses[-1]
        if not keep_model:
            return None
        metadata = {"run_id": run_id, "sweep_config": config, "metrics": metrics, "final_train_loss": result.losses[-1]}
        return checkpoint_files(functools.partial(save_task_model, result.model, task=task, metadata=metadata))

    return guarded_row(run_id, work)
