"""head_grid on models plotly's default subplot spacing cannot hold (10+ heads, 27+ layers)."""

from __future__ import annotations

import pytest
import torch

from perm_circuits.views.attention_figures import head_grid


@pytest.mark.parametrize("n_layers, n_heads", [(1, 12), (30, 1), (3, 1)])
def test_head_grid_draws_every_head_of_wide_and_deep_models(n_layers, n_heads):
    generator = torch.Generator().manual_seed(0)
    patterns = [torch.softmax(torch.randn(n_heads, 4, 4, generator=generator), -1) for _ in range(n_layers)]
    fig = head_grid(patterns, list("abcd"), "t", vertical_spacing=max(0.18 / n_layers, 0.04))
    assert len(fig.data) == n_layers * n_heads
    assert [trace.name for trace in fig.data][-1] == f"L{n_layers - 1}H{n_heads - 1}"
    x_domains = sorted({tuple(fig.layout[f"xaxis{i or ''}"].domain) for i in range(len(fig.data) + 1) if i != 1})
    assert len(x_domains) == n_heads and all(lo < hi for lo, hi in x_domains)  # no zero-width panel
