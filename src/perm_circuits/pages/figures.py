"""The docs site's figures, rendered as static SVG from the committed result tables.

``scripts/build_results.py`` writes them into ``docs/figures/`` with the pages' numbers, so a page
and its pictures always come from the same tables:

* ``phase_cut.svg`` / ``phase_full.svg``: the share of seeds that learn recall (final recall
  accuracy >= 0.99) over d_model x heads, one panel per dropout (cut budget, study's recipe);
* ``time_to_recall.svg``: the Kaplan-Meier share of seeds with recall by N training sequences
  (:mod:`perm_circuits.survival`), both budgets;
* ``study_dynamics.svg``: the shipped d32h2 recipe's training run (elimination, recall, and the
  head signals that form first), from ``results/study_dynamics.csv``;
* ``generalisation.svg``: the share of seeds whose recall generalises to every repeated x_k, over
  d_model x heads, one panel per layer count and training distribution, from
  ``results/generalisation_sweep.csv`` (the general recall page).

The seed-paper pages' figures are in :mod:`perm_circuits.pages.paper_figures`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from perm_circuits.pages.capacity import LEARNED
from perm_circuits.pages.generalisation import generalises
from perm_circuits.survival import time_to_recall
from perm_circuits.views.svg_charts import PALETTE, Series, svg_heatmaps, svg_line_chart

__all__ = ["FIGURES_DIR", "docs_figures", "dynamics_svg", "generalisation_svg", "phase_svg", "time_to_recall_svg"]

FIGURES_DIR = Path("docs/figures")
DYNAMICS_SIGNALS: tuple[str, ...] = ("elimination_accuracy", "recall_accuracy", "L0H0.QK.x_match", "L0H1.OV.suppress")
"""The study run's signals drawn in ``study_dynamics.svg`` (each rescaled to [0, 1] over the run)."""


def _share_panel(title: str, runs: pd.DataFrame, hit: pd.Series, widths: list, heads: list) -> tuple:
    """A heatmap panel over (heads, d_model): each cell's share of ``runs`` with ``hit``, noted ``hits/runs``."""
    cells = []
    for n_heads in heads:
        row = []
        for d_model in widths:
            cell = runs[(runs["d_model"] == d_model) & (runs["n_heads"] == n_heads)]
            hits = int(hit[cell.index].sum())
            row.append((hits / len(cell) if len(cell) else math.nan, f"{hits}/{len(cell)}" if len(cell) else "–"))
        cells.append(row)
    return title, [f"d{int(d)}" for d in widths], [f"{int(h)} head" + ("s" if h > 1 else "") for h in heads], cells


def phase_svg(frame: pd.DataFrame, title: str, grid: pd.DataFrame | None = None) -> str:
    """Share of finished seeds learning recall per (d_model, heads), one panel per dropout.

    The axes are those of ``grid`` (default ``frame``), so a partial table still shows every cell
    of its grid (grey where no run has finished).
    """
    done = frame[frame["status"] == "done"]
    axes = frame if grid is None else grid
    widths, heads = sorted(axes["d_model"].unique()), sorted(axes["n_heads"].unique())
    hit = done["recall_accuracy"] >= LEARNED
    panels = [_share_panel(f"dropout {dropout:g}", done[done["dropout"] == dropout], hit, widths, heads)
              for dropout in sorted(axes["dropout"].unique())]
    return svg_heatmaps(panels, title=title, x_label="d_model", y_label="heads")


def time_to_recall_svg(tables: dict[str, pd.DataFrame]) -> str:
    """Kaplan-Meier time-to-recall curves of each table (solid: dropout 0, dashed: dropout > 0).

    Only configurations where some seed learns recall are drawn (the others stay at 0 up to their
    budget and are listed in the pages' tables).
    """
    series = []
    colors: dict[tuple[int, int], str] = {}
    for label, frame in tables.items():
        curves = time_to_recall(frame)
        for (d_model, n_heads, dropout), curve in curves.groupby(["d_model", "n_heads", "dropout"], sort=True):
            if curve["learned"].max() <= 0:
                continue
            key = (int(d_model), int(n_heads))
            color = colors.setdefault(key, PALETTE[len(colors) % len(PALETTE)])
            x = curve["samples_seen"].clip(lower=1e4).tolist()
            y = curve["learned"].tolist()
            budget = float(curve["budget"].iloc[0])
            if x[-1] < budget:
                x, y = [*x, budget], [*y, y[-1]]
            series.append(Series(f"d{key[0]}h{key[1]} p{dropout:g} ({label})", x, y, color=color, step=True,
                                 dash=label != list(tables)[-1]))
    if not series:
        series.append(Series("no configuration learns recall", [1e4, 1e6], [0.0, 0.0], color="#adb5bd"))
    return svg_line_chart(series, title="Time to recall: share of seeds with recall >= 0.99 by N sequences",
                          x_label="training sequences seen (log)", y_label="seeds with recall",
                          x_log=True, y_range=(0.0, 1.0), y_percent=True, width=820)


def dynamics_svg(frame: pd.DataFrame) -> str:
    """The study run's signals over training steps, each rescaled to its own [min, max] over the run."""
    series = []
    for signal in DYNAMICS_SIGNALS:
        rows = frame[frame["signal"] == signal].sort_values("step")
        if rows.empty:
            continue
        values = rows["value"].astype(float)
        low, high = float(values.min()), float(values.max())
        scaled = ((values - low) / (high - low) if high > low else values * 0).tolist()
        series.append(Series(signal, rows["step"].astype(float).tolist(), scaled))
    return svg_line_chart(series, title="d32h2 recipe (seed 0): which signal moves first",
                          x_label="training step (log)", y_label="signal, rescaled to [0, 1]",
                          x_log=True, y_range=(0.0, 1.0), width=820)


def generalisation_svg(frame: pd.DataFrame) -> str:
    """Share of finished seeds that generalise (recall >= 0.99 for every repeated x_k,
    :func:`~perm_circuits.pages.generalisation.generalises`) per (d_model, heads), one panel per
    (layers, training distribution); each cell is annotated ``generalising/finished``."""
    ok = generalises(frame)
    done = frame["status"] == "done"
    widths, heads = sorted(frame["d_model"].unique()), sorted(frame["n_heads"].unique())
    panels = []
    for (n_layers, sources), group in frame.groupby(["n_layers", "repeat_sources"], sort=True):
        trained = "x1 only" if str(sources) == "1" else ("every x_k" if str(sources) == "1,2,3,4" else f"x in {sources}")
        panels.append(_share_panel(f"{int(n_layers)}L, repeats {trained}", group[done[group.index]], ok, widths, heads))
    return svg_heatmaps(panels, title="Seeds whose recall generalises to every repeated x_k (>= 0.99)",
                        x_label="d_model", y_label="heads")


def docs_figures(cut: pd.DataFrame, full: pd.DataFrame, dynamics: pd.DataFrame | None) -> dict[Path, str]:
    """Every docs figure as ``{path under the repository: SVG text}``."""
    figures = {
        FIGURES_DIR / "phase_cut.svg": phase_svg(cut, "Seeds that learn recall, cut budget"),
        FIGURES_DIR / "phase_full.svg": phase_svg(full, "Seeds that learn recall, study's recipe (finished runs)", grid=cut),
        FIGURES_DIR / "time_to_recall.svg": time_to_recall_svg({"cut budget": cut, "study's recipe": full}),
    }
    if dynamics is not None:
        figures[FIGURES_DIR / "study_dynamics.svg"] = dynamics_svg(dynamics)
    return figures
