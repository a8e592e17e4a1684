"""The capacity section of the results page, rendered from a committed sweep table (one row per run).

The table follows the sweep's row schema (``perm_circuits.sweep``): ``status``, ``d_model``, ``n_heads``,
``dropout``, ``seed``, ``recall_accuracy``, ``elimination_accuracy``, ``epoch_recall_99`` and one
``verdict_<how>`` column per ablation mode (modes discovered from the column names, never hard-coded).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from perm_circuits.survival import recall_by, time_to_recall

__all__ = [
    "CAPACITY_COLUMNS", "GROUP", "LEARNED", "SAMPLE_MARKS", "budget_comparison_markdown", "capacity_markdown",
    "capacity_numbers", "full_recipe_numbers", "load_capacity_table", "verdict_modes",
]

GROUP: tuple[str, ...] = ("d_model", "n_heads", "dropout")
"""One summary row per architecture and dropout."""

CAPACITY_COLUMNS: tuple[str, ...] = (
    *GROUP, "status", "seed", "recall_accuracy", "elimination_accuracy", "epoch_recall_99",
)
"""Columns the capacity section needs (besides the ``verdict_<how>`` columns)."""

LEARNED = 0.99
"""A run learns recall when its final recall accuracy is at least this."""

RECIPE: tuple[str, ...] = ("epochs", "samples", "batch_size", "lr", "early_stop", "repeat_ratio")
"""Training settings quoted above the table (each one's distinct values)."""

VERDICTS: tuple[str, ...] = ("holds", "fails", "open")


def read_sweep_table(path: str | os.PathLike, dtype: dict[str, type] | None = None) -> pd.DataFrame:
    """Read a committed sweep table (``.csv`` or ``.parquet``; one row per run)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or path, got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no sweep table at {str(path)!r}")
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return frame.astype(dtype) if dtype else frame
    if path.suffix == ".csv":
        return pd.read_csv(path, dtype=dtype)
    raise ValueError(f"sweep table must be .csv or .parquet, got {path.name!r}")


def check_sweep_frame(frame: object, required: Sequence[str]) -> None:
    """A sweep table: a non-empty DataFrame with the ``required`` columns and statuses done/failed."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"sweep table lacks column(s) {missing}; it has {list(frame.columns)}")
    if frame.empty:
        raise ValueError("sweep table has no rows")
    bad = sorted(set(frame["status"].astype(str)) - {"done", "failed"})
    if bad:
        raise ValueError(f"status must be 'done' or 'failed', got {bad}")


def load_capacity_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a sweep table (``.csv`` or ``.parquet``) and check it has the capacity columns."""
    frame = read_sweep_table(path)
    check_sweep_frame(frame, CAPACITY_COLUMNS)
    return frame


def verdict_modes(frame: pd.DataFrame) -> list[str]:
    """The ablation modes of the table's ``verdict_<how>`` columns, in column order."""
    return [c.removeprefix("verdict_") for c in frame.columns if c.startswith("verdict_")]


def format_number(value: float) -> str:
    """A table cell: ``"–"`` for nan, ``"3"`` for a whole number, else the shortest ``g`` form."""
    if isinstance(value, float) and math.isnan(value):
        return "–"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:g}"


def column_values(frame: pd.DataFrame, column: str) -> str:
    """The distinct values of ``frame[column]``, sorted and comma-separated (``"none"`` for missing)."""
    values = sorted({v for v in frame[column].tolist() if not (isinstance(v, float) and math.isnan(v))})
    if frame[column].isna().any():
        values.append("none")
    return ", ".join(format_number(v) if not isinstance(v, str) else v for v in values)


def _epochs(done: pd.DataFrame) -> str:
    reached = done["epoch_recall_99"].dropna()
    if reached.empty:
        return "never"
    text = f"{format_number(float(reached.median()))} [{format_number(float(reached.min()))}, {format_number(float(reached.max()))}]"
    return text if len(reached) == len(done) else f"{text} ({len(reached)} of {len(done)} runs)"


def _verdicts(done: pd.DataFrame, how: str) -> str:
    counts = done[f"verdict_{how}"].fillna("open").astype(str).value_counts()
    parts = [f"{counts.get(v, 0)} {v}" for v in VERDICTS if counts.get(v, 0)]
    parts += [f"{n} {v}" for v, n in counts.items() if v not in VERDICTS]
    return ", ".join(parts) if parts else "–"


def capacity_markdown(frame: pd.DataFrame) -> str:
    """The capacity tables as markdown: one row per (d_model, n_heads, dropout).

    Any other setting that varies in the table (``n_layers``, ``repeat_ratio``, ``epochs``,
    ``samples``, ``batch_size``, ``lr``, ``early_stop``) becomes a column of its own and splits the
    rows, so runs of different recipes are never pooled.

    Columns: runs done (and failed), seeds, how many done runs learn recall (final recall accuracy
    >= :data:`LEARNED`) as ``k/n``, the median and range of ``epoch_recall_99`` over the runs that
    reach it, the mean final elimination accuracy, and one column per ablation mode with the
    ``head_roles`` verdict counts (``holds`` / ``fails`` / ``open``).  A line above the table quotes
    the training recipe (each setting's distinct values).
    """
    check_sweep_frame(frame, CAPACITY_COLUMNS)
    modes = verdict_modes(frame)
    varying = [c for c in ("n_layers", *RECIPE) if c in frame.columns and frame[c].nunique(dropna=False) > 1]
    group = [*GROUP, *varying]
    header = ["d_model", "heads", "dropout", *varying, "runs done", "seeds", f"learn recall (>= {LEARNED:g})",
              "epoch recall >= 0.99: median [range]", "elimination accuracy (mean)"]
    header += [f"verdict ({how} ablation)" for how in modes]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, runs in frame.groupby(group, sort=True, dropna=False):
        done = runs[runs["status"] == "done"]
        failed = len(runs) - len(done)
        learned = int((done["recall_accuracy"] >= LEARNED).sum())
        cells = [format_number(float(v)) for v in key]
        cells.append(f"{len(done)}" + (f" ({failed} failed)" if failed else ""))
        cells.append(",".join(str(int(s)) for s in sorted(runs["seed"].unique())))
        cells.append(f"{learned}/{len(done)}" if len(done) else "–")
        cells.append(_epochs(done) if len(done) else "–")
        cells.append(f"{done['elimination_accuracy'].mean():.3f}" if len(done) else "–")
        cells += [_verdicts(done, how) if len(done) else "–" for how in modes]
        lines.append("| " + " | ".join(cells) + " |")
    n_done = int((frame["status"] == "done").sum())
    recipe = "; ".join(f"{c} {column_values(frame, c)}" for c in RECIPE if c in frame.columns)
    intro = (
        f"{len(frame)} runs ({n_done} done, {len(frame) - n_done} failed)"
        + (f"; recipe: {recipe}" if recipe else "")
        + ". A run learns recall when its final recall accuracy is at least "
        + f"{LEARNED:g}; the epoch columns count only the runs that reach it."
    )
    return intro + "\n\n" + "\n".join(lines) + "\n"


def _drop_key(dropout: float) -> str:
    return f"drop{round(100 * float(dropout))}"


def _role_counts(done: pd.DataFrame, how: str) -> str:
    """``"role-a + role-b: k, ..."``: each run's roles (heads in column order) under ``how``, counted."""
    columns = [c for c in done.columns if c.startswith(f"role_{how}_") and "MLP" not in c]
    if not columns or done.empty:
        return "none"
    combos = done[columns].fillna("?").astype(str).agg(" + ".join, axis=1).value_counts()
    return ", ".join(f"{combo}: {count}" for combo, count in combos.items())


def capacity_numbers(frame: pd.DataFrame, prefix: str = "capacity") -> dict[str, object]:
    """The numbers the results page quotes about the capacity sweep, as flat ``capacity.*`` keys.

    Per architecture (``capacity.d{d_model}h{n_heads}.drop{100 p}.*``): runs ``done``, how many
    ``learned`` recall (final recall accuracy >= :data:`LEARNED`), the median epoch at which those
    reach it, and the mean elimination accuracy.  Per dropout and head count, the totals over every
    width (``capacity.drop{100 p}.h{n}.learned`` / ``.done``) and the smallest width at which every
    seed learns recall (NaN if none); per dropout, the smallest width at which some seed learns it
    (``capacity.drop{100 p}.smallest_learning_width``, NaN if none).  Per ablation mode: verdict counts
    (``capacity.verdict.<how>.<holds|fails|open>``, and per head count ``capacity.h{n}.verdict.*``),
    the binding-head claim's statuses per head count (``capacity.h{n}.binding_head.<how>.<status>``),
    the runs where the study's binding-head claim
    is supported (``capacity.binding_supported.<how>``), and the runs where some head has the
    ``binder`` role (``capacity.binder_runs.<how>``); for the two-head runs that learn recall, each
    head-role combination and its count (``capacity.h2.recall.roles.<how>``).
    ``prefix`` replaces ``capacity`` in every key (e.g. ``capacity_full`` for the full-recipe table).
    """
    check_sweep_frame(frame, CAPACITY_COLUMNS)
    done = frame[frame["status"] == "done"]
    out: dict[str, object] = {
        f"{prefix}.runs": len(frame),
        f"{prefix}.done": len(done),
        f"{prefix}.failed": len(frame) - len(done),
        f"{prefix}.seeds": int(frame["seed"].nunique()),
    }
    for column in RECIPE:
        if column in frame.columns and frame[column].nunique() == 1:
            value = frame[column].iloc[0]
            out[f"{prefix}.recipe.{column}"] = value.item() if hasattr(value, "item") else value
    learned = done["recall_accuracy"] >= LEARNED
    for (d_model, n_heads, dropout), runs in done.groupby(list(GROUP)):
        key = f"{prefix}.d{int(d_model)}h{int(n_heads)}.{_drop_key(dropout)}"
        hit = runs["recall_accuracy"] >= LEARNED
        out[f"{key}.done"] = len(runs)
        out[f"{key}.learned"] = int(hit.sum())
        out[f"{key}.epoch_recall_99.median"] = float(runs.loc[hit, "epoch_recall_99"].median()) if hit.any() else math.nan
        out[f"{key}.elimination_accuracy"] = float(runs["elimination_accuracy"].mean())
    for (dropout, n_heads), runs in done.groupby(["dropout", "n_heads"]):
        key = f"{prefix}.{_drop_key(dropout)}.h{int(n_heads)}"
        out[f"{key}.done"] = len(runs)
        out[f"{key}.learned"] = int(learned[runs.index].sum())
        every = [int(d) for d, g in runs.groupby("d_model") if bool((g["recall_accuracy"] >= LEARNED).all())]
        out[f"{key}.smallest_all_learn"] = min(every) if every else math.nan
    for dropout, runs in done.groupby("dropout"):
        widths = sorted(int(d) for d, g in runs.groupby("d_model") if bool((g["recall_accuracy"] >= LEARNED).any()))
        out[f"{prefix}.{_drop_key(dropout)}.smallest_learning_width"] = widths[0] if widths else math.nan
        out[f"{prefix}.{_drop_key(dropout)}.done"] = len(runs)
        out[f"{prefix}.{_drop_key(dropout)}.learned"] = int(learned[runs.index].sum())
        out[f"{prefix}.{_drop_key(dropout)}.recall_accuracy.max"] = float(runs["recall_accuracy"].max())
        out[f"{prefix}.{_drop_key(dropout)}.elimination_accuracy.mean"] = float(runs["elimination_accuracy"].mean())
        out[f"{prefix}.{_drop_key(dropout)}.elimination_accuracy.min"] = float(runs["elimination_accuracy"].min())
    two_heads = done[(done["n_heads"] == 2) & learned]
    out[f"{prefix}.h2.recall.runs"] = len(two_heads)
    for how in verdict_modes(frame):
        counts = done[f"verdict_{how}"].fillna("open").astype(str).value_counts()
        for verdict in VERDICTS:
            out[f"{prefix}.verdict.{how}.{verdict}"] = int(counts.get(verdict, 0))
        for n_heads, runs in done.groupby("n_heads"):
            out[f"{prefix}.h{int(n_heads)}.done"] = len(runs)
            per_heads = runs[f"verdict_{how}"].fillna("open").astype(str).value_counts()
            for verdict in VERDICTS:
                out[f"{prefix}.h{int(n_heads)}.verdict.{how}.{verdict}"] = int(per_heads.get(verdict, 0))
            claim = f"claim_{how}_binding_head"
            if claim in runs and runs[claim].notna().any():
                for status, count in runs[claim].value_counts().items():
                    out[f"{prefix}.h{int(n_heads)}.binding_head.{how}.{status}"] = int(count)
        claim = f"claim_{how}_binding_head"
        out[f"{prefix}.binding_supported.{how}"] = int((done[claim] == "supported").sum()) if claim in done else 0
        roles = [c for c in done.columns if c.startswith(f"role_{how}_") and "MLP" not in c]
        out[f"{prefix}.binder_runs.{how}"] = int((done[roles] == "binder").any(axis=1).sum()) if roles else 0
        out[f"{prefix}.h2.recall.roles.{how}"] = _role_counts(two_heads, how)
    return out


SAMPLE_MARKS: tuple[int, ...] = (1_000_000, 2_500_000, 5_000_000)
"""Training sequences at which the comparison reads the time-to-recall curves (the cut budget, half
and all of the study's recipe)."""


def _samples(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "–"
    return f"{value / 1e6:.1f}M"


def budget_comparison_markdown(cut: pd.DataFrame, full: pd.DataFrame) -> str:
    """Markdown: the capacity grid at the cut budget and at the study's recipe, side by side.

    One row per (d_model, n_heads, dropout): at each budget how many finished seeds learn recall
    (final recall accuracy >= :data:`LEARNED`) as ``k/n``, the median training sequences to reach
    it (over the seeds that do), and, from the full-recipe table, the Kaplan-Meier share of seeds
    with recall by each of :data:`SAMPLE_MARKS` sequences (:func:`perm_circuits.survival.time_to_recall`;
    ``–`` past a configuration's budget).
    """
    check_sweep_frame(cut, CAPACITY_COLUMNS)
    check_sweep_frame(full, CAPACITY_COLUMNS)
    read = recall_by(time_to_recall(full), SAMPLE_MARKS).set_index(list(GROUP))
    header = ["d_model", "heads", "dropout", "cut budget: learn recall", "cut: median samples to recall",
              "study's recipe: runs done", "learn recall", "median samples to recall",
              *(f"share with recall by {_samples(float(n))}" for n in SAMPLE_MARKS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys = sorted(set(map(tuple, cut[list(GROUP)].to_numpy().tolist())) | set(map(tuple, full[list(GROUP)].to_numpy().tolist())))
    for key in keys:
        cells = [format_number(float(v)) for v in key]
        for frame in (cut, full):
            runs = frame[(frame[list(GROUP)] == pd.Series(key, index=list(GROUP))).all(axis=1) & (frame["status"] == "done")]
            hit = runs["recall_accuracy"] >= LEARNED
            if frame is full:
                cells.append(f"{len(runs)}")
            cells.append(f"{int(hit.sum())}/{len(runs)}" if len(runs) else "–")
            seen = runs.loc[hit, "epoch_recall_99"].astype(float) * runs.loc[hit, "samples"].astype(float)
            cells.append(_samples(float(seen.median())) if len(seen) else ("never" if len(runs) else "–"))
        index = tuple(float(v) for v in key)
        row = read.loc[index] if index in read.index else None
        cells += ["–" if row is None or math.isnan(row[f"by_{n}"]) else f"{row[f'by_{n}']:.0%}" for n in SAMPLE_MARKS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def full_recipe_numbers(
    full: pd.DataFrame, seeds: int = 5, architectures: int = 10,
    configurations: Sequence[tuple[float, float, float]] = (),
) -> dict[str, object]:
    """``capacity_full.*``: :func:`capacity_numbers` of the full-recipe table, plus the study's two claims judged.

    ``capacity_full.claim.d16h1_cannot_recall`` is ``"holds"`` when all ``seeds`` seeds of d16h1
    (dropout 0) finished and none learns recall, ``"fails"`` when any seed learns it, ``"open"``
    otherwise; ``capacity_full.claim.dropout_prevents_recall`` likewise over every dropout-0.1 run
    of the grid (``"holds"`` only once all ``architectures x seeds`` dropout runs have finished).
    ``capacity_full.core_hours`` sums the finished rows' own wall times (each run on one core) and
    ``capacity_full.wall_hours_2_workers`` halves it: the grid's wall time with two workers.
    Every ``(d_model, n_heads, dropout)`` of ``configurations`` (the grid) gets its ``.done`` and
    ``.learned`` counts, 0 for one that has no finished run yet, and each dropout value its totals.
    """
    numbers = capacity_numbers(full, prefix="capacity_full")
    for d_model, n_heads, dropout in configurations:
        key = f"capacity_full.d{int(d_model)}h{int(n_heads)}.{_drop_key(dropout)}"
        numbers.setdefault(f"{key}.done", 0)
        numbers.setdefault(f"{key}.learned", 0)
        for suffix in ("done", "learned"):
            numbers.setdefault(f"capacity_full.{_drop_key(dropout)}.{suffix}", 0)
        numbers.setdefault(f"capacity_full.{_drop_key(dropout)}.recall_accuracy.max", math.nan)
    done = full[full["status"] == "done"]
    d16 = done[(done["d_model"] == 16) & (done["n_heads"] == 1) & (done["dropout"] == 0)]
    learned = int((d16["recall_accuracy"] >= LEARNED).sum())
    numbers["capacity_full.claim.d16h1_cannot_recall"] = (
        "fails" if learned else ("holds" if len(d16) >= seeds else "open"))
    dropout = done[done["dropout"] > 0]
    learned = int((dropout["recall_accuracy"] >= LEARNED).sum())
    numbers["capacity_full.claim.dropout_prevents_recall"] = (
        "fails" if learned else ("holds" if len(dropout) >= architectures * seeds else "open"))
    seconds = float(done["wall_seconds"].sum()) if "wall_seconds" in done else math.nan
    numbers["capacity_full.core_hours"] = seconds / 3600  # training + analyses, one core per run
    numbers["capacity_full.wall_hours_2_workers"] = seconds / 3600 / 2
    numbers["capacity_full.samples_millions"] = float((done["epochs_run"] * done["samples"]).sum()) / 1e6
    numbers["capacity_full.budget_millions"] = float((done["epochs"] * done["samples"]).max()) / 1e6 if len(done) else math.nan
    return numbers
