"""Figures of the analyses' result tables: generic and ablation / patching heatmaps, the FFN neuron table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perm_circuits.views.figure_style import (
    Tabular,
    check_str,
    frame_of,
    house_style,
    position_label,
    require_columns,
)

__all__ = ["FFN_COLUMNS", "ablation_heatmap", "ffn_table", "heatmap", "patching_heatmap"]

FFN_COLUMNS: tuple[str, ...] = (
    "neuron", "live", "value_top", "value_bottom", "agreement", "top1_agrees", "top1_agreement", "top_pattern",
    "top_pattern_share", "top_query", "n_triggers", "fires_on_repeated", "recall_agreement", "trap_agreement",
    "max_activation",
)

_FFN_HEADERS = {  # column -> table header, where they differ
    "value_top": "value top token",
    "value_bottom": "value bottom token",
    "top1_agrees": "top-1 agrees",
    "top1_agreement": "top-1 agreement",
    "top_pattern": "top trigger pattern",
    "top_pattern_share": "pattern share",
    "top_query": "top query x",
    "n_triggers": "# triggers",
    "fires_on_repeated": "fires on repeat",
    "recall_agreement": "recall agreement",
    "trap_agreement": "trap agreement",
    "max_activation": "max activation",
}


def _categories(series: pd.Series) -> list:
    """Axis order: sorted for numbers, first appearance otherwise."""
    values = list(pd.unique(series))
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        return sorted(values)
    return values


def _label(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _heatmap_trace(
    frame: pd.DataFrame,
    x: str,
    y: str,
    value: str,
    *,
    hover_columns: Sequence[str] = (),
    text_format: str = ".2f",
    x_order: Sequence[Any] | None = None,
    y_order: Sequence[Any] | None = None,
    **heatmap_kwargs: Any,
) -> go.Heatmap:
    """A tidy frame (one row per cell) as a heatmap; cells without a row stay blank."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
    for name, column in (("x", x), ("y", y), ("value", value)):
        check_str(name, column)
    if isinstance(hover_columns, str) or not all(isinstance(c, str) for c in hover_columns):
        raise TypeError(f"hover_columns must be a list of column names, got {hover_columns!r}")
    if len({x, y, value}) != 3:
        raise ValueError(f"x, y and value must be three different columns, got {x!r}, {y!r}, {value!r}")
    require_columns(frame, [x, y, value, *hover_columns], "frame")
    if frame.empty:
        raise ValueError("frame has no rows")
    column = frame[value]
    if pd.api.types.is_bool_dtype(column) or not pd.api.types.is_numeric_dtype(column):
        raise TypeError(f"value column {value!r} must be numeric, got dtype {column.dtype}")
    for axis in (x, y):
        if frame[axis].isna().any():
            raise ValueError(f"column {axis!r} has missing values; every row needs an {axis} label")
    duplicated = frame.duplicated([x, y], keep=False)
    if duplicated.any():
        first = frame.loc[duplicated, [x, y]].iloc[0].tolist()
        raise ValueError(
            f"frame has {int(duplicated.sum())} rows sharing ({x}, {y}) cells, e.g. {first}; "
            "filter or aggregate to one row per cell first"
        )
    xs = _categories(frame[x]) if x_order is None else list(x_order)
    ys = _categories(frame[y]) if y_order is None else list(y_order)
    cells = {(row_x, row_y): i for i, (row_x, row_y) in enumerate(zip(frame[x], frame[y]))}
    values = column.to_numpy(dtype=float)
    z = [[values[cells[(cx, cy)]] if (cx, cy) in cells else math.nan for cx in xs] for cy in ys]
    hover = f"{x}: %{{x}}<br>{y}: %{{y}}<br>{value}: %{{z:.4f}}"
    customdata = None
    if hover_columns:
        extra = frame[list(hover_columns)].to_numpy(dtype=object)
        customdata = [[extra[cells[(cx, cy)]] if (cx, cy) in cells else [None] * len(hover_columns)
                       for cx in xs] for cy in ys]
        hover += "".join(f"<br>{c}: %{{customdata[{i}]}}" for i, c in enumerate(hover_columns))
    return go.Heatmap(z=z, x=[_label(v) for v in xs], y=[_label(v) for v in ys], customdata=customdata,
        texttemplate=f"%{{z:{text_format}}}", hovertemplate=hover + "<extra></extra>", hoverongaps=False, name=value,
        **heatmap_kwargs)


def heatmap(
    frame: pd.DataFrame,
    x: str,
    y: str,
    value: str,
    title: str,
    *,
    colorscale: str = "Viridis",
    zmin: float | None = None,
    zmax: float | None = None,
    zmid: float | None = None,
    hover_columns: Sequence[str] = (),
    text_format: str = ".2f",
) -> go.Figure:
    """A tidy DataFrame (one row per cell) as a heatmap: ``frame[value]`` at (``x``, ``y``).

    Numeric axes are sorted, others keep first-appearance order (first row at the top); each
    cell shows its value; hover shows the three columns plus ``hover_columns``.  Used for
    ablation tables (component x mode -> accuracy) and patching results (head x source
    position -> normalised effect).

    Raises:
        ValueError: missing columns, an empty frame, missing labels, or several rows per cell.
        TypeError: a non-numeric value column.
    """
    check_str("title", title)
    trace = _heatmap_trace(frame, x, y, value, hover_columns=hover_columns, text_format=text_format,
        colorscale=colorscale, zmin=zmin, zmax=zmax, zmid=zmid, colorbar={"title": {"text": value}})
    fig = go.Figure(trace)
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category", autorange="reversed")
    return house_style(fig, title, x_title=x, y_title=y, height=max(380, 160 + 36 * len(trace.y)),
                  width=max(520, 260 + 70 * len(trace.x)))


def ablation_heatmap(
    table: Tabular | pd.DataFrame,
    value: str | Sequence[str] | None = None,
    *,
    x: str = "how",
    y: str = "component",
    title: str | None = None,
) -> go.Figure:
    """An ablation table as heatmaps: component x ablation mode -> metric, one panel per metric.

    ``table`` is :class:`perm_circuits.analysis.interventions.ablation.AblationTable` (or its tidy
    ``to_dataframe()``: columns ``component``, ``how``, ``layer``, ``head``, the table's metrics
    (the study's ``elimination_accuracy``, ``recall_accuracy``, ``early_mae_train``...), ``test_loss``
    and ``delta_<metric>``).  ``value``: the columns to draw; default the table's metrics whose
    name has ``"accuracy"`` (else its :attr:`~perm_circuits.analysis.interventions.ablation.AblationTable.primary_metric`),
    on a bare frame ``("elimination_accuracy", "recall_accuracy")``.  The unablated baseline row
    (``component == "none"``) is left out of the grid and quoted in the panel title.
    Accuracy panels share one 0..1 color scale.
    """
    frame = frame_of(table, "table")
    if value is None:
        names = getattr(table, "metric_names", None)
        value = ([m for m in names if "accuracy" in m] or [table.primary_metric] if names
                 else ("elimination_accuracy", "recall_accuracy"))
    values = [value] if isinstance(value, str) else list(value)
    if not values or not all(isinstance(v, str) for v in values):
        raise TypeError(f"value must be a column name or a list of them, got {value!r}")
    require_columns(frame, [x, y, *values], "table")
    baseline = frame[frame[y] == "none"]
    grid = frame[frame[y] != "none"]
    if grid.empty:
        raise ValueError("table has only the baseline row")
    model_name = getattr(table, "model_name", None)
    accuracy = all("accuracy" in v for v in values)
    titles = [v + (f" (baseline {float(baseline[v].iloc[0]):.3f})" if len(baseline) else "") for v in values]
    fig = make_subplots(rows=1, cols=len(values), subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.06)
    for col, v in enumerate(values, start=1):
        shared = {"coloraxis": "coloraxis"} if accuracy else {"colorscale": "Viridis", "showscale": False}
        fig.add_trace(_heatmap_trace(grid, x, y, v, text_format=".3f", **shared), row=1, col=col)
        fig.update_xaxes(title_text=x, type="category", row=1, col=col)
    if accuracy:
        fig.update_layout(coloraxis={"colorscale": "Viridis", "cmin": 0.0, "cmax": 1.0,
                                     "colorbar": {"title": {"text": "accuracy"}}})
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_yaxes(title_text=y, row=1, col=1)
    if title is None:
        title = f"{model_name + ': ' if model_name else ''}metrics with each component ablated"
    check_str("title", title)
    n_y = grid[y].nunique()
    return house_style(fig, title, height=max(380, 180 + 40 * n_y), width=max(560, 200 + 330 * len(values)))


def _component_label(row: pd.Series, with_activation: bool) -> str:
    parts = [f"L{int(row['layer'])}"]
    if "head" in row and pd.notna(row["head"]):
        parts.append(f"H{int(row['head'])}")
    neurons = row.get("neurons")
    if isinstance(neurons, (tuple, list)) and neurons:
        parts.append(f" n{neurons[0]}-{neurons[-1]}" if len(neurons) > 1 else f" n{neurons[0]}")
    elif "head" not in row or pd.isna(row["head"]):
        parts.append(" MLP" if str(row.get("activation", "")) in ("mlp_out", "post") else "")
    label = "".join(parts)
    return f"{row['activation']}: {label}" if with_activation else label


def patching_heatmap(
    result: Tabular | pd.DataFrame,
    value: str = "mean",
    *,
    x: str | None = None,
    title: str | None = None,
) -> go.Figure:
    """Activation patching as a heatmap: component (``L0H1``...) x position -> normalised effect.

    ``result`` is a :class:`perm_circuits.analysis.study.recall_patching.PatchingSweep` or ``PatchingReport``
    (or their ``to_dataframe()``: one row per cell with ``activation``, ``layer``, ``head``,
    ``position``, ``source_position``, ``neurons``, ``mean``, ``ci_low``, ``ci_high``,
    ``logit_diff``).  The x axis is ``source_position`` when the sweep has one (head x source
    position), else ``position``, else ``activation``; positions are labelled by role
    (``3: y2``).  Colors diverge around 0 (1 = the patch restores the full clean behaviour);
    hover shows the bootstrap CI and the raw logit difference.
    """
    frame = frame_of(result, "result")
    check_str("value", value)
    require_columns(frame, ["activation", "layer", value], "result")
    if x is None:
        x = next((c for c in ("source_position", "position") if c in frame and frame[c].notna().any()), "activation")
    check_str("x", x)
    require_columns(frame, [x], "result")
    with_activation = frame["activation"].nunique() > 1 and x != "activation"
    hover = [c for c in ("ci_low", "ci_high", "logit_diff") if c in frame.columns and c != value]
    plot = pd.DataFrame({"component": [_component_label(row, with_activation) for _, row in frame.iterrows()]})
    plot[value] = frame[value].to_numpy()
    for column in hover:
        plot[column] = frame[column].astype(float).round(4).to_numpy()
    x_title = x.replace("_", " ")
    if x in ("source_position", "position"):
        positions = frame[x]
        if positions.dropna().lt(0).any():
            raise ValueError(f"result has negative {x} values; expected positions 0..seq_len-1")
        order = sorted(int(p) for p in positions.dropna().unique())
        categories = [position_label(p) for p in order] + (["all"] if positions.isna().any() else [])
        plot[x_title] = [position_label(int(p)) if pd.notna(p) else "all" for p in positions]
    else:
        plot[x_title] = frame[x].map(_label).to_numpy()
        categories = list(pd.unique(plot[x_title]))
    trace = _heatmap_trace(plot, x_title, "component", value, hover_columns=hover, text_format=".2f",
        x_order=categories, colorscale="RdBu_r", zmid=0.0, colorbar={"title": {"text": value}})
    fig = go.Figure(trace)
    fig.update_xaxes(type="category", tickangle=-45)
    fig.update_yaxes(type="category", autorange="reversed")
    if title is None:
        model = frame["model"].iloc[0] + ": " if "model" in frame else ""
        kinds = ", ".join(str(a) for a in pd.unique(frame["activation"]))
        title = f"{model}activation patching ({kinds}): normalised effect ({value})"
    check_str("title", title)
    return house_style(fig, title, x_title=x_title, y_title="component",
                  height=max(380, 180 + 40 * len(trace.y)), width=max(560, 260 + 70 * len(trace.x)))


def _cell(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return "–" if math.isnan(value) else f"{value:.3f}"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def ffn_table(
    result: Tabular | pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    sort_by: str | None = "agreement",
    live_only: bool = False,
) -> go.Figure:
    """FFN neurons as key-value memories (Geva et al. 2021): a plotly Table, one row per neuron.

    ``result`` is :class:`perm_circuits.analysis.study.ffn.FFNKeyValueProbe` (or its
    ``to_dataframe()``, indexed by ``neuron``).  Default: those of :data:`FFN_COLUMNS` it has: the value
    vector's top/bottom token, the agreement between the value's top token and the triggers'
    targets, the top trigger pattern and its share, whether the neuron fires on repeated
    queries (those rows are tinted orange, the recall color) and its recall / trap agreement.

    Args:
        columns: which columns to show (any of the frame's).
        sort_by: a column to sort by, descending (NaN last); ``None`` keeps neuron order.
        live_only: drop neurons that never fire.
    """
    frame = frame_of(result, "result")
    if "neuron" not in frame.columns and frame.index.name == "neuron":
        frame = frame.reset_index()
    if columns is None:  # the default columns this version of the analysis provides
        columns = [c for c in FFN_COLUMNS if c in frame.columns]
        if len(columns) < 2:
            raise ValueError(f"result has none of the FFN columns {list(FFN_COLUMNS)}; got {list(frame.columns)}")
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns) or not columns:
        raise TypeError(f"columns must be a non-empty list of column names, got {columns!r}")
    require_columns(frame, list(columns), "result")
    if live_only:
        require_columns(frame, ["live"], "result")
        frame = frame[frame["live"].astype(bool)]
        if frame.empty:
            raise ValueError("no live neurons to show")
    if sort_by is not None:
        check_str("sort_by", sort_by)
        require_columns(frame, [sort_by], "result")
        frame = frame.sort_values(sort_by, ascending=False, na_position="last", kind="stable")
    repeated = frame["fires_on_repeated"] if "fires_on_repeated" in frame.columns else [False] * len(frame)
    tint = ["#fff4e6" if bool(r) else "white" for r in repeated]
    cells = [[_cell(v) for v in frame[c]] for c in columns]
    fig = go.Figure(
        go.Table(
            header={"values": [f"<b>{_FFN_HEADERS.get(c, c)}</b>" for c in columns], "fill_color": "#e9ecef",
                    "align": "left"},
            cells={"values": cells, "fill_color": [tint] * len(columns), "align": "left", "height": 24},
            columnwidth=[2.4 if c == "top_pattern" else 1 for c in columns],
        )
    )
    model = getattr(result, "model_name", None)
    layer = getattr(result, "layer", None)
    where = f"layer {layer}, " if isinstance(layer, int) else ""
    title = f"{model + ': ' if model else ''}FFN neurons as key-value memories ({where}{len(frame)} neurons)"
    return house_style(fig, title, height=220 + 34 * (len(frame) + 1), width=max(900, 100 * len(columns)))
