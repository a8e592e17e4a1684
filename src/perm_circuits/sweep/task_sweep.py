"""Sweeps over the seed papers' tasks: ``task = "NAME"`` in a spec.

A spec whose ``[fixed]`` (or ``[grid]``) names a registered task other than ``"permutation"``
sweeps that task instead of the study's.  Its keys are then

* the task's own fields (e.g. ``S``, ``R``, ``D`` of ``factual_recall``),
* the fields of the system's model (:data:`SYSTEMS`: e.g. ``d_model``, ``d_mlp``),
* the fit recipe (:data:`FIT_DEFAULTS`: ``steps``, ``batch_size``, ``lr``, ``optimizer``,
  ``momentum``, ``weight_decay``), and ``seed`` (the model's initialisation and the data stream).

Each run builds the system's model, trains it with :func:`~perm_circuits.task_eval.train_task`
(the generic :func:`~perm_circuits.tasks.base.fit` loop) and evaluates it with
:func:`~perm_circuits.task_eval.evaluate_task`; its row holds the config columns, the task's
metrics and the final training loss.  Run ids hash the resolved configuration as for the study.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["FIT_DEFAULTS", "SYSTEMS", "is_task_spec", "resolve_task_run", "run_task", "task_keys"]

FIT_DEFAULTS: dict[str, Any] = {"steps": 1000, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                                "momentum": 0.0, "weight_decay": 0.0}
"""The fit recipe of a task run (any of them may be set in a spec)."""


def _factual(task, seed: int, fields: dict[str, Any]):
    from perm_circuits.systems.factual_model import build_factual_model

    return build_factual_model(task, seed=seed, **fields), None


def _birth(task, seed: int, fields: dict[str, Any]):
    from perm_circuits.systems.birth_model import BirthModelConfig, build_birth_model, plain_forward

    return build_birth_model(BirthModelConfig(N=task.N, T=task.T, seed=seed, **fields)), plain_forward


def _forner(task, seed: int, fields: dict[str, Any]):
    from perm_circuits.systems.forner_model import FornerConfig, FornerModel, fast_forward

    config = FornerConfig(N=task.N, d_g=task.d_g, L=task.L, perm_seed=task.perm_seed, seed=seed, **fields)
    return FornerModel(config), fast_forward


SYSTEMS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "factual_recall": (_factual, ("d_model", "n_heads", "d_head", "d_mlp")),
    "bigram_triggers": (_birth, ("d_model",)),
    "perm_chain": (_forner, ("d_h", "rope_theta", "logic_init")),
}
"""task name -> (builder ``(task, seed, model fields) -> (model, forward or None)``, model keys)."""


def is_task_spec(values: dict[str, Any]) -> bool:
    """Whether a grid point names a non-study task."""
    return values.get("task", "permutation") != "permutation"


def _task_class(name: str):
    from perm_circuits.tasks import TASKS

    if name not in SYSTEMS:
        raise ValueError(f"task {name!r} cannot be swept; sweepable tasks: ['permutation', {', '.join(map(repr, sorted(SYSTEMS)))}]")
    return TASKS[name]


def _task_fields(name: str) -> list[str]:
    return [f.name for f in dataclasses.fields(_task_class(name)) if f.init]


def task_keys(name: str) -> list[str]:
    """Every key a spec of task ``name`` may hold."""
    return sorted({"task", "seed", *_task_fields(name), *SYSTEMS[name][1], *FIT_DEFAULTS})


def resolve_task_run(values: dict[str, Any]) -> dict[str, Any]:
    """The resolved config of one grid point (raises the task's and the model's own errors)."""
    name = values["task"]
    allowed = set(task_keys(name))
    bad = sorted(set(values) - allowed)
    if bad:
        raise ValueError(f"unknown key(s) {bad} for task {name!r}; allowed keys: {sorted(allowed)}")
    task_fields = set(_task_fields(name))
    task = _task_class(name)(**{k: v for k, v in values.items() if k in task_fields})
    seed = values.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    model_fields = {k: v for k, v in values.items() if k in SYSTEMS[name][1]}
    fit = {**FIT_DEFAULTS, **{k: v for k, v in values.items() if k in FIT_DEFAULTS}}
    SYSTEMS[name][0](task, seed, model_fields)  # validates the model's fields now, before anything runs
    return {"task": task.to_dict(), "model": model_fields, "fit": fit, "seed": seed}


def run_task(run_id: str, config: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one task run; never raises (a failure is a ``status="failed"`` row)."""
    from perm_circuits.sweep.run import versions
    from perm_circuits.task_eval import evaluate_task, train_task
    from perm_circuits.tasks import task_from_dict

    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    row: dict[str, Any] = {"run_id": run_id, "status": "failed", "error": ""}
    try:
        task = task_from_dict(config["task"])
        row.update({**config["task"], "task": task.name, "seed": config["seed"], **config["model"], **config["fit"]})
        fit = dict(config["fit"])
        model, forward = SYSTEMS[task.name][0](task, config["seed"], config["model"])
        options = {"optimizer": fit.pop("optimizer"), "momentum": fit.pop("momentum"),
                   "weight_decay": fit.pop("weight_decay")}
        if forward is not None:
            options["forward"] = forward
        result = train_task(model, task, steps=fit["steps"], batch_size=fit["batch_size"], lr=fit["lr"],
                            seed=config["seed"], progress=False, **options)
        evaluation = evaluate_task(result.model, task, forward=forward)
        row.update(evaluation.summary())
        row["final_train_loss"] = result.losses[-1]
        row["status"] = "done"
    except Exception:  # noqa: BLE001 - a failed run is a row, the sweep goes on
        row["status"] = "failed"
        row["error"] = traceback.format_exc()
    finally:
        torch.set_num_threads(threads)
    row["wall_seconds"] = time.perf_counter() - start
    row.update(versions())
    return row
