"""One page builder: every HTML document the library writes comes from ``views.html.html_page``."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest

from perm_circuits.views.html import html_page, remote_resource_refs

SRC = Path(__file__).resolve().parents[2] / "src" / "perm_circuits"
DOCUMENT = re.compile(r"<!DOCTYPE|<html[\s>]|full_html\s*=\s*True|\.write_html\(", re.IGNORECASE)


def test_no_other_module_writes_an_html_document():
    found = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py")) if path.name != "html.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if DOCUMENT.search(line) and "DOCUMENT" not in line]
    assert found == []


def test_heading_and_css_options():
    page = html_page("A <b> title", ["<p>x</p>"])
    assert "<h1>A &lt;b&gt; title</h1>" in page and "font-family: system-ui" in page
    bare = html_page("A title", ["<p>x</p>"], heading=False, css="body { margin: 0; }")
    assert "<h1>" not in bare and "<style>body { margin: 0; }</style>" in bare and "<title>A title</title>" in bare
    raw = inspect.unwrap(html_page)  # as a user calls it, without the suite's runtime type checker
    with pytest.raises(TypeError, match="heading must be a bool, got str"):
        raw("t", [], heading="no")
    with pytest.raises(TypeError, match="css must be a str or None, got int"):
        raw("t", [], css=3)


def test_circuit_picture_and_figure_pages_come_from_the_builder(tmp_path):
    from perm_circuits.views.circuit_graph import circuit_graph
    from perm_circuits.views.figures import write_html

    picture = circuit_graph(["L0H0->logits"], n_layers=1, n_heads=1, mlp=False, title="toy circuit")
    page = picture.save(tmp_path / "circuit.html").read_text()
    assert page.startswith("<!DOCTYPE html>\n<html lang=\"en\">") and '<section class="pc-section">' in page
    assert "<title>toy circuit</title>" in page and picture.svg in page and "<h1>" not in page
    assert "background: #fff" in page and remote_resource_refs(page) == []
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]), layout={"title": {"text": "bars<br>two"}})
    text = write_html(fig, tmp_path / "fig.html", plotly_js="beside").read_text()
    assert text.startswith("<!DOCTYPE html>") and "<title>bars two</title>" in text and "<h1>" not in text
    assert '<section class="pc-section">' in text and "Plotly.newPlot" in text and remote_resource_refs(text) == []
