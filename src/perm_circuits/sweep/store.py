"""Sweep storage: a run's row and checkpoint files as workers return them, one JSON file per run
written atomically by the driver, loading and export.

Layout of a sweep folder::

    DIR/spec.json               the last spec run into this folder (informational)
    DIR/runs/<run_id>.json      one row per run (the commit point of a run)
    DIR/models/<run_id>/        its checkpoint, with --keep-models (written before the row)

Every file is written to a temp file in the same folder, fsynced and ``os.replace``-d into
place, so killing the sweep (SIGKILL included) at any moment leaves either no row or a whole
one, never a partial or duplicate row; leftover temp files are removed when a sweep starts.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from perm_circuits._util import atomic_write, atomic_write_text, json_safe, loads_json
from perm_circuits.models import CONFIG_FILE, WEIGHTS_FILE
from perm_circuits.sweep.lock import LOCK_FILE

__all__ = ["SWEEP_KIND", "checkpoint_files", "clean_stale", "export_parquet", "finished_runs", "guarded_row", "holds_sweep_rows", "load_rows",
           "load_sweep", "versions", "write_checkpoint", "write_row"]

RUNS_DIR = "runs"
MODELS_DIR = "models"
TEXT_COLUMNS = ("run_id", "status", "error", "recall_curve", "elimination_curve")


SWEEP_KIND = "sweep"
"""The marker kind of a sweep folder (:func:`perm_circuits.outputs.mark_folder`)."""


def holds_sweep_rows(folder: Path) -> bool:
    """Whether ``folder`` is a sweep's without its marker: one a driver holds (its ``sweep.lock``), or
    one of a version that wrote no marker (a row in ``runs/``)."""
    if (folder / LOCK_FILE).is_file():
        return True
    for path in sorted((folder / "runs").glob("*.json"))[:1]:
        try:
            row = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return False
        return isinstance(row, dict) and row.get("run_id") == path.stem and "status" in row
    return False


def versions() -> dict[str, str]:
    """The package versions every row records (``version_perm_circuits``, ``version_torch``,
    ``version_transformer_lens``; empty where not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for column, package in (("version_perm_circuits", "perm_circuits"), ("version_torch", "torch"),
                            ("version_transformer_lens", "transformer-lens")):
        try:
            out[column] = version(package)
        except PackageNotFoundError:  # pragma: no cover
            out[column] = ""
    return out


def checkpoint_files(save: Callable[[str], Any]) -> dict[str, bytes]:
    """The checkpoint ``save(folder)`` writes, as ``{file name: bytes}`` (the driver writes it: workers
    may not share its disk)."""
    with tempfile.TemporaryDirectory(prefix="perm_sweep_") as tmp:
        save(tmp)
        return {name: (Path(tmp) / name).read_bytes() for name in (WEIGHTS_FILE, CONFIG_FILE)}


def guarded_row(run_id: str, work: Callable[[dict[str, Any]], dict[str, bytes] | None],
                seconds: float = 0.0) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """``(row, checkpoint files or None)`` of one run: ``work(row)`` fills the row on one torch thread
    and returns the files; an exception gives a ``status="failed"`` row with the traceback.
    ``wall_seconds`` adds ``seconds`` spent on the run before."""
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    row: dict[str, Any] = {"run_id": run_id, "status": "failed", "error": ""}
    try:
        files = work(row)
        row["status"] = "done"
    except Exception:  # noqa: BLE001 - a failed run is a row, the sweep goes on
        row["error"], files = traceback.format_exc(), None
    finally:
        torch.set_num_threads(threads)
    row["wall_seconds"] = seconds + time.perf_counter() - start
    row.update(versions())
    return row, files


def write_row(out_dir: str | os.PathLike, row: Mapping[str, Any]) -> Path:
    """Write ``runs/<run_id>.json`` atomically (NaN stored as null)."""
    text = json.dumps(json_safe(dict(row)), indent=1, sort_keys=True, allow_nan=False)
    path = Path(out_dir) / RUNS_DIR / f"{row['run_id']}.json"
    atomic_write_text(path, text + "\n")
    return path


def write_checkpoint(out_dir: str | os.PathLike, run_id: str, files: Mapping[str, bytes]) -> Path:
    """Write a run's checkpoint files (from the worker, as bytes) into ``models/<run_id>/``, each
    atomically and the weights first: they carry the whole record, so a kill between the files leaves a
    checkpoint that loads (:mod:`perm_circuits.checkpoint_io`)."""
    folder = Path(out_dir) / MODELS_DIR / run_id
    order = sorted(files, key=lambda name: name != WEIGHTS_FILE)  # the weights (the record) first: see checkpoint_io
    for name in order:
        atomic_write(folder / name, lambda tmp, data=files[name]: Path(tmp).write_bytes(data))
    return folder


def write_spec(out_dir: str | os.PathLike, spec: Mapping[str, Any]) -> None:
    atomic_write_text(Path(out_dir) / "spec.json", json.dumps(spec, indent=2, sort_keys=True) + "\n")


def clean_stale(out_dir: str | os.PathLike) -> list[Path]:
    """Remove temp files left by a killed sweep (``.<name>.*.tmp``); returns what was removed."""
    out_dir = Path(out_dir)
    removed = []
    for folder in (out_dir, out_dir / RUNS_DIR, *sorted((out_dir / MODELS_DIR).glob("*"))):
        if not folder.is_dir():
            continue
        for path in folder.glob(".*.tmp"):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def load_rows(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every stored row (skipping temp files), sorted by run id; a file that is not a JSON row with a
    ``run_id`` (hand-edited, truncated by a copy) raises a ValueError naming it."""
    paths = sorted((Path(out_dir) / RUNS_DIR).glob("*.json"))
    rows = []
    for path in paths:
        if path.name.startswith("."):
            continue
        try:
            row = loads_json(path.read_text(encoding="utf-8"), f"sweep row {str(path)!r}")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"sweep row {str(path)!r} is not valid JSON ({error}); delete it to rerun that run") \
                from None
        if not isinstance(row, dict) or not isinstance(row.get("run_id"), str):
            raise ValueError(f"sweep row {str(path)!r} is not a JSON object with a 'run_id' string; "
                             "delete it to rerun that run")
        rows.append(row)
    return rows


def finished_runs(out_dir: str | os.PathLike) -> dict[str, str]:
    """``{run_id: status}`` of the runs stored in ``out_dir``."""
    return {row["run_id"]: row.get("status", "failed") for row in load_rows(out_dir)}


METRIC_PREFIXES = ("test_loss", "elimination_accuracy", "recall_accuracy", "step", "probe_p", "recall_gen_x",
                   "epoch_recall_99", "epoch_elimination_99", "epochs_run", "wall_seconds")


def load_sweep(out_dir: str | os.PathLike) -> pd.DataFrame:
    """The sweep as a tidy DataFrame, one row per run sorted by config then run id; missing values
    are NaN (numeric columns with any missing value are float)."""
    out_dir = Path(out_dir)
    if not (out_dir / RUNS_DIR).is_dir():
        raise ValueError(f"{str(out_dir)!r} is not a sweep folder (no {RUNS_DIR}/ inside)")
    rows = load_rows(out_dir)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    for column in frame.columns:
        values = [v for v in frame[column] if v is not None and not (isinstance(v, float) and math.isnan(v))]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if column in TEXT_COLUMNS:
            frame[column] = frame[column].fillna("")
        elif (values and numbers and len(values) < len(frame)) or (not values and column.startswith(METRIC_PREFIXES)):
            frame[column] = frame[column].astype(float)
    order = [c for c in ("d_model", "n_heads", "n_layers", "dropout", "repeat_ratio", "epochs", "samples", "seed")
             if c in frame.columns]
    frame = frame.sort_values(order + ["run_id"], kind="stable", na_position="last").reset_index(drop=True)
    first = [c for c in ("run_id", "status") if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]


def export_parquet(out_dir: str | os.PathLike, path: str | os.PathLike | None = None) -> Path:
    """Write :func:`load_sweep` as Parquet (default ``DIR/sweep.parquet``, atomically); needs pyarrow."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError('Parquet export needs pyarrow: pip install -e ".[sweep]"') from None
    frame = load_sweep(out_dir)
    path = Path(path) if path is not None else Path(out_dir) / "sweep.parquet"
    atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))
    return path
