"""Attention figures (study section 08): mean attention per head over a test set, one sequence's attention."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch
from jaxtyping import Float, Int
from plotly.subplots import make_subplots
from torch import Tensor

from perm_circuits.checks import check_int
from perm_circuits.hooks import run_capture
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.permutation_data import Batch, make_test_set, validate_tokens
from perm_circuits.views.circuits import token_labels
from perm_circuits.views.figure_style import check_model, format_sequence, house_style, position_labels

__all__ = ["attention_heatmaps", "sequence_attention"]


def _attention_patterns(model, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch layer head q k"]:
    """Every layer's ``attn.hook_pattern`` on validated ``tokens``, captured in one forward pass."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model_config_of(model).n_layers)]
    _, store = run_capture(model, tokens, names)
    if len(store) != len(names):
        raise RuntimeError(f"captured attention at {sorted(store)}, expected {len(names)} layers")
    return torch.stack([store[name].float().cpu() for name in names], dim=1)


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


def attention_heatmaps(
    model,
    test_set: Batch | None = None,
    repeated: bool | str | None = None,
    *,
    n: int = 5000,
) -> go.Figure:
    """Mean attention pattern of every head over a test set (study section 08).

    One subplot per (layer, head): row ``q``, column ``k`` is the mean over sequences of the
    weight query position ``q`` puts on key position ``k``; axes carry the positions' roles
    (``0: x1``, ``1: y1``, ...).  The study reads the elimination head as a uniform accumulator
    over earlier ``y`` tokens and the recall head as local ``(x, y)`` binding.

    Args:
        test_set: default ``make_test_set(task_config_of(model), n)``.
        repeated: ``None`` averages all sequences; ``True`` / ``False`` only those whose last
            query repeats (does not repeat) an earlier one; ``"split"`` draws both, one row of
            subplots each.
        n: size of the default test set.
    """
    check_model(model)
    config = model_config_of(model)
    if repeated is not None and not isinstance(repeated, bool) and repeated != "split":
        raise ValueError(f"repeated must be None, True, False or 'split', got {repeated!r}")
    if test_set is None:
        check_int("n", n, low=1)
        test_set = make_test_set(task_config_of(model), n=n)
    if not isinstance(test_set, Batch):
        raise TypeError(f"test_set must be a perm_circuits.tasks.permutation_data.Batch, got {type(test_set).__name__}")
    validate_tokens(test_set.inputs, config.V)
    everything = torch.ones(len(test_set), dtype=torch.bool)
    groups = {
        None: [("all sequences", everything)],
        True: [("repeated last query", test_set.repeated)],
        False: [("new last query", ~test_set.repeated)],
        "split": [("new last query", ~test_set.repeated), ("repeated last query", test_set.repeated)],
    }[repeated]
    for label, rows in groups:
        if not bool(rows.any()):
            raise ValueError(
                f"test_set has no sequences with a {label} (repeated={repeated!r}); "
                "use a test set drawn with repeat_ratio > 0"
            )

    patterns = _attention_patterns(model, test_set.inputs)  # [batch, layer, head, q, k]
    labels = position_labels(patterns.shape[-1])
    n_rows, n_cols = len(groups) * config.n_layers, config.n_heads
    titles, traces = [], []
    for label, rows in groups:
        mean = patterns[rows].mean(dim=0)
        for layer in range(config.n_layers):
            for head in range(config.n_heads):
                name = f"L{layer}H{head}"
                titles.append(f"{name}: {label} (n={int(rows.sum())})")
                traces.append((len(traces) // n_cols, head, attention_trace(mean[layer, head], labels, name)))
    title = f"{config.name}: mean attention pattern per head over {len(test_set)} test sequences"
    return attention_grid(traces, titles, n_rows, n_cols, title)


def sequence_attention(model, tokens: Sequence[int] | Int[Tensor, "*batch seq"]) -> go.Figure:
    """Attention of every head on one sequence, tokens labelled ``0: x=2``, ``1: y=4``, ...

    Args:
        tokens: one sequence ``[x1, y1, ..., xV]`` (a list of ints, a 1-D tensor or ``[1, seq]``).
    """
    check_model(model)
    config = model_config_of(model)
    if isinstance(tokens, (list, tuple)):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TypeError(f"tokens must be ints, got {tokens!r}")
        tokens = torch.tensor(tokens, dtype=torch.long)
    seq = validate_tokens(tokens, config.V)
    if seq.shape[0] != 1:
        raise ValueError(f"tokens must be one sequence, got a batch of {seq.shape[0]}")
    pattern = _attention_patterns(model, seq)[0]  # [layer, head, q, k]
    title = f"{config.name}: attention on {format_sequence(seq[0].tolist())}"
    return head_grid(list(pattern), token_labels(seq[0]), title)
