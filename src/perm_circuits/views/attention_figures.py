"""Attention figures (study section 08): mean attention per head over a test set, one sequence's attention.

They draw computed results (:mod:`perm_circuits.analysis.figure_data` computes them): e.g.
``attention_heatmaps(mean_attention(model, test_set, repeated="split"))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from perm_circuits.analysis.figure_results import MeanAttention, SequenceAttention
from perm_circuits.views.circuits import token_labels
from perm_circuits.views.figure_style import check_result, format_sequence, house_style, position_labels

__all__ = ["attention_heatmaps", "sequence_attention"]


def attention_trace(
    pattern: Float[Tensor, "q k"], labels: list[str], head: str, *, cell_text: bool = True
) -> go.Heatmap:
    """One head's pattern as a heatmap (queries down, keys across; the causal upper triangle blank)."""
    n = pattern.shape[0]
    z = pattern.numpy().astype(float)
    z[np.triu_indices(n, k=1)] = np.nan
    text = [["" if math.isnan(v) else f"{v:.2f}" for v in row] for row in z]
    return go.Heatmap(z=z, x=labels, y=labels, coloraxis="coloraxis", text=text,
        texttemplate="%{text}" if cell_text else None, textfont={"size": 9},
        hovertemplate=f"{head}<br>query %{{y}}<br>key %{{x}}<br>attention %{{z:.3f}}<extra></extra>", name=head,
        hoverongaps=False)


def attention_grid(
    traces: Sequence[tuple[int, int, go.Heatmap]], titles: Sequence[str], rows: int, cols: int, title: str,
    *, vertical_spacing: float = 0.18,
) -> go.Figure:
    """Attention heatmaps ``(row, col, trace)`` (0-based) on a ``rows`` x ``cols`` grid in the house style:
    one 0-1 color axis, keys across, queries down.  The spacings shrink where plotly would refuse them
    (more than ``1 / (n - 1)``: 10 or more heads across, many layers down)."""
    horizontal_spacing = 0.12 if cols < 2 or 0.12 <= 1 / (cols - 1) else 0.5 / (cols - 1)
    if rows > 1 and vertical_spacing > 1 / (rows - 1):
        vertical_spacing = 0.5 / (rows - 1)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=horizontal_spacing,
                        vertical_spacing=vertical_spacing)
    for row, col, trace in traces:
        fig.add_trace(trace, row=row + 1, col=col + 1)
    fig.update_layout(
        coloraxis={"colorscale": "Blues", "cmin": 0.0, "cmax": 1.0, "colorbar": {"title": {"text": "attention"}}}
    )
    for row in range(1, rows + 1):
        for col in range(1, cols + 1):
            fig.update_xaxes(title_text="key (attended) position", tickangle=-45, type="category", row=row, col=col)
            fig.update_yaxes(title_text="query position" if col == 1 else None, autorange="reversed", type="category",
                row=row, col=col)
    return house_style(fig, title, height=150 + 420 * rows, width=max(620, 520 * cols))


def head_grid(
    patterns: Sequence[Tensor], labels: list[str], title: str, *, cell_text: bool = True, vertical_spacing: float = 0.18
) -> go.Figure:
    """One layer's ``[head, q, k]`` attention per row of :func:`attention_grid`, heads ``L{layer}H{head}``."""
    n_heads = max(pattern.shape[0] for pattern in patterns)
    names = [f"L{layer}H{head}" for layer in range(len(patterns)) for head in range(n_heads)]
    traces = [(layer, head, attention_trace(pattern[head], labels, f"L{layer}H{head}", cell_text=cell_text))
              for layer, pattern in enumerate(patterns) for head in range(pattern.shape[0])]
    return attention_grid(traces, names, len(patterns), n_heads, title, vertical_spacing=vertical_spacing)


def attention_heatmaps(data: MeanAttention) -> go.Figure:
    """Mean attention pattern of every head over a test set (study section 08), from
    :func:`~perm_circuits.analysis.figure_data.mean_attention`.

    One subplot per (layer, head) and subgroup (one row of subplots each): row ``q``, column ``k``
    is the mean over sequences of the weight query position ``q`` puts on key position ``k``; axes
    carry the positions' roles (``0: x1``, ``1: y1``, ...).  The study reads the elimination head as
    a uniform accumulator over earlier ``y`` tokens and the recall head as local ``(x, y)`` binding.
    """
    check_result("data", data, MeanAttention, "analysis.figure_data.mean_attention(model, test_set)")
    n_layers, n_heads, seq = data.groups[0][2].shape[:3]
    labels = position_labels(seq)
    titles, traces = [], []
    for label, count, mean in data.groups:
        for layer in range(n_layers):
            for head in range(n_heads):
                name = f"L{layer}H{head}"
                titles.append(f"{name}: {label} (n={count})")
                traces.append((len(traces) // n_heads, head, attention_trace(mean[layer, head], labels, name)))
    title = f"{data.model_name}: mean attention pattern per head over {data.n_sequences} test sequences"
    return attention_grid(traces, titles, len(data.groups) * n_layers, n_heads, title)


def sequence_attention(data: SequenceAttention) -> go.Figure:
    """Attention of every head on one sequence, tokens labelled ``0: x=2``, ``1: y=4``, ..., from
    :func:`~perm_circuits.analysis.figure_data.sequence_attention_patterns`."""
    check_result("data", data, SequenceAttention, "analysis.figure_data.sequence_attention_patterns(model, tokens)")
    title = f"{data.model_name}: attention on {format_sequence(list(data.tokens))}"
    return head_grid(list(data.patterns), token_labels(list(data.tokens)), title)
