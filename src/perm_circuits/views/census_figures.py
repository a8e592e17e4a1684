"""The sweep report's census section: mechanism-class frequencies (a table) and their formation over training
(a plotly figure), drawn from a :class:`~perm_circuits.census.summary.CensusSummary` (computed by
:mod:`perm_circuits.census.summary`; nothing here classifies a row or runs a model)."""

from __future__ import annotations

import html as _html

import plotly.graph_objects as go

__all__ = ["census_counts_html", "formation_figure"]


def census_counts_html(summary) -> str:
    """The class frequencies per configuration, with 95% Wilson intervals, as an HTML table."""
    head = "".join(f"<th>{h}</th>" for h in ("config", "class", "runs", "share", "95% Wilson interval"))
    body = "".join(
        f"<tr><td>{_html.escape(str(r.config))}</td><td>{_html.escape(str(r[1]))}</td><td>{r.k} / {r.n}</td>"
        f"<td>{100 * r.share:.0f}%</td><td>[{100 * r.low:.0f}%, {100 * r.high:.0f}%]</td></tr>"
        for r in summary.counts.itertuples(index=False))
    return (f"<p>Mechanism classes (rule: <code>perm_circuits.census.classes</code>; {summary.how} ablation, "
            f"reference: {summary.reference}), each run counted once at its last fingerprinted epoch.</p>"
            f'<table class="pc-table"><tr>{head}</tr>{body}</table>')


def formation_figure(summary) -> go.Figure:
    """The share of runs in each class at each fingerprinted epoch, one line per (config, class), epoch on a log axis."""
    fig = go.Figure()
    for (config, name), group in summary.formation.groupby(["config", "class"], sort=True):
        group = group.sort_values("epoch")
        fig.add_trace(go.Scatter(x=group["epoch"], y=group["share"], mode="lines+markers", name=f"{config}: {name}",
                                 customdata=group["n"], hovertemplate="epoch %{x}: %{y:.0%} of %{customdata} runs"))
    fig.update_layout(title="When each mechanism class forms", xaxis_title="epoch (log)", yaxis_title="share of runs",
                      xaxis_type="log", yaxis_tickformat=".0%", yaxis_range=[0, 1.05], height=420)
    return fig
