"""Real-browser test of the task report's first screen, in Debian's chromium, offline.

The screenshot is saved to ``artifacts/task_report_birth_first_screen.png`` at the repository root
(gitignored).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .browser import open_page, require_chromium
from .test_task_report import task_pages  # noqa: F401  (shared, written once)

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@pytest.fixture(autouse=True)
def _need_chromium() -> None:
    require_chromium()


@pytest.mark.slow
def test_the_task_pages_first_screen_is_the_circuit_picture_and_the_findings(task_pages):  # noqa: F811
    """The bigram-trigger page opens with its discovered circuit and the findings, all inside the first
    1280 x 900 screen; every section below starts collapsed, and its views and figures still render."""
    data, page = task_pages["birth"]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "task_report_birth_first_screen.png"
    report = open_page(page, timeout_s=30, first_screen=shot, count={
        "circuits": ".pc-hero svg", "nodes": ".pc-hero svg .node", "in_circuit": ".pc-hero svg .node.in-circuit",
        "edges": ".pc-hero svg .edge", "findings": ".pc-findings li", "collapsed": "details.pc-details:not([open])",
        "open": "details.pc-details[open]",
    })
    assert report.remote_requests == [] and report.console_errors == [] and report.page_errors == []
    assert report.ok  # the circuitsvis views and plotly figures inside the closed <details> rendered too
    assert (report.views_total, report.plotly_total) == (2, 2)  # one view per layer; sequence 0 and the ablation
    assert report.counts["circuits"] == (1, 1)
    nodes, visible_nodes = report.counts["nodes"]
    assert nodes >= 4 and visible_nodes == nodes  # embed, the previous-token head, the induction head, logits
    assert report.counts["in_circuit"][0] >= 3 and report.counts["in_circuit"][1] == report.counts["in_circuit"][0]
    edges, visible_edges = report.counts["edges"]
    assert edges >= data.skills["task"].n_edges and visible_edges == edges
    assert report.counts["findings"] == (len(data.findings), len(data.findings)) and 3 <= len(data.findings) <= 5
    assert report.counts["collapsed"][0] >= 9 and report.counts["open"] == (0, 0)
    assert shot.stat().st_size > 20_000
