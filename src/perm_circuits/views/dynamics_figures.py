"""The emergence figure: every signal of a training run on one log time axis, normalised.

Each signal of a :class:`~perm_circuits.dynamics.DynamicsRecord` is drawn as its change so far,
``(v(t) - v_0) / (v_final - v_0)`` (0 at the first recorded step, 1 at the last; a falling loss
rises too), so signals with different units share one axis, as in Hoogland et al. 2024 ("The
developmental landscape of in-context learning") and Olsson et al. 2022.  A marker on each curve
shows the step where it first crosses ``threshold`` (default half of its change):
:func:`~perm_circuits.dynamics.which_first` orders the signals by the same steps.  Flat signals are
drawn at 0, dashed, without a marker.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from perm_circuits.dynamics.emergence import normalised, which_first
from perm_circuits.dynamics.record import DynamicsRecord
from perm_circuits.views.figure_style import ELIMINATION_COLOR, MODEL_PALETTE, RECALL_COLOR, check_str, house_style

__all__ = ["emergence_figure"]

_FIXED_COLORS = {"elimination_accuracy": ELIMINATION_COLOR, "recall_accuracy": RECALL_COLOR, "test_loss": "#343a40"}


def emergence_figure(
    record: DynamicsRecord,
    signals: Sequence[str] | None = None,
    *,
    threshold: float = 0.5,
    title: str | None = None,
) -> go.Figure:
    """One line per signal (default: every signal of ``record``) against the step on a log axis,
    normalised to [0, 1] between its first and last value, with a marker at its crossing of
    ``threshold``.  Traces: the lines first (``name`` = signal, one per signal, in order), then
    one marker trace per crossing signal (``name`` = ``"{signal} crosses"``)."""
    if title is not None:
        check_str("title", title)
    order = which_first(record, signals, threshold)  # checks record, signals and threshold (once)
    names, threshold = record.signals if signals is None else tuple(signals), float(threshold)
    fig = go.Figure()
    colors = {}
    for index, name in enumerate(names):
        norm, first, last, status = normalised(record.series(name).tolist())
        color = colors[name] = _FIXED_COLORS.get(name, MODEL_PALETTE[index % len(MODEL_PALETTE)])
        fig.add_trace(
            go.Scatter(
                x=list(record.steps), y=norm, mode="lines", name=name, legendgroup=name,
                line={"color": color, "dash": "dash" if status != "ok" else "solid", "width": 2},
                customdata=record.series(name).tolist(),
                hovertemplate=f"{name}<br>step %{{x}}<br>normalised %{{y:.3f}}<br>value %{{customdata:.4g}}<extra></extra>",
            )
        )
    for crossing in order.crossings:
        if crossing.step is None:
            continue
        norm, *_ = normalised(record.series(crossing.signal).tolist())
        y = norm[record.steps.index(crossing.step)]
        fig.add_trace(
            go.Scatter(
                x=[crossing.step], y=[y], mode="markers", name=f"{crossing.signal} crosses",
                legendgroup=crossing.signal, showlegend=False,
                marker={"color": colors[crossing.signal], "size": 10, "symbol": "diamond",
                        "line": {"width": 1, "color": "white"}},
                hovertemplate=f"{crossing.signal} crosses {threshold:g} at step {crossing.step} "
                              f"(rank {crossing.rank})<extra></extra>",
            )
        )
    fig.add_hline(y=threshold, line={"color": "#adb5bd", "dash": "dot", "width": 1})
    fig.update_xaxes(type="log")
    fig.update_yaxes(range=[-0.1, 1.15])
    model = record.settings.get("model") or "model"
    default_title = f"{model}: emergence of each signal (normalised change; diamonds: first crossing of {threshold:g})"
    return house_style(fig, title or default_title, x_title="optimiser step (log)",
        y_title="change so far (0 = first, 1 = last value)", height=520)
