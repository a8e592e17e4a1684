"""Unit tests (no browser) for offline circuitsvis views and page assembly."""

from __future__ import annotations

import json
import re
import socket
import urllib.request

import circuitsvis.utils.render as cv_render
import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from perm_circuits.views import (
    OfflineView,
    Section,
    attention_view,
    colored_tokens_view,
    html_page,
    neuron_activations_view,
    plotly_js_inline,
    remote_resource_refs,
    token_labels,
)
from perm_circuits.views.html import circuitsvis_bundle_js

# A string that occurs exactly once in the circuitsvis bundle (its IIFE header).
BUNDLE_MARKER = "var CircuitsVis=(()=>{"
TOKENS = token_labels([2, 5, 1, 3])


def _pattern(n_head: int = 2, n_pos: int = 4) -> torch.Tensor:
    return torch.softmax(torch.randn(n_head, n_pos, n_pos), dim=-1)


@pytest.fixture
def no_network(monkeypatch):
    """Make any socket connection or urlopen raise."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(cv_render, "internet_on", refuse)


@pytest.fixture
def views() -> list[OfflineView]:
    return [
        attention_view(_pattern(), TOKENS, ["L0H0", "L0H1"]),
        attention_view(_pattern(1), TOKENS, title="single head"),
        colored_tokens_view(TOKENS, torch.randn(4)),
        neuron_activations_view(TOKENS, torch.randn(4, 3)),
    ]


# --- token_labels -----------------------------------------------------------


def test_token_labels_list_and_tensor():
    expected = ["0: x=2", "1: y=5", "2: x=1", "3: y=3"]
    assert token_labels([2, 5, 1, 3]) == expected
    assert token_labels(torch.tensor([2, 5, 1, 3])) == expected
    assert token_labels(np.array([2, 5, 1, 3]).tolist()) == expected
    assert token_labels([np.int64(7)]) == ["0: x=7"]
    assert token_labels([]) == []


@pytest.mark.parametrize(
    "bad, exc",
    [
        ([1.0, 2], TypeError),
        ([True, 2], TypeError),
        (["1"], TypeError),
        ("12", TypeError),
        (torch.tensor([1.0, 2.0]), TypeError),
        (torch.tensor([[1, 2]]), ValueError),
    ],
)
def test_token_labels_rejects(bad, exc):
    with pytest.raises(exc):
        token_labels(bad)


# --- views ------------------------------------------------------------------


def test_views_hold_components_and_props(views):
    assert [v.component for v in views] == [
        "AttentionHeads",
        "AttentionHeads",
        "ColoredTokens",
        "TextNeuronActivations",
    ]
    props = json.loads(views[0].props_json)
    assert props["tokens"] == TOKENS
    assert props["attentionHeadNames"] == ["L0H0", "L0H1"]
    assert np.array(props["attention"]).shape == (2, 4, 4)
    assert "attentionHeadNames" not in json.loads(views[1].props_json)  # None dropped
    assert np.array(json.loads(views[3].props_json)["activations"]).shape == (4, 1, 3)


def test_views_accept_grad_and_int_tensors():
    pattern = _pattern().requires_grad_()
    props = json.loads(attention_view(pattern, TOKENS).props_json)
    assert props["tokens"] == TOKENS
    np.testing.assert_allclose(np.array(props["attention"]), pattern.detach().numpy(), rtol=0, atol=1e-7)
    values = json.loads(colored_tokens_view(TOKENS, torch.tensor([1, 2, 3, 4])).props_json)["values"]
    assert values == [1.0, 2.0, 3.0, 4.0] and all(isinstance(v, float) for v in values)


def test_props_are_script_safe():
    view = colored_tokens_view(["</script><b>&"], torch.tensor([1.0]))
    assert "</script" not in view.props_json and "<b>" not in view.props_json
    assert json.loads(view.props_json)["tokens"] == ["</script><b>&"]


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda: attention_view(_pattern(2, 5), TOKENS), ValueError, "len(tokens)=4"),
        (lambda: attention_view(torch.rand(2, 4, 3), TOKENS), ValueError, "square"),
        (lambda: attention_view(torch.rand(4, 4), TOKENS), ValueError, "head q k"),
        (lambda: attention_view(_pattern(), TOKENS, ["a"]), ValueError, "len(head_names)=1"),
        (lambda: attention_view(_pattern().numpy(), TOKENS), TypeError, "torch.Tensor"),
        (lambda: attention_view(_pattern(), [1, 2, 3, 4]), TypeError, "tokens[0] is int"),
        (lambda: attention_view(_pattern(), "abcd"), TypeError, "list of str"),
        (lambda: attention_view(_pattern(), TOKENS, title=3), TypeError, "title"),
        (lambda: attention_view(_pattern() * float("nan"), TOKENS), ValueError, "NaN"),
        (lambda: attention_view(_pattern() > 0, TOKENS), TypeError, "real-valued"),
        (lambda: colored_tokens_view(TOKENS, torch.rand(5)), ValueError, "values has pos=5"),
        (lambda: colored_tokens_view(TOKENS, torch.rand(4, 1)), ValueError, "[pos]"),
        (lambda: colored_tokens_view(TOKENS, torch.rand(4), min_value="0"), TypeError, "min_value"),
        (lambda: colored_tokens_view([], torch.rand(0)), ValueError, "empty"),
        (lambda: neuron_activations_view(TOKENS, torch.rand(3, 2)), ValueError, "pos=3"),
        (lambda: neuron_activations_view(TOKENS, torch.rand(4)), ValueError, "pos neurons"),
        (
            lambda: neuron_activations_view(TOKENS, torch.rand(4, 2), neuron_labels=["n0"]),
            ValueError,
            "len(neuron_labels)=1",
        ),
    ],
)
def test_view_validation(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert message in str(info.value)


# --- offline HTML -----------------------------------------------------------


def test_repr_html_is_offline_and_never_probes(no_network, views):
    for view in views:
        html = view._repr_html_()
        assert html.count(BUNDLE_MARKER) == 1
        assert remote_resource_refs(html) == []
        assert "unpkg" not in html and "cdn." not in html
        assert f'data-circuitsvis="{view.component}"' in html


def test_view_construction_never_probes(no_network):
    attention_view(_pattern(), TOKENS)
    colored_tokens_view(TOKENS, torch.rand(4))
    neuron_activations_view(TOKENS, torch.rand(4, 2))


def test_str_is_not_cdn_html(views):
    for view in views:
        text = str(view)
        assert "unpkg" not in text and "<script" not in text
        assert view.component in text


def test_bundle_is_prebuilt_and_script_safe():
    js = circuitsvis_bundle_js()
    assert js.count(BUNDLE_MARKER) == 1
    assert "</script" not in js.lower()
    assert "sourceMappingURL" not in js
    assert "</script" not in plotly_js_inline().lower()


def test_multi_view_page_inlines_bundle_once(no_network, views):
    page = html_page("many", views + views)
    assert page.count(BUNDLE_MARKER) == 1
    ids = re.findall(r'<div id="(pc-view-\d+)"', page)
    assert len(ids) == 2 * len(views) == len(set(ids))
    assert remote_resource_refs(page) == []
    assert "unpkg" not in page and "cdn." not in page


def test_page_with_plotly_has_no_remote_src(views):
    fig = go.Figure(go.Scatter(x=[0, 1], y=[1, 0])).to_html(full_html=False, include_plotlyjs=False)
    page = html_page("mixed", [Section("Fig", fig), views[0], fig], include_plotlyjs=True)
    assert page.count(BUNDLE_MARKER) == 1
    assert page.count(plotly_js_inline()[:200]) == 1
    assert remote_resource_refs(page) == []
    assert not re.search(r"<script[^>]*\ssrc=", page)
    assert "unpkg" not in page
    assert page.count("<h2>Fig</h2>") == 1 and "<h2>Attention patterns</h2>" in page


def test_page_without_views_has_no_bundle():
    page = html_page("plain", ["<p>hi</p>", Section("", "<p>there</p>")])
    assert BUNDLE_MARKER not in page
    assert "<p>hi</p>" in page and "<p>there</p>" in page


def test_page_escapes_title_and_headings():
    page = html_page("<x>", [Section("<y>", "<p>ok</p>")])
    assert "<x>" not in page and "&lt;x&gt;" in page and "&lt;y&gt;" in page


@pytest.mark.parametrize("bad", [[3], [None], "not a list", Section("a", "b")])
def test_page_rejects_bad_sections(bad):
    with pytest.raises(TypeError):
        html_page("t", bad)


def test_save_writes_standalone_page(tmp_path, views):
    path = views[0].save(tmp_path / "view.html")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.count(BUNDLE_MARKER) == 1
    assert remote_resource_refs(text) == []


def test_remote_resource_refs_flags_cdn_html():
    import circuitsvis.tokens

    cdn_html = circuitsvis.tokens.colored_tokens(["a"], [1.0]).cdn_src
    assert remote_resource_refs(cdn_html)
    assert remote_resource_refs('<script src="https://x.org/a.js"></script>')
    assert remote_resource_refs("<link rel=stylesheet href=//x.org/a.css>")


def test_inlined_plotly_has_no_cdn_address():
    import re

    from perm_circuits.views.html import plotly_js_inline

    js = plotly_js_inline()
    assert not re.search(r"https?://[^\s\"'`]*cdn", js) and "unpkg" not in js
