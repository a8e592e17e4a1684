"""The record of a training run's dynamics (what :class:`~perm_circuits.dynamics.DynamicsRecorder`
produces), stored next to the checkpoint as ``dynamics.json`` (:func:`save_dynamics`, atomically) and
read back, validated, by :func:`load_dynamics`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from perm_circuits._util import atomic_write_text, json_safe
from perm_circuits.checks import check_int

__all__ = ["DYNAMICS_FILE", "DynamicsRecord", "load_dynamics", "save_dynamics"]

DYNAMICS_FILE = "dynamics.json"
"""The file name of a record inside a checkpoint folder."""
FORMAT = "perm_circuits.dynamics"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class DynamicsRecord:
    """Signal values over training: ``values[i][j]`` is signal ``signals[j]`` (e.g. ``"recall_accuracy"``,
    ``"L0H0.QK.x_match"``) at the global optimiser step ``steps[i]`` (strictly increasing), ``nan``
    where undefined; ``settings`` (JSON-serialisable) say how the record was made (task, test-set
    size and seed, signal groups, LLC settings, model name)."""

    steps: tuple[int, ...]
    signals: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]
    settings: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        steps = self.steps
        if not isinstance(steps, (list, tuple)):
            raise TypeError(f"steps must be a tuple of ints, got {type(steps).__name__}")
        for step in steps:
            check_int("steps entry", step, low=0)
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"steps must be strictly increasing, got {list(steps)}")
        if not isinstance(self.signals, tuple) or not all(isinstance(s, str) and s for s in self.signals):
            raise TypeError(f"signals must be a tuple of non-empty strings, got {self.signals!r}")
        if len(set(self.signals)) != len(self.signals):
            duplicated = sorted({s for s in self.signals if self.signals.count(s) > 1})
            raise ValueError(f"signals must be unique, got duplicates {duplicated}")
        if len(self.values) != len(self.steps):
            raise ValueError(f"values has {len(self.values)} rows but there are {len(self.steps)} steps")
        for step, row in zip(self.steps, self.values):
            if len(row) != len(self.signals):
                raise ValueError(f"values at step {step} has {len(row)} entries, expected {len(self.signals)} (one per signal)")

    def __len__(self) -> int:
        return len(self.steps)

    def to_dataframe(self) -> pd.DataFrame:
        """Tidy: one row per (step, signal) with columns ``step``, ``signal``, ``value``."""
        rows = [
            {"step": step, "signal": signal, "value": value}
            for step, row in zip(self.steps, self.values)
            for signal, value in zip(self.signals, row)
        ]
        return pd.DataFrame(rows, columns=["step", "signal", "value"])

    def wide(self) -> pd.DataFrame:
        """One row per step (the index), one column per signal."""
        return pd.DataFrame(list(self.values), index=pd.Index(self.steps, name="step"), columns=list(self.signals))

    def series(self, signal: str) -> pd.Series:
        """The values of one signal, indexed by step (KeyError naming the known signals if absent)."""
        if signal not in self.signals:
            raise KeyError(f"no signal {signal!r} in the record; signals: {list(self.signals)}")
        j = self.signals.index(signal)
        return pd.Series([row[j] for row in self.values], index=pd.Index(self.steps, name="step"), name=signal)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready document (``nan`` becomes ``null``)."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "steps": list(self.steps),
            "signals": list(self.signals),
            "values": json_safe([list(row) for row in self.values]),
            "settings": json_safe(dict(self.settings)),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DynamicsRecord:
        """From :meth:`to_dict` output (``null`` values become ``nan``); ValueError if malformed."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a dynamics record must be a dict, got {type(data).__name__}")
        if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"not a dynamics record: format {data.get('format')!r} version {data.get('format_version')!r}, "
                f"expected {FORMAT!r} version {FORMAT_VERSION}"
            )
        missing = [key for key in ("steps", "signals", "values") if key not in data]
        if missing:
            raise ValueError(f"dynamics record lacks {missing}")
        try:
            values = tuple(tuple(math.nan if v is None else float(v) for v in row) for row in data["values"])
        except (TypeError, ValueError) as error:
            raise ValueError(f"dynamics record values must be numbers or null: {error}") from None
        return cls(steps=tuple(data["steps"]), signals=tuple(data["signals"]), values=values,
            settings=dict(data.get("settings") or {}))


def _file(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path if path.suffix == ".json" else path / DYNAMICS_FILE


def save_dynamics(record: DynamicsRecord, path: str | os.PathLike) -> Path:
    """Write ``record`` atomically to ``path`` (a ``.json`` file, or a checkpoint folder: then
    ``path/dynamics.json``); returns the file written."""
    if not isinstance(record, DynamicsRecord):
        raise TypeError(f"record must be a DynamicsRecord, got {type(record).__name__}")
    text = json.dumps(record.to_dict(), indent=1, allow_nan=False)
    return atomic_write_text(_file(path), text + "\n")


def load_dynamics(path: str | os.PathLike) -> DynamicsRecord:
    """Read a record written by :func:`save_dynamics` (a checkpoint folder or the ``.json`` file)."""
    file = _file(path)
    if not file.is_file():
        raise FileNotFoundError(f"no dynamics record at {file} (train with --record-dynamics to write one)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{file} is not valid JSON: {error}") from None
    try:
        return DynamicsRecord.from_dict(data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{file}: {error}") from None
