"""Sweep specs: parse, validate, expand the grid into fully resolved runs, and name each run.

A spec is a TOML file or the same dict in Python::

    [grid]                 # axes: lists, the sweep runs their Cartesian product
    d_model = [16, 32]
    seed = [0, 1, 2, 3, 4]
    [fixed]                # scalars shared by every run
    repeat_ratio = 0.3
    [analysis]             # optional: sizes of the per-run analysis (defaults: ANALYSIS_DEFAULTS)
    n = 2000

Keys are :class:`~perm_circuits.models.ModelConfig`, :class:`~perm_circuits.tasks.permutation_data.TaskConfig`
and :class:`~perm_circuits.train.TrainConfig` fields (``samples`` = ``samples_per_epoch``, ``early_stop`` =
``early_stop_patience``; unset ones take the study's recipe) and ``seed`` (model init and data
stream); ``task = "NAME"`` in ``[fixed]`` sweeps another registered task (:mod:`perm_circuits.sweep.task_sweep`).
Every run's configs are built first, so a bad spec is refused with the config's own message.  A run's
id hashes its resolved configuration (:func:`run_id_of`): a grown spec runs only its new runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perm_circuits._util import without_added_defaults
from perm_circuits.checks import check_int, check_size
from perm_circuits.models import ADDED_FIELDS as MODEL_ADDED_FIELDS
from perm_circuits.models import ModelConfig
from perm_circuits.tasks.permutation_data import ADDED_FIELDS as TASK_ADDED_FIELDS
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.train import TrainConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["ANALYSIS_DEFAULTS", "RunConfig", "SweepSpec", "allowed_keys", "load_spec", "run_id_of"]

TRAIN_ALIASES: dict[str, str] = {"samples": "samples_per_epoch", "early_stop": "early_stop_patience"}
"""Short spec names of TrainConfig fields."""

TRAIN_EXCLUDED = frozenset({"seed", "checkpoint_every", "checkpoint_dir"})
"""TrainConfig fields a spec cannot set (``seed`` is the shared seed; checkpoints are the sweep's business)."""

MAX_RUNS = 100_000
"""The most runs one spec's grid may expand to (each trains a model): more is a typo, refused before the
grid's product is formed."""

ANALYSIS_DEFAULTS: dict[str, int] = {
    "n": 2000,  # head_roles test sequences
    "n_pair": 1000,  # head_roles patching pairs
    "n_boot": 200,  # head_roles patching bootstrap resamples
    "recall_n": 2000,  # recall_generalisation sequences per source position (0: exhaustive)
    "roles": 1,  # 1: head_roles columns (verdict_/role_/claim_) under every mode; 0: skip them
}
"""Sizes of the per-run analysis (a few seconds per run); ``[analysis]`` in a spec overrides them."""

ANALYSIS_ADDED: dict[str, int] = {"roles": 1}
"""Analysis keys added after the first sweeps: hashed into run ids only when they differ from this."""

SECTIONS = ("grid", "fixed", "analysis")

DEFAULT_DEVICE = "cpu"
"""Where a run trains unless the spec says ``device = "cuda"`` (hashed into run ids only when not this)."""


def _model_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(ModelConfig) if f.name != "seed"]


def _task_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(TaskConfig) if f.name != "V"]  # V is the model's


def allowed_keys() -> list[str]:
    """Every key a permutation spec's ``[grid]`` / ``[fixed]`` may hold (other tasks:
    :func:`~perm_circuits.sweep.task_sweep.task_keys`)."""
    inverse = {v: k for k, v in TRAIN_ALIASES.items()}
    train = [inverse.get(f.name, f.name) for f in dataclasses.fields(TrainConfig) if f.name not in TRAIN_EXCLUDED]
    return sorted({*_model_keys(), *_task_keys(), *train, "seed", "task", "device"})


def _normalize(cls, values: dict[str, Any]) -> dict[str, Any]:
    """Ints given for float fields become floats, so ``dropout = 0`` and ``0.0`` name the same run."""
    floats = {f.name for f in dataclasses.fields(cls) if str(f.type).split("|")[0].strip() == "float"}
    return {
        k: float(v) if k in floats and isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in values.items()
    }


def run_id_of(config: Mapping[str, Any]) -> str:
    """First 16 hex chars of the SHA-256 of the canonical JSON (sorted keys) of a resolved run config."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunConfig:
    """One fully resolved run as JSON-able dicts (they travel to workers): ``config`` = ``{"model": ...,
    "task": ..., "train": TrainConfig fields minus checkpointing, "analysis": sizes}``; ``run_id`` hashes it."""

    run_id: str
    config: dict[str, Any]

    def configs(self) -> tuple[ModelConfig, TaskConfig, TrainConfig]:
        return (
            ModelConfig.from_dict(self.config["model"]),
            TaskConfig.from_dict(self.config["task"]),
            TrainConfig.from_dict(self.config["train"]),
        )


def _resolve(values: dict[str, Any], analysis: dict[str, int]) -> dict[str, Any]:
    """The resolved config of one grid point (raises the configs' own errors)."""
    values = {k: v for k, v in values.items() if k != "task"}  # task = "permutation": the default
    device = values.pop("device", DEFAULT_DEVICE)
    if not isinstance(device, str) or not device:
        raise ValueError(f"device must be a device name such as 'cpu' or 'cuda', got {device!r}")
    import torch

    try:  # the name only: whether the device exists is the worker's (a Ray node's GPU, not the driver's) to say
        torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device must be a torch device name such as 'cpu', 'cuda' or 'cuda:1', got {device!r}") from None
    model_keys, task_keys = set(_model_keys()), set(_task_keys())
    seed = values.get("seed", 0)
    model = {k: v for k, v in values.items() if k in model_keys}
    task = {k: v for k, v in values.items() if k in task_keys}
    train = {TRAIN_ALIASES.get(k, k): v for k, v in values.items()
             if k not in model_keys and k not in task_keys and k != "seed"}
    model_config = ModelConfig(**_normalize(ModelConfig, {**model, "seed": seed}))
    task_config = TaskConfig(**_normalize(TaskConfig, {**task, "V": model_config.V}))
    train_config = TrainConfig(**_normalize(TrainConfig, {**train, "seed": seed}))
    train_dict = {k: v for k, v in train_config.to_dict().items() if k not in ("checkpoint_every", "checkpoint_dir")}
    config = {  # fields added after the first sweeps are hashed only when they differ from the old behaviour
        "model": without_added_defaults(model_config.to_dict(), MODEL_ADDED_FIELDS),
        "task": without_added_defaults(task_config.to_dict(), TASK_ADDED_FIELDS),
        "train": train_dict,
        "analysis": without_added_defaults(dict(analysis), ANALYSIS_ADDED),
    }
    if device != DEFAULT_DEVICE:  # another device, other float arithmetic: part of the run's identity
        config["device"] = device
    return config


LIST_KEYS = frozenset({"repeat_sources"})
"""Config fields whose value is itself a list (a grid axis over them is a list of lists)."""


def _check_value(key: str, value: Any, where: str) -> None:
    if key in LIST_KEYS:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError(f"{where} {key!r} must be a list of ints (e.g. [1, 2, 3, 4]), got {value!r}")
        return
    if isinstance(value, (dict, list, tuple)):
        raise ValueError(f"{where} {key!r} must be a scalar (int, float, str, bool), got {value!r}")


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec: grid axes, fixed values, analysis sizes, and its resolved runs."""

    grid: dict[str, tuple[Any, ...]]
    fixed: dict[str, Any]
    analysis: dict[str, int]
    runs: tuple[RunConfig, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepSpec:
        """Validate a spec dict (``{"grid": {...}, "fixed": {...}, "analysis": {...}}``): ValueError /
        TypeError naming the bad key or value (the first failing combination for a config's error)."""
        if isinstance(data, SweepSpec):
            return data
        if not isinstance(data, Mapping):
            raise TypeError(f"a sweep spec must be a dict or a TOML file path, got {type(data).__name__}")
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise ValueError(f"unknown spec section(s) {unknown}; allowed sections: {list(SECTIONS)}")
        grid_in, fixed_in, analysis_in = (data.get(name, {}) for name in SECTIONS)
        for name, section in zip(SECTIONS, (grid_in, fixed_in, analysis_in)):
            if not isinstance(section, Mapping):
                raise TypeError(f"spec section [{name}] must be a table/dict, got {type(section).__name__}")
        if "task" in grid_in:
            raise ValueError("'task' must be in [fixed] (a sweep runs one task), not a [grid] axis")
        task_name = fixed_in.get("task", "permutation")
        allowed = allowed_keys()
        if task_name != "permutation":  # any other registered task (sweep/task_sweep.py)
            from perm_circuits.sweep.task_sweep import resolve_task_run, task_keys

            try:
                allowed = task_keys(task_name)
            except (KeyError, ValueError) as error:
                raise ValueError(f"[fixed] task: {error}") from None
            if analysis_in:
                raise ValueError(f"[analysis] applies to the permutation task only, not to task {task_name!r}")
        for name, section in (("grid", grid_in), ("fixed", fixed_in)):
            bad = sorted(set(section) - set(allowed))
            if bad:
                raise ValueError(f"unknown key(s) {bad} in [{name}]; allowed keys: {allowed}")
        both = sorted(set(grid_in) & set(fixed_in))
        if both:
            raise ValueError(f"key(s) {both} are both in [grid] and [fixed]; put each key in one of them")
        grid: dict[str, tuple[Any, ...]] = {}
        for key, axis in grid_in.items():
            if not isinstance(axis, (list, tuple)):
                raise ValueError(f"[grid] {key!r} must be a list of values, got {axis!r} (scalars go in [fixed])")
            if not axis:
                raise ValueError(f"[grid] {key!r} is an empty axis: give at least one value")
            for value in axis:
                _check_value(key, value, "[grid] value of")
            if len(set(map(repr, axis))) != len(axis):
                raise ValueError(f"[grid] {key!r} has repeated values {list(axis)}")
            grid[key] = tuple(axis)
        fixed = dict(fixed_in)
        for key, value in fixed.items():
            _check_value(key, value, "[fixed]")
        bad = sorted(set(analysis_in) - set(ANALYSIS_DEFAULTS))
        if bad:
            raise ValueError(f"unknown key(s) {bad} in [analysis]; allowed keys: {sorted(ANALYSIS_DEFAULTS)}")
        analysis = {**ANALYSIS_DEFAULTS, **analysis_in}
        minimum = {"n": 10, "n_pair": 2, "n_boot": 10, "recall_n": 0, "roles": 0}
        for key, value in analysis.items():
            check_int(f"[analysis] {key}", value, low=minimum[key])
        if analysis["roles"] not in (0, 1):
            raise ValueError(f"[analysis] roles must be 0 (skip head_roles) or 1, got {analysis['roles']!r}")
        if not grid and not fixed:  # an empty file is a mistake, not "train the full default recipe once"
            raise ValueError("the spec has no [grid] or [fixed] values: name at least one (e.g. [fixed] seed = 0 "
                             "for one run of the defaults)")

        runs: dict[str, RunConfig] = {}
        keys = list(grid)
        check_size("the grid's number of runs", math.prod(len(grid[k]) for k in keys), MAX_RUNS)  # before expanding
        for combo in itertools.product(*(grid[k] for k in keys)):
            values = {**fixed, **dict(zip(keys, combo))}
            try:
                config = _resolve(values, analysis) if task_name == "permutation" else resolve_task_run(values)
                run = RunConfig(run_id_of(config), config)
            except (TypeError, ValueError) as error:
                point = ", ".join(f"{k}={v!r}" for k, v in zip(keys, combo)) or "the fixed values"
                raise ValueError(f"invalid run ({point}): {error}") from None
            runs.setdefault(run.run_id, run)  # e.g. d_model=16 and 16.0 can name the same run
        return cls(grid=grid, fixed=fixed, analysis=analysis, runs=tuple(runs.values()))

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> SweepSpec:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"sweep spec {str(path)!r} does not exist or is not a file")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"sweep spec {str(path)!r} is not valid TOML: {error}") from None
        except UnicodeDecodeError as error:  # a binary file
            raise ValueError(f"sweep spec {str(path)!r} is not a UTF-8 text file (TOML): {error.reason} at byte "
                             f"{error.start}") from None
        except RecursionError:
            raise ValueError(f"sweep spec {str(path)!r} nests too deeply to be a sweep spec") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return {"grid": {k: list(v) for k, v in self.grid.items()}, "fixed": dict(self.fixed),
                "analysis": dict(self.analysis)}

    def __len__(self) -> int:
        return len(self.runs)


def load_spec(spec: SweepSpec | Mapping[str, Any] | str | os.PathLike) -> SweepSpec:
    """A validated :class:`SweepSpec` from a spec, a dict or a TOML file path."""
    if isinstance(spec, (str, os.PathLike)):
        return SweepSpec.from_toml(spec)
    return SweepSpec.from_dict(spec)
