"""Real-browser test of the HTML report: every page renders in Debian's chromium, offline.

Screenshots are saved to ``artifacts/report_NAME.png`` at the repository root (gitignored).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .browser import one_browser, open_page, require_chromium
from .test_report import MODEL_FIGURES, MODEL_VIEWS, report_pages  # noqa: F401  (shared, written once)

pytestmark = pytest.mark.slow  # its shared fixture takes seconds (tests/README.md)

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
EXPECTED = {  # page -> (circuitsvis views, plotly figures)
    "d16h1.html": (MODEL_VIEWS, MODEL_FIGURES),
    "d32h2.html": (MODEL_VIEWS, MODEL_FIGURES),
    "index.html": (2, 2),
}


@pytest.fixture(scope="module", autouse=True)
def _need_chromium():
    """Chromium, launched once for the module's pages (each page in a fresh browser context)."""
    require_chromium()
    with one_browser():
        yield


@pytest.mark.parametrize("name", list(EXPECTED))
def test_report_page_renders_offline(report_pages, name):  # noqa: F811
    (page,) = [p for p in report_pages if p.name == name]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"report_{page.stem}.png"

    report = open_page(page, shot, timeout_s=30)

    views, figures = EXPECTED[name]
    assert report.remote_requests == []
    assert report.console_errors == [] and report.page_errors == []
    assert (report.views_total, report.views_mounted) == (views, views)
    assert (report.plotly_total, report.plotly_rendered) == (figures, figures)
    assert report.rendered_in_time and report.ok
    assert shot.stat().st_size > 50_000


def test_the_first_screen_is_the_circuit_pictures_and_the_findings(report_pages):  # noqa: F811
    """The d32h2 page opens with one drawn circuit per skill (elimination, recall) and the findings,
    all inside the first 1280 x 900 screen; the long table sections start collapsed."""
    (page,) = [p for p in report_pages if p.name == "d32h2.html"]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report_d32h2_first_screen.png"
    report = open_page(page, timeout_s=30, first_screen=shot, count={
        "circuits": ".pc-hero svg", "nodes": ".pc-hero svg .node", "edges": ".pc-hero svg .edge",
        "findings": ".pc-findings li", "collapsed": "details.pc-details:not([open])",
    })
    assert report.ok
    assert report.counts["circuits"] == (2, 2)
    nodes, visible_nodes = report.counts["nodes"]
    assert nodes >= 2 * 5 and visible_nodes == nodes  # embed, 2 heads, MLP, logits in each picture
    edges, visible_edges = report.counts["edges"]
    assert edges >= 2 and visible_edges == edges
    assert 3 <= report.counts["findings"][0] <= 5 and report.counts["findings"][1] == report.counts["findings"][0]
    assert report.counts["collapsed"][0] >= 4
    assert shot.stat().st_size > 20_000
