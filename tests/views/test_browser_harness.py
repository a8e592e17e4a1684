"""Real-browser tests: offline pages render in Debian's chromium, with no network."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest
import torch

from perm_circuits.views import (
    Section,
    attention_view,
    colored_tokens_view,
    html_page,
    token_labels,
)

from .browser import one_browser, open_page, require_chromium

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module", autouse=True)
def _need_chromium():
    """Chromium, launched once for the module's pages (each page in a fresh browser context)."""
    require_chromium()
    with one_browser():
        yield


TOKENS = token_labels([2, 5, 1, 3, 4, 2])


def _causal_pattern(n_head: int) -> torch.Tensor:
    n = len(TOKENS)
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    scores = torch.randn(n_head, n, n).masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _figure_div(fig: go.Figure) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False)


def test_mixed_page_renders_offline(tmp_path):
    sections = [
        attention_view(_causal_pattern(2), TOKENS, ["L0H0", "L0H1"], title="Layer 0"),
        attention_view(_causal_pattern(1), TOKENS, title="Layer 1"),
        colored_tokens_view(TOKENS, torch.linspace(-1, 1, len(TOKENS)), title="Values"),
        Section("Bar", _figure_div(go.Figure(go.Bar(x=[1, 2, 3], y=[3, 1, 2])))),
        Section("Heatmap", _figure_div(go.Figure(go.Heatmap(z=[[1, 2], [3, 4]])))),
    ]
    page = tmp_path / "page.html"
    page.write_text(html_page("Harness", sections, include_plotlyjs=True), encoding="utf-8")

    report = open_page(page, tmp_path / "page.png")

    assert report.remote_requests == []
    assert report.console_errors == [] and report.page_errors == []
    assert (report.views_total, report.views_mounted) == (3, 3)
    assert (report.plotly_total, report.plotly_rendered) == (2, 2)
    assert report.ok
    assert report.screenshot.stat().st_size > 10_000


def test_repr_html_fragments_render(tmp_path):
    """Notebook output (bundle per fragment) also renders and stays offline."""
    views = [
        attention_view(_causal_pattern(2), TOKENS),
        colored_tokens_view(TOKENS, torch.rand(len(TOKENS))),
    ]
    page = tmp_path / "repr.html"
    body = "\n".join(v._repr_html_() for v in views)
    page.write_text(f"<!DOCTYPE html><html><body>{body}</body></html>", encoding="utf-8")

    report = open_page(page)

    assert report.ok, report
    assert report.views_mounted == 2


def test_harness_detects_network_and_unmounted_views(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><head><script src="https://cdn.example.invalid/x.js"></script></head>'
        '<body><img src="http://example.com/i.png"><div data-circuitsvis="X"></div>'
        "<script>throw new Error('boom')</script></body></html>",
        encoding="utf-8",
    )

    report = open_page(page, timeout_s=1.0)

    assert sorted(report.remote_requests) == [
        "http://example.com/i.png",
        "https://cdn.example.invalid/x.js",
    ]
    assert report.page_errors and "boom" in report.page_errors[0]
    assert (report.views_total, report.views_mounted) == (1, 0)
    assert not report.rendered_in_time and not report.ok
