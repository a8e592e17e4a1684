"""The documentation site builds offline with ``mkdocs build --strict`` (API pages from docstrings).

The notebooks appear under "Notebooks" with their committed outputs (mkdocs-jupyter, not executed
again): their plotly figures and circuitsvis views are in the pages, and the pages load plotly.js
and the circuitsvis bundle from local copies in the site, never from a remote host.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # its shared fixture takes seconds (tests/README.md)

ROOT = Path(__file__).resolve().parent.parent
REMOTE_RESOURCE = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//[^\"'\s>]*",
                             re.IGNORECASE)
REMOTE_IMPORT = re.compile(r"(?:\bfrom|\bimport\s*\()\s*[\"'`](?:https?:)?//[^\"'`]*", re.IGNORECASE)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module (about 30 s)."""
    if shutil.which("mkdocs") is None and not (Path(sys.executable).parent / "mkdocs").exists():
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    if importlib.util.find_spec("mkdocs_jupyter") is None:
        pytest.skip("mkdocs-jupyter is not installed (pip install -e '.[dev]')")
    folder = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(folder)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return folder


def test_mkdocs_build_strict(site):
    html = (site / "api" / "core" / "index.html").read_text()
    assert "bayes_posterior" in html and "load_pretrained" in html
    assert "fonts.googleapis" not in (site / "index.html").read_text()
    pages = sorted((site / "notebooks").glob("*/index.html"))
    assert [p.parent.name for p in pages] == [n.stem for n in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    scripts = site / "assets" / "javascripts"
    assert (scripts / "plotly.min.js").stat().st_size > 1_000_000 and (scripts / "circuitsvis.js").stat().st_size > 100_000
    assert "https://cdn" not in (scripts / "plotly.min.js").read_text(encoding="utf-8")
    figures = 0
    for page in pages:
        html = page.read_text(encoding="utf-8")
        remote = REMOTE_RESOURCE.findall(html) + REMOTE_IMPORT.findall(html)
        assert not remote and "unpkg" not in html, f"{page} loads from a remote host: {remote}"
        sources = re.findall(r"<script\b[^>]*\bsrc\s*=\s*[\"']([^\"']*)", html)
        assert all(src.startswith("../../assets/javascripts/") and (page.parent / src).is_file() for src in sources), sources
        assert "../../assets/javascripts/plotly.min.js" in sources and "../../assets/javascripts/circuitsvis.js" in sources
        assert "jp-OutputArea-output" in html  # the committed outputs are on the page
        figures += len(re.findall(r'<div\b[^>]*\bid="pc-figure-\d+"', html))
    assert figures >= 10  # every notebook's plotly figures (12 today)
    view = (site / "notebooks" / "02_dissect_recall" / "index.html").read_text(encoding="utf-8")
    assert 'data-circuitsvis="AttentionHeads"' in view and "CircuitsVis.render(" in view
    # the other pages load neither library
    assert "plotly.min.js" not in (site / "results" / "index.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def browser():
    """Chromium, launched once for the notebook pages (each in a fresh browser context)."""
    from tests.views.browser import one_browser, require_chromium

    require_chromium()
    with one_browser() as launched:
        yield launched


@pytest.mark.browser
@pytest.mark.parametrize("name", ["02_dissect_recall", "03_dynamics"])
def test_notebook_pages_render_offline_in_chromium(site, browser, name):
    """The committed plotly figures and circuitsvis views draw in a browser that may not reach the network."""
    from tests.views.browser import open_page

    report = open_page(site / "notebooks" / name / "index.html", timeout_s=30)
    assert not report.remote_requests and not report.console_errors and not report.page_errors, report
    assert report.plotly_total >= 1 and report.plotly_rendered == report.plotly_total, report
    assert report.views_mounted == report.views_total, report
    if name == "02_dissect_recall":
        assert report.views_total == 1  # the circuitsvis attention view
