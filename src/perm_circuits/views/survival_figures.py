"""The time-to-recall figure: per configuration, the share of seeds that have learned recall by N samples.

Draws the curves :func:`perm_circuits.survival.time_to_recall` computes (Kaplan-Meier,
censored at the training budget): one panel per dropout value, one step line per (d_model,
n_heads), x = training sequences seen (log scale), y = fraction of seeds with recall >= 0.99.
A line ends at its budget; a cross there marks seeds censored without recall.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perm_circuits.views.figure_style import house_style
from perm_circuits.views.figures import MODEL_PALETTE

__all__ = ["time_to_recall_figure"]


def time_to_recall_figure(curves: pd.DataFrame, *, marks: Sequence[float] = ()) -> go.Figure:
    """Step curves of ``curves`` (:func:`~perm_circuits.survival.time_to_recall`'s table).

    ``marks`` draws dotted vertical lines at chosen sample counts (e.g. a cut budget).
    """
    if not isinstance(curves, pd.DataFrame) or not {"samples_seen", "learned", "dropout"} <= set(curves.columns):
        raise TypeError("curves must be the table perm_circuits.survival.time_to_recall returns")
    if curves.empty:
        raise ValueError("curves has no rows: nothing to draw")
    fixed = ("d_model", "n_heads", "dropout")
    stats = ("samples_seen", "learned", "events", "at_risk", "censored", "seeds", "budget")
    others = [c for c in curves.columns if c not in (*fixed, *stats)]
    dropouts = sorted(curves["dropout"].unique())
    fig = make_subplots(rows=1, cols=len(dropouts), shared_yaxes=True,
                        subplot_titles=[f"dropout {p:g}" for p in dropouts])
    keys = ["d_model", "n_heads", *others]
    configs = curves[keys].drop_duplicates().sort_values(keys)
    colors = {tuple(row): MODEL_PALETTE[i % len(MODEL_PALETTE)] for i, row in enumerate(configs.itertuples(index=False))}
    for col, dropout in enumerate(dropouts, start=1):
        panel = curves[curves["dropout"] == dropout]
        for key, curve in panel.groupby(keys, sort=True):
            d_model, n_heads, *values = key
            name = f"d{int(d_model)} h{int(n_heads)}" + "".join(f", {a}={v:g}" for a, v in zip(others, values))
            x = curve["samples_seen"].clip(lower=1.0).tolist()
            y = curve["learned"].tolist()
            budget = float(curve["budget"].iloc[0])
            if x[-1] < budget:  # carry the last level to the end of the budget
                x, y = [*x, budget], [*y, y[-1]]
            hover = [f"{name}: {v:.0%} of {int(curve['seeds'].iloc[0])} seeds by {n:,.0f} samples" for n, v in zip(x, y)]
            color = colors[tuple(key)]
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv", "color": color, "width": 2},
                name=name, legendgroup=name, showlegend=col == 1, hovertext=hover, hoverinfo="text"), row=1, col=col)
            censored = int(curve["censored"].sum())
            if censored:
                fig.add_trace(go.Scatter(x=[budget], y=[y[-1]], mode="markers", marker={"symbol": "x", "color": color},
                                         name=f"{name}: {censored} censored", legendgroup=name, showlegend=False,
                                         hovertext=[f"{name}: {censored} seed(s) without recall at the budget"],
                                         hoverinfo="text"), row=1, col=col)
        for mark in marks:
            fig.add_vline(x=float(mark), line={"dash": "dot", "width": 1, "color": "#868e96"}, row=1, col=col)
    fig.update_xaxes(type="log")
    fig.update_yaxes(range=[-0.03, 1.03], tickformat=".0%")
    return house_style(fig, "Time to recall: share of seeds with recall >= 0.99 by N training sequences",
                  x_title="training sequences seen (log)", y_title="seeds that learned recall",
                  height=460, width=max(760, 430 * len(dropouts)))
