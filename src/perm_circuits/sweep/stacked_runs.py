"""Sweep runs that differ only in their seed, trained as one stacked group
(:func:`~perm_circuits.stacked.train_stacked`), then evaluated and analysed as
:func:`~perm_circuits.sweep.run.run_one` does: the rows are the single trainer's bit for bit on CPU
(``wall_seconds`` aside: a member's share of the group's training plus its own analysis), so the
trainer is not part of the run id.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from typing import Any

import torch

from perm_circuits.checks import check_int
from perm_circuits.models import ModelConfig
from perm_circuits.sweep.backends import OnResult, OnStart, Row, run_each, run_pool
from perm_circuits.sweep.run import seed_globals, config_columns, trained_row
from perm_circuits.sweep.spec import RunConfig
from perm_circuits.sweep.store import guarded_row
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.train import TrainConfig

__all__ = ["TRAINERS", "architecture_key", "choose_trainer", "group_runs", "run_group", "run_groups_local", "run_groups_serial",
           "stacked_reproduces_single"]

TRAINERS = ("auto", "single", "stacked")
"""``run_sweep``'s ``trainer`` choices (:func:`choose_trainer`)."""


def architecture_key(config: dict[str, Any]) -> str:
    """What a run shares with its stacked group: its config minus the seeds (a task run, never
    stacked, keys by its whole config)."""
    if "fit" in config:
        return json.dumps(config, sort_keys=True)
    model = {k: v for k, v in config["model"].items() if k != "seed"}
    train = {k: v for k, v in config["train"].items() if k != "seed"}
    return json.dumps({**config, "model": model, "train": train}, sort_keys=True)


def group_runs(runs: Sequence[RunConfig], max_size: int | None = None) -> list[tuple[RunConfig, ...]]:
    """The runs in groups of one architecture (first appearance order), at most ``max_size`` each."""
    if max_size is not None and check_int("max_size", max_size) <= 0:
        raise ValueError(f"max_size must be a positive int or None, got {max_size!r}")
    groups: dict[str, list[RunConfig]] = {}
    for run in runs:
        groups.setdefault(architecture_key(run.config), []).append(run)
    out = []
    for members in groups.values():
        size = max_size or len(members)
        out.extend(tuple(members[i:i + size]) for i in range(0, len(members), size))
    return out


def choose_trainer(trainer: str, backend: str, runs: Sequence[RunConfig]) -> str:
    """The trainer a sweep uses: ``trainer``, or for ``"auto"`` ``"stacked"`` on the serial and local
    backends when some architecture has two or more runs to do.  Stacking 5 to 20 d32h2 seeds runs
    1.03-1.08x the speed of single runs on one quiet CPU thread, 1.15-1.35x on a loaded 2-core CPU
    (``benchmarks/stacked_training.py``).  Ray trains one run per task."""
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {TRAINERS}, got {trainer!r}")
    if trainer != "auto":
        return trainer
    if backend == "ray":
        return "single"
    return "stacked" if any(len(group) > 1 for group in group_runs(runs)) else "single"


@functools.cache
def stacked_reproduces_single() -> bool:
    """Whether, on this machine's CPU, two stacked members equal their single runs bit for bit, on a
    tiny case exercising every path (one head, dropout, a short last batch).  Cached per process."""
    from perm_circuits.stacked import train_stacked
    from perm_circuits.train import train

    architecture = ModelConfig(d_model=8, n_heads=1, dropout=0.1)
    task = TaskConfig(repeat_ratio=0.3)
    recipe = TrainConfig(epochs=1, samples_per_epoch=3 * 128 + 20, test_size=50)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        stacked = train_stacked([0, 1], task, recipe, architecture=architecture, progress=False)
        for seed, member in enumerate(stacked):
            config = ModelConfig.from_dict({**architecture.to_dict(), "seed": seed})
            single = train(config, task, TrainConfig.from_dict({**recipe.to_dict(), "seed": seed}), progress=False)
            a, b = member.model.state_dict(), single.model.state_dict()
            if not all(torch.equal(a[k], b[k]) for k in a) or member.history.rows != single.history.rows:
                return False
        return True
    finally:
        torch.set_num_threads(threads)


def run_group(runs: Sequence[tuple[str, dict[str, Any]]], keep_models: bool = False) -> list[Row]:
    """``run_one``'s ``(row, checkpoint files)`` for every ``(run_id, config)`` of one group, trained
    stacked.  Never raises; a group of one, a task run, a machine where stacking is not exact or a
    failed stacked training fall back to ``run_one`` per run."""
    runs = list(runs)
    if len(runs) == 1 or any("fit" in config for _, config in runs):
        return run_each(runs, keep_models)
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as run_one: results must not depend on the worker's thread count
    try:
        if not stacked_reproduces_single():
            return run_each(runs, keep_models)
        from perm_circuits.stacked import train_stacked

        model_configs = [ModelConfig.from_dict(config["model"]) for _, config in runs]
        task_config = TaskConfig.from_dict(runs[0][1]["task"])
        train_configs = [TrainConfig.from_dict(config["train"]) for _, config in runs]
        try:
            results = train_stacked(model_configs, task_config, train_configs, progress=False)
        except Exception:  # noqa: BLE001 - each run then trains alone and reports its own failure
            return run_each(runs, keep_models)
        share = (time.perf_counter() - start) / len(runs)
        return [_member_row(run_id, config, result, share, keep_models) for (run_id, config), result in zip(runs, results)]
    finally:
        torch.set_num_threads(threads)


def _member_row(run_id: str, config: dict[str, Any], result, train_seconds: float, keep_models: bool) -> Row:
    def work(row: dict[str, Any]) -> dict[str, bytes] | None:
        row.update(config_columns(run_id, config))
        seed_globals(result.model_config.seed)  # where run_one seeds them (training draws from none)
        return trained_row(row, result, run_id, config, keep_models)

    return guarded_row(run_id, work, train_seconds)


def run_groups_serial(groups: Sequence[Sequence[RunConfig]], on_result: OnResult, on_running: OnStart,
                      *, keep_models: bool) -> None:
    """One group after another in this process."""
    for group in groups:
        on_running(len(group))
        for row, files in run_group([(run.run_id, run.config) for run in group], keep_models):
            on_result(row, files)


def _balanced(groups: Sequence[Sequence[RunConfig]], workers: int) -> list[tuple[RunConfig, ...]]:
    """Split the largest groups in halves until every worker has a group (or none can be split)."""
    out = [tuple(g) for g in groups]
    while len(out) < workers and max(map(len, out)) > 1:
        largest = max(range(len(out)), key=lambda i: len(out[i]))
        group = out.pop(largest)
        out[largest:largest] = [group[: len(group) // 2], group[len(group) // 2:]]
    return out


def run_groups_local(groups: Sequence[Sequence[RunConfig]], on_result: OnResult, on_running: OnStart,
                     *, workers: int, keep_models: bool) -> None:
    """One group per worker of the local backend's process pool (:func:`~perm_circuits.sweep.backends.run_pool`)."""
    run_pool(_balanced(groups, workers), run_group, on_result, on_running, workers=workers, keep_models=keep_models)
