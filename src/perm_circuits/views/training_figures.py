"""Training figures: metrics over epochs, memory-recall probes over training."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perm_circuits.train import TrainingHistory
from perm_circuits.views.figure_style import (
    BAYES_COLOR,
    BAYES_TRAIN_COLOR,
    ELIMINATION_COLOR,
    MODEL_PALETTE,
    RECALL_COLOR,
    check_str,
    frame_of,
    house_style,
    require_columns,
)

__all__ = ["DEFAULT_CURVES", "probe_curves", "training_curves"]

DEFAULT_CURVES: tuple[str, ...] = ("test_loss", "elimination_accuracy", "recall_accuracy", "probe_p4", "probe_p1")

_CURVE_COLORS = {
    "elimination_accuracy": ELIMINATION_COLOR,
    "recall_accuracy": RECALL_COLOR,
    "probe_p1": ELIMINATION_COLOR,
    "probe_p4": RECALL_COLOR,
    "test_loss": BAYES_COLOR,
    "train_loss": BAYES_TRAIN_COLOR,
}

_PANEL_TITLES = {
    "loss": "cross-entropy (nats)",
    "accuracy": "accuracy",
    "probe": "probe P(y=v)",
    "other": "value",
}


def _epoch_frame(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """``frame`` with ``epoch`` as a column (taken from the index if it is named so)."""
    if "epoch" not in frame.columns:
        if frame.index.name != "epoch":
            raise ValueError(f"{name} needs an 'epoch' column or index; columns: {list(frame.columns)}")
        frame = frame.reset_index()
    return frame.sort_values("epoch", kind="stable")


def _epoch_line(epochs: pd.Series, values: pd.Series, name: str, line: dict) -> go.Scatter:
    """One curve over epochs, hover ``epoch e<br>name = value``."""
    return go.Scatter(x=epochs, y=values.astype(float), name=name, mode="lines+markers", marker={"size": 5}, line=line,
                      hovertemplate=f"epoch %{{x}}<br>{name} = %{{y:.4f}}<extra></extra>")


def _panel(column: str) -> str:
    if "loss" in column:
        return "loss"
    if column.startswith("probe"):
        return "probe"
    if "accuracy" in column:
        return "accuracy"
    return "other"


def training_curves(
    history: TrainingHistory | pd.DataFrame,
    columns: Sequence[str] = DEFAULT_CURVES,
    *,
    title: str = "Training curves",
) -> go.Figure:
    """Metrics over epochs from :meth:`TrainingHistory.to_dataframe` (one panel per kind).

    Panels, top to bottom, as present in ``columns``: losses, accuracies, probe probabilities
    (``probe_p4`` = recall answer, ``probe_p1`` = elimination trap), then anything else.
    Elimination curves are blue and recall curves orange.
    """
    if isinstance(history, TrainingHistory):
        frame = history.to_dataframe()
        if frame.empty:
            raise ValueError("history has no epochs")
    else:
        frame = frame_of(history, "history")
    frame = _epoch_frame(frame, "history")
    if isinstance(columns, str) or not columns or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"columns must be a non-empty list of column names, got {columns!r}")
    require_columns(frame, list(columns), "history")
    check_str("title", title)
    panels = [p for p in ("loss", "accuracy", "probe", "other") if any(_panel(c) == p for c in columns)]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    others = iter(MODEL_PALETTE * 4)
    for column in columns:
        row = panels.index(_panel(column)) + 1
        color = _CURVE_COLORS.get(column) or next(others)
        line = {"color": color, "dash": "dot" if column.startswith("probe") else None}
        fig.add_trace(_epoch_line(frame["epoch"], frame[column], column, line), row=row, col=1)
    for row, panel in enumerate(panels, start=1):
        fig.update_yaxes(title_text=_PANEL_TITLES[panel], row=row, col=1)
        if panel in ("accuracy", "probe"):
            fig.update_yaxes(range=[-0.03, 1.03], row=row, col=1)
    fig.update_xaxes(title_text="epoch", row=len(panels), col=1)
    return house_style(fig, title, height=160 + 260 * len(panels), width=900)


def probe_curves(frame: pd.DataFrame, *, title: str = "Memory-recall probes over training") -> go.Figure:
    """Probe values over training: one line per probe.

    ``frame`` is wide (an ``epoch`` column or index and one numeric column per probe) or the
    tidy frame of :class:`perm_circuits.analysis.probes.memory.MemoryProbeTracker` (columns ``epoch``,
    ``component``, ``map``, ``recall``, optionally ``circuit`` and ``mode``), which is pivoted to
    one line per ``component circuit map`` (mode appended when a probe has several).
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
    if frame.empty:
        raise ValueError("frame has no rows")
    check_str("title", title)
    frame = _epoch_frame(frame, "frame")
    tidy = {"component", "map", "recall"} <= set(frame.columns)
    if tidy:
        keys = ["component", "circuit", "map"] if "circuit" in frame.columns else ["component", "map"]
        if "mode" in frame.columns and frame.groupby(keys)["mode"].nunique().gt(1).any():
            keys.append("mode")
        names = frame[keys].astype(str).agg(" ".join, axis=1)
        if frame.assign(_probe=names).duplicated(["epoch", "_probe"]).any():
            raise ValueError("frame has several rows per (epoch, probe)")
        wide = frame.assign(_probe=names).pivot(index="epoch", columns="_probe", values="recall")
        wide = wide[list(pd.unique(names))].reset_index()
        y_title = "recall R"
    else:
        wide = frame
        y_title = "probe value"
    probes = [c for c in wide.columns if c != "epoch"]
    if not probes:
        raise ValueError("frame has no probe columns besides 'epoch'")
    bad = [c for c in probes if pd.api.types.is_bool_dtype(wide[c]) or not pd.api.types.is_numeric_dtype(wide[c])]
    if bad:
        raise TypeError(f"probe columns must be numeric; not numeric: {bad}")
    fig = go.Figure()
    for index, probe in enumerate(probes):
        line = {"color": MODEL_PALETTE[index % len(MODEL_PALETTE)],
                "dash": ("solid", "dash", "dot")[index // len(MODEL_PALETTE) % 3]}
        fig.add_trace(_epoch_line(wide["epoch"], wide[probe], str(probe), line))
    return house_style(fig, title, x_title="epoch", y_title=y_title, height=480, width=900)
