""":func:`run_sweep`: validate a spec, skip finished runs, run the rest on a backend, store each row."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from perm_circuits.checks import check_bool, check_int
from perm_circuits.outputs import check_folder, folder_marker, is_marked, mark_folder
from perm_circuits.sweep.backends import BACKENDS, default_workers, run_local, run_ray, run_serial
from perm_circuits.sweep.lock import sweep_lock
from perm_circuits.sweep.spec import SweepSpec, load_spec
from perm_circuits.sweep.stacked_runs import TRAINERS, choose_trainer, group_runs, run_groups_local, run_groups_serial
from perm_circuits.sweep.store import (
    SWEEP_KIND, clean_stale, finished_runs, holds_sweep_rows, load_sweep, write_checkpoint, write_row, write_spec,
)

__all__ = ["SweepResult", "run_sweep", "summary_table"]

CONFIG_COLUMNS = ("d_model", "n_heads", "n_layers", "dropout", "repeat_ratio", "epochs", "samples", "batch_size",
                  "lr", "early_stop")


@dataclass(frozen=True)
class SweepResult:
    """What one :func:`run_sweep` call did: runs in the spec, skipped (already stored), done, failed."""

    out_dir: Path
    n_runs: int
    n_skipped: int
    done: tuple[str, ...]
    failed: tuple[str, ...]
    errors: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dataframe(self) -> pd.DataFrame:
        """Every row stored in the sweep folder (:func:`~perm_circuits.sweep.load_sweep`)."""
        return load_sweep(self.out_dir)


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per config (everything but the seed): runs, done, failed, ``learned_recall`` (share of done runs
    with final ``recall_accuracy >= 0.99``) and their ``median_epoch_recall_99``; task sweeps: the
    mean over done runs of each metric."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame (load_sweep), got {type(frame).__name__}")
    if frame.empty:
        return pd.DataFrame()
    if "task" in frame.columns and frame["task"].notna().any():
        return _task_summary(frame)
    keys = [c for c in CONFIG_COLUMNS if c in frame.columns and frame[c].nunique(dropna=False) > 1] or ["d_model"]
    done = frame["status"] == "done"
    recall = frame.get("recall_accuracy", pd.Series(float("nan"), index=frame.index))
    table = frame.assign(
        _done=done, _failed=~done, _learned=(recall >= 0.99) & done,
        _epoch=frame.get("epoch_recall_99", pd.Series(float("nan"), index=frame.index)),
    ).groupby(keys, dropna=False).agg(
        runs=("run_id", "size"), done=("_done", "sum"), failed=("_failed", "sum"),
        learned=("_learned", "sum"), median_epoch_recall_99=("_epoch", "median"),
    )
    table["learned_recall"] = table["learned"] / table["done"].where(table["done"] > 0)
    return table.drop(columns="learned").reset_index()


def _task_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`summary_table` of a task sweep."""
    from perm_circuits.sweep.task_sweep import task_keys

    config: set[str] = {"task", "seed"}
    for name in frame["task"].dropna().unique():
        try:
            config |= set(task_keys(str(name)))
        except ValueError:  # a task not registered in this process: group by task only
            pass
    keys = [c for c in sorted(config - {"seed"}) if c in frame.columns and frame[c].nunique(dropna=False) > 1]
    keys = keys or ["task"]
    skip = config | {"run_id", "status", "error", "wall_seconds"}
    metrics = [c for c in frame.columns if c not in skip and not c.startswith("version_")
               and pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])]
    done = frame["status"] == "done"
    table = frame.assign(_done=done, _failed=~done).groupby(keys, dropna=False).agg(
        runs=("run_id", "size"), done=("_done", "sum"), failed=("_failed", "sum"))
    if metrics:
        table = table.join(frame[done].groupby(keys, dropna=False)[metrics].mean())
    return table.reset_index()


def run_sweep(
    spec: SweepSpec | dict[str, Any] | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    keep_models: bool = False,
    retry_failed: bool = False,
    progress: bool = True,
    trainer: str = "auto",
    force: bool = False,
) -> SweepResult:
    """Run every run of ``spec`` not yet stored in ``out_dir``; one JSON row per run.

    Args:
        spec: a :class:`SweepSpec`, the spec dict, or a TOML file path; validated (every run's
            configs built) before anything is created or started.
        out_dir: the sweep folder (``runs/<run_id>.json``, ``models/<run_id>/``).  Runs whose
            row is already there are skipped; so are failed ones unless ``retry_failed``.  One
            driver at a time: ``sweep.lock`` names it while it runs; a second one is refused
            (:class:`~perm_circuits.sweep.lock.SweepLockedError`, naming the owner's pid and host),
            a killed driver's lock is taken over (:mod:`perm_circuits.sweep.lock`).
        backend: ``"local"`` (process pool), ``"ray"``, or ``"serial"`` (this process).
        workers: pool size / local Ray CPUs (default: one per core).
        address: a running Ray cluster (``"HEAD_IP:6379"``); default: a local instance.
        keep_models: also save each run's checkpoint in ``models/<run_id>/``.
        progress: one tqdm bar (done / failed / running, ETA).
        trainer: ``"single"`` trains one model per run; ``"stacked"`` trains the runs that differ
            only in their seed as one stacked group (serial and local backends;
            :mod:`perm_circuits.sweep.stacked_runs`); ``"auto"`` (default) stacks where that is
            faster (:func:`~perm_circuits.sweep.stacked_runs.choose_trainer`).  The rows are the
            same bit for bit, so the trainer is not part of the run id.
        force: write into a non-empty folder that is not a sweep's.  Without it such a folder is
            refused before anything is written (a sweep folder is recognised by the marker the
            sweep writes, :func:`perm_circuits.outputs.mark_folder`, or by its rows).
    """
    out_dir = Path(out_dir)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if workers is not None and check_int("workers", workers) <= 0:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    if address is not None and backend != "ray":
        raise ValueError(f"address is for the ray backend only (backend={backend!r})")
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir {str(out_dir)!r} exists and is not a folder")
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {TRAINERS}, got {trainer!r}")
    if trainer == "stacked" and backend == "ray":
        raise ValueError("trainer='stacked' runs on the serial and local backends, not on ray")
    spec = load_spec(spec)
    if backend == "ray":
        from perm_circuits.sweep.backends import import_ray

        import_ray()  # a clear error before anything starts
        if address is not None:
            from perm_circuits.ray_address import check_ray_address

            check_ray_address(address)  # an unreachable cluster fails within seconds, before anything is written
    check_bool("force", force)
    check_folder(out_dir, SWEEP_KIND, force=force, label="out_dir", owned=holds_sweep_rows)
    created, marked = not out_dir.exists(), is_marked(out_dir, SWEEP_KIND)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with sweep_lock(out_dir):  # one driver per folder (a second one would run every run again)
            mark_folder(out_dir, SWEEP_KIND)
            return _run_locked(spec, out_dir, backend=backend, workers=workers, address=address,
                               keep_models=keep_models, retry_failed=retry_failed, progress=progress, trainer=trainer)
    except BaseException:
        left = sorted(p.name for p in out_dir.iterdir())
        if not marked and left == [folder_marker(SWEEP_KIND)]:
            (out_dir / folder_marker(SWEEP_KIND)).unlink()  # refused before any run: leave nothing behind
            left = []
        if created and not left:
            out_dir.rmdir()
        raise


def _run_locked(spec: SweepSpec, out_dir: Path, *, backend: str, workers: int | None, address: str | None,
                keep_models: bool, retry_failed: bool, progress: bool, trainer: str) -> SweepResult:
    """:func:`run_sweep` once it owns ``out_dir``."""
    clean_stale(out_dir)
    stored = finished_runs(out_dir)
    todo = [run for run in spec.runs
            if run.run_id not in stored or (retry_failed and stored[run.run_id] != "done")]
    write_spec(out_dir, spec.to_dict())
    done: list[str] = []
    errors: dict[str, str] = {}  # of the failed runs, in order
    bar = tqdm(total=len(todo), desc="sweep", unit="run", disable=not progress, dynamic_ncols=True)
    running = [0]

    def postfix() -> None:
        bar.set_postfix(done=len(done), failed=len(errors), running=running[0], refresh=False)

    def on_running(count: int) -> None:
        running[0] = count
        postfix()
        bar.refresh()

    def on_result(row: dict[str, Any], files: dict[str, bytes] | None) -> None:
        if files:
            write_checkpoint(out_dir, row["run_id"], files)
        write_row(out_dir, row)  # the commit point: after the checkpoint
        if row["status"] == "done":
            done.append(row["run_id"])
        else:
            errors[row["run_id"]] = row.get("error", "")
            last = (row.get("error") or "").strip().splitlines()[-1:] or ["?"]
            bar.write(f"run {row['run_id']} failed: {last[0]}", file=sys.stderr)
        postfix()
        bar.update(1)

    try:
        if todo:
            n_workers = min(workers or default_workers(), len(todo))
            trainer = choose_trainer(trainer, backend, todo)
            if trainer == "stacked" and backend == "serial":
                run_groups_serial(group_runs(todo), on_result, on_running, keep_models=keep_models)
            elif trainer == "stacked":
                run_groups_local(group_runs(todo), on_result, on_running, workers=n_workers, keep_models=keep_models)
            elif backend == "serial":
                run_serial(todo, on_result, on_running, keep_models=keep_models)
            elif backend == "local":
                run_local(todo, on_result, on_running, workers=n_workers, keep_models=keep_models)
            else:
                run_ray(todo, on_result, on_running, workers=workers, address=address, keep_models=keep_models)
    finally:
        bar.close()
    return SweepResult(out_dir=out_dir, n_runs=len(spec.runs), n_skipped=len(spec.runs) - len(todo),
                       done=tuple(done), failed=tuple(errors), errors=errors)
