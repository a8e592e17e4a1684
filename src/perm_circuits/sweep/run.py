"""One sweep run: train, evaluate and analyse one resolved config into one flat row (columns:
``docs/sweeps.md``), the same bit for bit in any process on any backend."""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import torch

from perm_circuits.analysis import HOWS, head_roles
from perm_circuits.evaluate import recall_generalisation
from perm_circuits.models import ModelConfig, save_model
from perm_circuits.sweep.spec import ANALYSIS_DEFAULTS, RunConfig
from perm_circuits.sweep.store import checkpoint_files, guarded_row, versions
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.train import TrainConfig, TrainResult, train

__all__ = [
    "ANALYSIS_PREFIXES", "CURVE_COLUMNS", "analysis_columns", "config_columns", "first_epoch", "history_curve",
    "parse_curve", "roles_columns", "run_one", "trained_row", "versions",
]

VERDICT = {True: "holds", False: "fails", None: "open"}


def config_columns(run_id: str, config: dict[str, Any]) -> dict[str, Any]:
    """The identity and config columns of a run's row (no model is built)."""
    model_config = ModelConfig.from_dict(config["model"])
    task, train_cfg = config["task"], config["train"]
    row: dict[str, Any] = {
        "run_id": run_id,
        "d_model": model_config.d_model,
        "n_heads": model_config.n_heads,
        "n_layers": model_config.n_layers,
        "d_head": model_config.resolved_d_head,
        "d_mlp": model_config.resolved_d_mlp,
        "dropout": float(config["model"].get("dropout", 0.0)),
        "V": model_config.V,
        "repeat_ratio": float(task["repeat_ratio"]),
        "epochs": train_cfg["epochs"],
        "samples": train_cfg["samples_per_epoch"],
        "batch_size": train_cfg["batch_size"],
        "lr": float(train_cfg["lr"]),
        "early_stop": train_cfg["early_stop_patience"],
        "seed": model_config.seed,
        # a list field is one hashable cell ("1" or "1,2,3,4") so tables can group by it
        "repeat_sources": ",".join(map(str, TaskConfig.from_dict({"V": model_config.V, **task}).repeat_sources)),
    }
    if "device" in config:  # only a run off the CPU says where it trained (its id differs too)
        row["device"] = config["device"]
    train_rest = {k: v for k, v in train_cfg.items() if k not in ("samples_per_epoch", "early_stop_patience")}
    for name, value in itertools.chain(config["model"].items(), task.items(), train_rest.items()):
        row.setdefault(name, value)  # any other field (act_fn, ...)
    row.update({f"analysis_{name}": value for name, value in config["analysis"].items()})
    return row


def first_epoch(history_rows, column: str, threshold: float = 0.99) -> float:
    """First epoch whose ``column`` is >= ``threshold`` (NaN if never)."""
    for row in history_rows:
        value = row.get(column)
        if value is not None and not (isinstance(value, float) and math.isnan(value)) and value >= threshold:
            return float(row["epoch"])
    return math.nan


CURVE_COLUMNS = {"recall_curve": "recall_accuracy", "elimination_curve": "elimination_accuracy"}
"""Row columns holding a per-epoch history column as comma-joined floats (epoch 1 first)."""


def history_curve(history_rows, column: str) -> str:
    """``column`` of every epoch, comma-joined at full precision (``repr``; missing: ``nan``)."""
    return ",".join("nan" if row.get(column) is None else repr(float(row[column])) for row in history_rows)


def parse_curve(cell: Any) -> list[float]:
    """The floats of a :func:`history_curve` cell (``[]`` for an empty or missing cell)."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)) or cell == "":
        return []
    return [float(value) for value in str(cell).split(",")]


def roles_columns(model, task: TaskConfig, *, n: int, n_pair: int, n_boot: int,
                  hows=None) -> dict[str, Any]:
    """``reference``, ``verdict_<how>``, ``role_<how>_<component>``, ``claim_<how>_<claim>`` for every ablation mode in
    ``hows`` (default :data:`~perm_circuits.analysis.HOWS`), from one
    :func:`~perm_circuits.analysis.head_roles` without its circuit step."""
    hows = tuple(HOWS if hows is None else hows)
    verdict = head_roles(model, task=task, how="mean" if "mean" in hows else hows[0], hows=hows,
                         n=n, n_pair=n_pair, n_boot=n_boot, circuits=False)
    return verdict.columns()


ANALYSIS_PREFIXES = ("recall_gen_x", "reference", "verdict_", "role_", "claim_")
"""Row columns that :func:`analysis_columns` produces (and a re-analysis replaces)."""


def analysis_columns(model, task: TaskConfig, analysis: dict[str, int]) -> dict[str, Any]:
    """The analysis part of a row from a trained model: recall generalisation (``recall_n`` 0:
    exhaustive) and, unless ``roles`` is 0, :func:`roles_columns`."""
    if not isinstance(analysis, dict):
        raise TypeError(f"analysis must be a dict like ANALYSIS_DEFAULTS, got {type(analysis).__name__}")
    unknown = sorted(set(analysis) - set(ANALYSIS_DEFAULTS))
    needed = ["recall_n"] + (["n", "n_pair", "n_boot"] if analysis.get("roles", 1) else [])
    missing = [key for key in needed if key not in analysis]
    if unknown or missing:
        raise ValueError(f"analysis has unknown keys {unknown} and lacks {missing}; expected the keys of "
                         f"ANALYSIS_DEFAULTS {sorted(ANALYSIS_DEFAULTS)}")
    recall_n = analysis["recall_n"] or None
    general = recall_generalisation(model, task=task, n=recall_n)
    row: dict[str, Any] = {f"recall_gen_x{k}": accuracy for k, accuracy in enumerate(general.recall, start=1)}
    if analysis.get("roles", 1):
        row.update(roles_columns(model, task, n=analysis["n"], n_pair=analysis["n_pair"], n_boot=analysis["n_boot"]))
    return row


def trained_row(row: dict[str, Any], result: TrainResult, run_id: str, config: dict[str, Any],
                keep_model: bool) -> dict[str, bytes] | None:
    """Add a trained run's metric and analysis columns to ``row``; its checkpoint files with ``keep_model``."""
    result.model.eval()
    evaluation, history = result.evaluation, result.history.rows
    metrics: dict[str, Any] = {
        "epochs_run": result.epochs_run,
        "test_loss": evaluation.test_loss,
        "elimination_accuracy": evaluation.metrics["elimination_accuracy"],
        "recall_accuracy": evaluation.metrics["recall_accuracy"],
        **{f"step{step.step}_accuracy": step.accuracy for step in evaluation.detail.steps},
        **{name: p for name, p in evaluation.summary().items() if name.startswith("probe_p")},
        "epoch_recall_99": first_epoch(history, "recall_accuracy"),
        "epoch_elimination_99": first_epoch(history, "elimination_accuracy"),
        **{name: history_curve(history, column) for name, column in CURVE_COLUMNS.items()},
    }
    row.update({**metrics, **analysis_columns(result.model, result.task_config, config["analysis"])})
    if not keep_model:
        return None
    metadata = {"run_id": run_id, "sweep_config": config, "epochs_run": result.epochs_run,
                "metrics": result.evaluation.summary(), "history": list(result.history.rows)}
    return checkpoint_files(functools.partial(save_model, result.model, task=result.task_config,
                                              metadata=metadata))


def seed_globals(seed: int) -> None:
    """Seed the global RNGs too, so nothing depends on what the worker process ran before."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _train(model_config: ModelConfig, task_config: TaskConfig, train_config: TrainConfig,
           device: str | None = None) -> TrainResult:
    return train(model_config, task_config, train_config, progress=False, device=device)


def run_one(run_id: str, config: dict[str, Any], keep_model: bool = False) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """Train, evaluate and analyse one resolved run (every seed from its config, one torch thread):
    ``(row, checkpoint {file name: bytes} or None)``.  Never raises: an exception gives a
    ``status="failed"`` row whose ``error`` is the traceback."""
    if "fit" in config:  # any task but the study's (sweep/task_sweep.py)
        from perm_circuits.sweep.task_sweep import run_task_keeping

        return run_task_keeping(run_id, config, keep_model)

    def work(row: dict[str, Any]) -> dict[str, bytes] | None:
        row.update(config_columns(run_id, config))
        model_config, task_config, train_config = RunConfig(run_id, config).configs()
        seed_globals(model_config.seed)
        on = {"device": config["device"]} if "device" in config else {}  # the CPU runs call _train as always
        return trained_row(row, _train(model_config, task_config, train_config, **on), run_id, config, keep_model)

    return guarded_row(run_id, work)
