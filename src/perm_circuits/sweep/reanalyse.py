"""Re-analyse a finished sweep from its kept models, without training again."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from perm_circuits.models import load_checkpoint
from perm_circuits.sweep.run import ANALYSIS_PREFIXES, analysis_columns, versions
from perm_circuits.sweep.store import MODELS_DIR, load_rows, write_row
from perm_circuits.tasks.checkpoint import task_record

__all__ = ["reanalyse_sweep"]


def _analysis_sizes(row: dict[str, Any]) -> dict[str, int]:
    sizes = {key.removeprefix("analysis_"): int(value) for key, value in row.items() if key.startswith("analysis_")}
    missing = sorted({"n", "n_pair", "n_boot", "recall_n"} - set(sizes))
    if missing:
        raise ValueError(f"row {row['run_id']} lacks the analysis sizes {missing} (analysis_* columns)")
    return sizes


def reanalyse_sweep(
    out_dir: str | os.PathLike, *, run_ids: Iterable[str] | None = None, progress: bool = True
) -> list[str]:
    """Recompute the analysis columns (:func:`~perm_circuits.sweep.run.analysis_columns`, with each run's
    own sizes) of every ``done`` run (or ``run_ids``) of a sweep run with ``keep_models=True``, from
    its kept model; returns their ids.  The old analysis columns are replaced, not merged (no stale
    mode), training columns kept; same code, same row bit for bit.  ValueError before any work
    when the folder has no rows, or a requested run has no row, is not done or has no kept model.
    """
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a folder path, got {type(out_dir).__name__}")
    out_dir = Path(out_dir)
    rows = {row["run_id"]: row for row in load_rows(out_dir)} if out_dir.is_dir() else {}
    if not rows:
        raise ValueError(f"{str(out_dir)!r} holds no sweep rows (runs/*.json)")
    if run_ids is None:
        wanted = sorted(run_id for run_id, row in rows.items() if row.get("status") == "done")
    else:
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be an iterable of run ids, not one string")
        wanted = list(run_ids)
        unknown = [r for r in wanted if r not in rows]
        if unknown:
            raise ValueError(f"no rows for run ids {unknown} in {str(out_dir)!r}")
        not_done = [r for r in wanted if rows[r].get("status") != "done"]
        if not_done:
            raise ValueError(f"runs {not_done} are not done: only finished runs can be re-analysed")
    no_model = [r for r in wanted if not (out_dir / MODELS_DIR / r).is_dir()]
    if no_model:
        raise ValueError(
            f"runs {no_model[:5]} have no kept model in {str(out_dir / MODELS_DIR)!r}: "
            "re-run the sweep with keep_models=True (--keep-models) to re-analyse it"
        )
    on_tasks = [r for r in wanted if task_record(out_dir / MODELS_DIR / r) is not None]
    if on_tasks:
        raise ValueError(
            f"runs {on_tasks[:5]} kept models of another task than the study's (a task sweep): sweep-reanalyse "
            "recomputes the study's analysis columns only; report such a model with perm-circuits report "
            "DIR/models/RUN_ID --import FILE.py"
        )
    sizes = {run_id: _analysis_sizes(rows[run_id]) for run_id in wanted}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for run_id in tqdm(wanted, desc="reanalyse", unit="run", disable=not progress):
            start = time.perf_counter()
            checkpoint = load_checkpoint(out_dir / MODELS_DIR / run_id)
            torch.manual_seed(checkpoint.model_config.seed)
            fresh = analysis_columns(checkpoint.model, checkpoint.task_config, sizes[run_id])
            kept = {k: v for k, v in rows[run_id].items() if not k.startswith(ANALYSIS_PREFIXES)}
            write_row(out_dir, {**kept, **fresh, **versions(), "reanalysis_seconds": time.perf_counter() - start})
    finally:
        torch.set_num_threads(threads)
    return wanted
