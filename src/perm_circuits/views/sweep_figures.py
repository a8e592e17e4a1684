"""Population figures from a sweep table (one row per run, see ``perm_circuits.sweep.load_sweep``).

The study claims its capacity story and head specialisation hold "across seeds"; these figures
(:func:`phase_diagram`, :func:`epoch_to_recall`, :func:`roles_frequency`) show what a population of
seeds says.

A *configuration* is one point of the grid without the seed: ``(d_model, n_heads, dropout)`` plus
any other config axis that varies within those (``n_layers``, ``repeat_ratio``, ``epochs``, ...).
When such other axes vary, the figures facet by them instead of pooling different recipes: the
phase diagram gets one row of panels per combination of the other axes, and the other figures name
them in each configuration's label.  Failed runs (``status != "done"``) never count as seeds here;
the phase diagram says how many failed in a cell.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perm_circuits.checks import check_fraction
from perm_circuits.circuit import is_component
from perm_circuits.views.figure_style import (
    ELIMINATION_COLOR,
    MODEL_COLOR,
    MODEL_PALETTE,
    NEUTRAL_COLORS,
    RECALL_COLOR,
    house_style,
    require_columns,
)

__all__ = [
    "CONFIG_AXES",
    "PHASE_KEYS",
    "claim_columns",
    "config_axes",
    "epoch_to_recall",
    "phase_cells",
    "phase_diagram",
    "role_columns",
    "role_counts",
    "roles_frequency",
    "sweep_modes",
]

CONFIG_AXES: tuple[str, ...] = (
    "d_model", "n_heads", "n_layers", "d_head", "d_mlp", "dropout", "V", "repeat_ratio",
    "epochs", "samples", "batch_size", "lr", "early_stop",
)
"""Config columns of a sweep row (the seed aside) that can define a configuration."""
PHASE_KEYS: tuple[str, ...] = ("d_model", "n_heads", "dropout")
"""The axes the phase diagram draws: x, y and one panel per value."""
NEVER = "never"
"""Label of the row where :func:`epoch_to_recall` draws seeds that never learned recall."""

_STATUS_COLORS = {"supported": "#2f9e44", "contradicted": "#e03131", "inconclusive": "#ced4da"}
# role colours: the house palette without its greens and reds (claim statuses use those)
_ROLE_PALETTE = (MODEL_COLOR, "#0c8599", RECALL_COLOR, ELIMINATION_COLOR, "#862e9c", "#495057", "#fab005",
                 "#f783ac", "#3bc9db", NEUTRAL_COLORS[2])
_VERDICT_RE = re.compile(r"^verdict_(?P<how>.+)$")
_ROLE_RE = re.compile(r"^role_(?P<rest>.+)$")
_CLAIM_RE = re.compile(r"^claim_(?P<rest>.+)$")


def check_frame(frame: object, columns: Sequence[str], name: str = "frame") -> pd.DataFrame:
    """``frame`` if it is a sweep table (a DataFrame) with every column in ``columns``."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame (a sweep table), got {type(frame).__name__}")
    if frame.empty:
        raise ValueError(f"{name} has no rows: the sweep table is empty")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} is missing the sweep column(s) {missing}")
    bad = sorted(set(frame["status"].astype(str)) - {"done", "failed"}) if "status" in frame else []
    if bad:
        raise ValueError(f"{name}['status'] must be 'done' or 'failed', got {bad}")
    return frame


def config_axes(frame: pd.DataFrame, keys: Sequence[str] = PHASE_KEYS) -> list[str]:
    """Config columns besides ``keys`` (and the seed) that take several values within one ``keys`` cell.

    Derived columns (``d_head`` = d_model / n_heads, ``d_mlp``) are constant within a cell and so
    never listed; NaN counts as a value (``early_stop`` may be null).
    """
    require_columns(frame, list(keys), "frame")
    others = [c for c in CONFIG_AXES if c in frame.columns and c not in keys]
    grouped = frame.groupby(list(keys), dropna=False)
    return [c for c in others if (grouped[c].nunique(dropna=False) > 1).any()]


def _fmt_value(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "none"
        if value.is_integer():
            return str(int(value)) if abs(value) >= 1 else f"{value:g}"
        return f"{value:g}"
    return str(value)


def config_label(row: pd.Series | dict, others: Sequence[str], *, dropout: bool = False) -> str:
    """``"d16 h2"`` (+ ``" p0.1"`` with ``dropout``) + ``", n_layers=2"`` for every other varying axis."""
    label = f"d{_fmt_value(row['d_model'])} h{_fmt_value(row['n_heads'])}"
    if dropout:
        label += f" p{_fmt_value(row['dropout'])}"
    return label + "".join(f", {axis}={_fmt_value(row[axis])}" for axis in others)


def _sorted_values(series: pd.Series) -> list:
    values = series.dropna().unique().tolist()
    return sorted(values) + ([float("nan")] if series.isna().any() else [])


def _matches(frame: pd.DataFrame, column: str, value: object) -> pd.Series:
    if isinstance(value, float) and math.isnan(value):
        return frame[column].isna()
    return frame[column] == value


def phase_cells(frame: pd.DataFrame, threshold: float = 0.99) -> pd.DataFrame:
    """The phase diagram's numbers: one row per configuration with runs.

    Columns: the configuration (``d_model``, ``n_heads``, ``dropout`` and the other varying axes),
    ``done``, ``failed``, ``learned`` (done seeds with ``recall_accuracy >= threshold``) and
    ``share`` = learned / done (NaN when no seed finished).
    """
    threshold = check_fraction(threshold)
    check_frame(frame, ["status", "recall_accuracy", *PHASE_KEYS])
    keys = [*PHASE_KEYS, *config_axes(frame)]
    work = frame.assign(_done=frame["status"] == "done", _failed=frame["status"] == "failed",
        _learned=(frame["status"] == "done") & (frame["recall_accuracy"] >= threshold))
    cells = (
        work.groupby(keys, dropna=False)
        .agg(done=("_done", "sum"), failed=("_failed", "sum"), learned=("_learned", "sum"))
        .reset_index()
    )
    cells[["done", "failed", "learned"]] = cells[["done", "failed", "learned"]].astype(int)
    cells["share"] = cells["learned"] / cells["done"].where(cells["done"] > 0)
    return cells


def phase_diagram(frame: pd.DataFrame, threshold: float = 0.99) -> go.Figure:
    """Share of seeds that learn recall over d_model (x) x n_heads (y), one panel per dropout.

    A seed learns recall when its final ``recall_accuracy >= threshold`` (only ``status == "done"``
    rows count).  Each cell is annotated ``k/n`` (k learned out of n finished seeds), plus the
    number of failed runs when there are any; a cell with no run is blank, and a cell whose runs
    all failed is blank with "n failed".  When other config axes vary within a (d_model, n_heads,
    dropout) cell (``n_layers``, ``repeat_ratio``, ``epochs``, ...; see :func:`config_axes`), each
    combination of them gets its own row of panels rather than being pooled.

    Args:
        frame: the sweep table (``load_sweep``); needs ``status``, ``recall_accuracy``,
            ``d_model``, ``n_heads``, ``dropout``.
        threshold: recall accuracy that counts as learned (the study's 0.99).
    """
    cells = phase_cells(frame, threshold)
    others = config_axes(frame)
    dropouts = _sorted_values(cells["dropout"])
    combos = cells[others].drop_duplicates().to_dict("records") if others else [{}]
    d_models = sorted(cells["d_model"].unique().tolist())
    heads = sorted(cells["n_heads"].unique().tolist())
    x_labels = [_fmt_value(d) for d in d_models]
    y_labels = [_fmt_value(h) for h in heads]

    def combo_title(combo: dict) -> str:
        return ", ".join(f"{axis}={_fmt_value(value)}" for axis, value in combo.items())

    titles = [
        f"dropout {_fmt_value(p)}" + (f" | {combo_title(combo)}" if combo else "")
        for combo in combos for p in dropouts
    ]
    fig = make_subplots(rows=len(combos), cols=len(dropouts), subplot_titles=titles, horizontal_spacing=0.08,
        vertical_spacing=min(0.15, 0.6 / max(len(combos), 1)))
    for r, combo in enumerate(combos, start=1):
        in_combo = cells
        for axis, value in combo.items():
            in_combo = in_combo[_matches(in_combo, axis, value)]
        for c, dropout in enumerate(dropouts, start=1):
            panel = in_combo[_matches(in_combo, "dropout", dropout)]
            z = np.full((len(heads), len(d_models)), np.nan)
            text = [["" for _ in d_models] for _ in heads]
            hover = [["no runs" for _ in d_models] for _ in heads]
            for _, cell in panel.iterrows():
                i, j = heads.index(cell["n_heads"]), d_models.index(cell["d_model"])
                done, failed, learned = int(cell["done"]), int(cell["failed"]), int(cell["learned"])
                z[i, j] = cell["share"]
                if done:
                    text[i][j] = f"{learned}/{done}" + (f"<br>({failed} failed)" if failed else "")
                    hover[i][j] = (f"{learned} of {done} seeds learn recall ({cell['share']:.0%})"
                                   + (f"; {failed} failed" if failed else ""))
                else:
                    text[i][j] = f"{failed} failed"
                    hover[i][j] = f"all {failed} runs failed"
            fig.add_trace(
                go.Heatmap(z=z, x=x_labels, y=y_labels, text=text, texttemplate="%{text}", textfont={"size": 12},
                    customdata=hover, coloraxis="coloraxis",
                    hovertemplate="d_model %{x}, n_heads %{y}<br>%{customdata}<extra></extra>", hoverongaps=False,
                    xgap=2, ygap=2, name=titles[(r - 1) * len(dropouts) + c - 1]),
                row=r, col=c,
            )
            fig.update_xaxes(type="category", title_text="d_model", row=r, col=c)
            fig.update_yaxes(type="category", title_text="n_heads" if c == 1 else None, row=r, col=c)
    fig.update_layout(coloraxis={
        "colorscale": [[0.0, "#f8f9fa"], [1.0, RECALL_COLOR]], "cmin": 0.0, "cmax": 1.0,
        "colorbar": {"title": {"text": "share learning<br>recall"}, "tickformat": ".0%"},
    })
    n_done = int(cells["done"].sum())
    title = f"Share of seeds that learn recall (accuracy >= {threshold:g}); {n_done} finished runs"
    return house_style(fig, title, height=200 + 260 * len(combos), width=max(760, 380 * len(dropouts) + 150))


def epoch_to_recall(frame: pd.DataFrame) -> go.Figure:
    """Spread across seeds of ``epoch_recall_99`` (first epoch with recall >= 0.99), per configuration.

    One box per configuration and dropout value (one colour per dropout), every seed drawn as a
    point (hover: seed and run id).  Finished seeds that never reached 0.99 (``epoch_recall_99``
    NaN) are drawn separately on a "never" row above the epochs, so they are neither dropped nor
    mistaken for late learners.  Failed runs are left out (the title counts them).
    """
    check_frame(frame, ["status", "epoch_recall_99", "seed", *PHASE_KEYS])
    others = config_axes(frame)
    done = frame[frame["status"] == "done"]
    if done.empty:
        raise ValueError("frame has no finished runs (status == 'done'): nothing to draw")
    epochs = done["epoch_recall_99"].astype(float)
    top = float(epochs.max()) if epochs.notna().any() else 0.0
    never_y = math.ceil(top * 1.15) + 2
    labels = _ordered_labels(done, others, dropout=False)
    fig = go.Figure()
    for index, dropout in enumerate(_sorted_values(done["dropout"])):
        color = MODEL_PALETTE[index % len(MODEL_PALETTE)]
        group = done[_matches(done, "dropout", dropout)]
        x = [config_label(row, others) for _, row in group.iterrows()]
        run_ids = group["run_id"] if "run_id" in group else [None] * len(group)
        hover = [f"seed {s}" + (f", run {r}" if isinstance(r, str) else "") for s, r in zip(group["seed"], run_ids)]
        learned = group["epoch_recall_99"].notna().to_numpy()
        name = f"dropout {_fmt_value(dropout)}"
        fig.add_trace(go.Box(x=[v for v, ok in zip(x, learned) if ok],
            y=group["epoch_recall_99"][learned].astype(float), hovertext=[h for h, ok in zip(hover, learned) if ok],
            name=name, legendgroup=name, offsetgroup=name, marker_color=color, boxpoints="all", pointpos=0, jitter=0.4,
            hoverinfo="y+text"))
        fig.add_trace(go.Box(  # a box of equal values: only its points show, on the "never" row
            x=[v for v, ok in zip(x, learned) if not ok], y=[never_y] * int((~learned).sum()),
            hovertext=[f"{h}: never reached 0.99" for h, ok in zip(hover, learned) if not ok],
            name=f"{name}, never learned", legendgroup=name, offsetgroup=name, showlegend=False,
            marker={"color": color, "symbol": "x"}, boxpoints="all", pointpos=0, jitter=0.4,
            fillcolor="rgba(0,0,0,0)", line={"width": 0}, hoverinfo="text",
        ))
    ticks = [t for t in _nice_ticks(top) if t < never_y - 1]
    fig.add_hline(y=never_y - 1, line={"color": NEUTRAL_COLORS[1], "dash": "dot", "width": 1})
    fig.update_layout(boxmode="group")
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=labels)
    fig.update_yaxes(tickvals=[*ticks, never_y], ticktext=[*(str(t) for t in ticks), NEVER],
                     range=[-0.5, never_y + 1], zeroline=False)
    failed = int((frame["status"] == "failed").sum())
    title = "Epoch at which recall first reaches 0.99, across seeds" + (f" ({failed} failed runs left out)" if failed else "")
    return house_style(fig, title, x_title="configuration (d_model, n_heads)", y_title="epoch",
                  height=480, width=max(700, 90 * len(labels) + 200))


def _nice_ticks(top: float) -> list[int]:
    step = max(1, int(10 ** math.floor(math.log10(max(top, 1.0)))))
    if top / step < 4:
        step = max(1, step // 2)
    return list(range(0, int(top) + step, step))


def sweep_modes(frame: pd.DataFrame) -> list[str]:
    """Ablation modes present in a sweep table, discovered from its column names.

    From ``verdict_<how>`` columns when there are any; else from ``role_<how>_<component>``
    columns (component ``L<l>H<h>`` / ``L<l>MLP``).  In table order.
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
    modes = [m["how"] for c in frame.columns if (m := _VERDICT_RE.match(str(c)))]
    if not modes:
        for column in frame.columns:
            m = _ROLE_RE.match(str(column))
            if m and "_" in m["rest"]:
                how, component = m["rest"].rsplit("_", 1)
                if is_component(component) and how not in modes:
                    modes.append(how)
    return modes


def _columns_of(frame: pd.DataFrame, pattern: re.Pattern, modes: Sequence[str]) -> dict[str, dict[str, str]]:
    """``{how: {name: column}}``: each column goes to the longest mode its suffix starts with."""
    by_length = sorted(modes, key=len, reverse=True)
    out: dict[str, dict[str, str]] = {how: {} for how in modes}
    for column in frame.columns:
        m = pattern.match(str(column))
        if not m:
            continue
        for how in by_length:
            if m["rest"].startswith(how + "_") and len(m["rest"]) > len(how) + 1:
                out[how][m["rest"][len(how) + 1:]] = column
                break
    return out


def role_columns(frame: pd.DataFrame) -> dict[str, dict[str, str]]:
    """``{how: {component: column}}`` of the ``role_<how>_<component>`` columns."""
    return _columns_of(frame, _ROLE_RE, sweep_modes(frame))


def claim_columns(frame: pd.DataFrame) -> dict[str, dict[str, str]]:
    """``{how: {claim: column}}`` of the ``claim_<how>_<claim>`` columns."""
    return _columns_of(frame, _CLAIM_RE, sweep_modes(frame))


def role_counts(frame: pd.DataFrame, how: str | None = None) -> pd.DataFrame:
    """Tidy counts behind :func:`roles_frequency`, over finished runs.

    Columns: ``how``, ``config`` (label), ``kind`` ("role" or "claim"), ``item`` (component or
    claim), ``value`` (role or status), ``count`` (seeds), ``seeds`` (finished seeds of the
    configuration).  A component absent from a configuration (``L0H1`` of a one-head model:
    NaN role) is not counted.
    """
    check_frame(frame, ["status", *PHASE_KEYS])
    modes = sweep_modes(frame)
    if not modes:
        raise ValueError(
            "frame has no head-role columns: expected verdict_<how> and role_<how>_<component> / "
            "claim_<how>_<claim> columns (e.g. role_mean_L0H0)"
        )
    if how is not None:
        if how not in modes:
            raise ValueError(f"how must be one of the table's ablation modes {modes}, got {how!r}")
        modes = [how]
    roles, claims = role_columns(frame), claim_columns(frame)
    others = config_axes(frame)
    done = frame[frame["status"] == "done"]
    if done.empty:
        raise ValueError("frame has no finished runs (status == 'done'): nothing to count")
    labels = pd.Series([config_label(row, others, dropout=True) for _, row in done.iterrows()], index=done.index)
    seeds = labels.value_counts()
    records = []
    for mode in modes:
        for kind, columns in (("role", roles[mode]), ("claim", claims[mode])):
            for item, column in columns.items():
                counts = pd.DataFrame({"config": labels, "value": done[column]}).dropna().value_counts()
                for (config, value), count in counts.items():
                    records.append({"how": mode, "config": config, "kind": kind, "item": item,
                                    "value": str(value), "count": int(count), "seeds": int(seeds[config])})
    table = pd.DataFrame(records, columns=["how", "config", "kind", "item", "value", "count", "seeds"])
    config_order = {label: i for i, label in enumerate(_ordered_labels(done, others))}
    table["_order"] = table["config"].map(config_order)
    table["_how"] = table["how"].map({mode: i for i, mode in enumerate(modes)})
    table = table.sort_values(["_how", "kind", "item", "_order", "value"], kind="stable")
    return table.drop(columns=["_order", "_how"]).reset_index(drop=True)


def _ordered_labels(done: pd.DataFrame, others: Sequence[str], *, dropout: bool = True) -> list[str]:
    """The configurations' labels, sorted by (d_model, n_heads[, dropout], other axes)."""
    keys = ["d_model", "n_heads", *(["dropout"] if dropout else []), *others]
    configs = done[keys].drop_duplicates().sort_values(keys, na_position="last")
    return [config_label(row, others, dropout=dropout) for _, row in configs.iterrows()]


def roles_frequency(frame: pd.DataFrame, how: str | None = None) -> go.Figure:
    """How often each head role and each claim status appears across seeds, per configuration.

    One panel per component (``L0H0``, ``L0H1``, ``L0MLP``, ...: stacked bars of its role, counted
    over finished seeds) and one per claim (stacked bars of its status), with configurations
    (d_model, n_heads, dropout and other varying axes) along x.  Ablation modes are discovered from
    the column names (:func:`sweep_modes`), never assumed.  With ``how=None`` every mode is drawn
    and a dropdown switches between them (the first mode shown), so a role that depends on the
    ablation mode is visible; with ``how="mean"`` only that mode.

    Raises:
        ValueError: missing columns, no role columns, an unknown mode, or no finished runs.
    """
    counts = role_counts(frame, how)
    modes = sweep_modes(frame) if how is None else [how]  # a mode with nothing counted still gets its entry
    others = config_axes(frame)
    labels = _ordered_labels(frame[frame["status"] == "done"], others)
    panels = list(dict.fromkeys(zip(counts["kind"], counts["item"])))
    panels.sort(key=lambda p: (p[0] != "role", p[1]))
    if not panels:
        raise ValueError("the role and claim columns of frame hold no value for any finished run")
    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig = make_subplots(rows=rows, cols=cols, vertical_spacing=min(0.12, 0.5 / rows), horizontal_spacing=0.08,
        subplot_titles=[f"{'role of' if kind == 'role' else 'claim'} {item}" for kind, item in panels])
    palette = _value_colors(counts)
    visible_of: dict[str, list[bool]] = {mode: [] for mode in modes}
    shown_legend: set[tuple[str, str]] = set()
    for index, (kind, item) in enumerate(panels):
        row, col = index // cols + 1, index % cols + 1
        for mode in modes:
            part = counts[(counts["how"] == mode) & (counts["kind"] == kind) & (counts["item"] == item)]
            for value in sorted(part["value"].unique()):
                sub = part[part["value"] == value].set_index("config")
                y = [int(sub["count"].get(label, 0)) for label in labels]
                total = [int(sub["seeds"].get(label, 0)) for label in labels]
                legend_key = (mode, value)
                fig.add_trace(
                    go.Bar(
                        x=labels, y=y, name=value, legendgroup=value, marker_color=palette[value],
                        showlegend=legend_key not in shown_legend, visible=mode == modes[0],
                        customdata=[[mode, t] for t in total],
                        hovertemplate=f"{kind} {item} = {value}<br>%{{x}}<br>%{{y}} of %{{customdata[1]}} seeds"
                                      "<br>ablation: %{customdata[0]}<extra></extra>",
                    ),
                    row=row, col=col,
                )
                shown_legend.add(legend_key)
                for other in modes:
                    visible_of[other].append(other == mode)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=labels, tickangle=-30, row=row, col=col)
        fig.update_yaxes(title_text="seeds" if col == 1 else None, rangemode="tozero", row=row, col=col)
    fig.update_layout(barmode="stack")
    title = "Head roles and claim statuses across seeds"
    if len(modes) > 1:
        fig.update_layout(updatemenus=[{
            "type": "dropdown", "x": 1.0, "xanchor": "right", "y": 1.0 + 60 / (180 + 300 * rows), "yanchor": "bottom",
            "active": 0,
            "buttons": [
                {"label": f"ablation: {mode}", "method": "update",
                 "args": [{"visible": visible_of[mode]}, {"title.text": f"{title} ({mode} ablation)"}]}
                for mode in modes
            ],
        }])
    return house_style(fig, f"{title} ({modes[0]} ablation)", height=180 + 300 * rows, width=1100)


def _value_colors(counts: pd.DataFrame) -> dict[str, str]:
    """Claim statuses get fixed colours (supported green, contradicted red); roles the palette."""
    others = sorted(v for v in dict.fromkeys(counts["value"]) if v not in _STATUS_COLORS)
    return {**_STATUS_COLORS, **{v: _ROLE_PALETTE[i % len(_ROLE_PALETTE)] for i, v in enumerate(others)}}
