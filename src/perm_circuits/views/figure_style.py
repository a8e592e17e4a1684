"""The house style shared by every plotly figure: colors, layout, input checks, position labels.

Elimination is always drawn in :data:`ELIMINATION_COLOR` and recall in :data:`RECALL_COLOR`; the
model's own distribution in :data:`MODEL_COLOR` and the exact Bayesian posterior in
:data:`BAYES_COLOR` (uniform prior) / :data:`BAYES_TRAIN_COLOR` (train prior).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import pandas as pd
import plotly.graph_objects as go

from perm_circuits.analysis.figure_results import format_sequence  # noqa: F401  (the views import it from here)
from perm_circuits.checks import check_int, check_str  # noqa: F401  (the views import check_str from here)

__all__ = [
    "BAYES_COLOR",
    "BAYES_TRAIN_COLOR",
    "ELIMINATION_COLOR",
    "MODEL_COLOR",
    "MODEL_PALETTE",
    "NEUTRAL_COLORS",
    "RECALL_COLOR",
    "Tabular",
    "position_labels",
]

ELIMINATION_COLOR = "#1c7ed6"
"""Blue: elimination (the elimination head, elimination accuracy, the trap answer 1)."""
RECALL_COLOR = "#e8590c"
"""Orange: recall (the recall head, recall accuracy, the recall answer 4)."""
MODEL_COLOR = "#7048e8"
BAYES_COLOR = "#343a40"
BAYES_TRAIN_COLOR = "#a5abb3"
NEUTRAL_COLORS = ("#ced4da", "#adb5bd", "#868e96")
MODEL_PALETTE = ("#7048e8", "#2f9e44", "#c2255c", "#0c8599", "#862e9c", "#5c940d", "#495057")
"""Per-model colors when several models share a figure (no blue/orange: those mean elim/recall)."""


@runtime_checkable
class Tabular(Protocol):
    """An analysis result: anything with ``to_dataframe()`` (the analyses' frozen dataclasses)."""

    def to_dataframe(self) -> pd.DataFrame: ...


def house_style(
    fig: go.Figure,
    title: str,
    *,
    x_title: str | None = None,
    y_title: str | None = None,
    height: int | None = None,
    width: int | None = None,
) -> go.Figure:
    """The house style: white template, left-aligned title, readable hover labels."""
    fig.update_layout(
        template="plotly_white",
        title={"text": title, "x": 0.01, "xanchor": "left"},
        font={"size": 12},
        hoverlabel={"namelength": -1},
        margin={"t": 100, "l": 80, "r": 30, "b": 130},
        legend={
            "orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.01, "x": 0.5, "xanchor": "center"
        },
        height=height,  # None: left unset
        width=width,
    )
    if x_title is not None:
        fig.update_xaxes(title_text=x_title)
    if y_title is not None:
        fig.update_yaxes(title_text=y_title)
    return fig


def is_model(item: object) -> bool:
    """Whether ``item`` is a hooked model (has ``cfg`` and ``hook_dict`` and is callable)."""
    return hasattr(item, "cfg") and hasattr(item, "hook_dict") and callable(item)


def check_result(name: str, value: object, kind: type, computed_by: str) -> None:
    """TypeError unless ``value`` is a ``kind`` result (a view draws computed results; ``computed_by``
    says which analysis computes it)."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__} (computed by {computed_by}), got {type(value).__name__}")


def check_model(model: object) -> None:
    """TypeError unless ``model`` is a hooked model (:func:`is_model`)."""
    if not is_model(model):
        raise TypeError(
            f"model must be a TransformerBridge from perm_circuits.build_model/load_pretrained, "
            f"got {type(model).__name__}"
        )


def frame_of(result: object, name: str) -> pd.DataFrame:
    """A DataFrame, or an analysis result's ``to_dataframe()`` (a copy either way)."""
    if isinstance(result, pd.DataFrame):
        frame = result.copy()
    elif callable(getattr(result, "to_dataframe", None)):
        frame = result.to_dataframe()
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"{name}.to_dataframe() returned {type(frame).__name__}, expected a DataFrame")
    else:
        raise TypeError(
            f"{name} must be an analysis result with to_dataframe() or a pandas DataFrame, "
            f"got {type(result).__name__}"
        )
    if frame.empty:
        raise ValueError(f"{name} has no rows")
    return frame


def require_columns(frame: pd.DataFrame, columns: Sequence[str], name: str) -> None:
    """ValueError naming the missing ones unless ``frame`` has every column in ``columns``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} has no column(s) {missing}; available: {list(frame.columns)}")


def position_labels(n_positions: int) -> list[str]:
    """Role labels of the sequence positions: ``["0: x1", "1: y1", "2: x2", ...]``."""
    check_int("n_positions", n_positions, low=1)
    return [position_label(p) for p in range(n_positions)]


def position_label(position: int) -> str:
    """``"2: x2"``: a sequence position and the token role it holds (x at even, y at odd positions)."""
    return f"{position}: {'x' if position % 2 == 0 else 'y'}{position // 2 + 1}"
