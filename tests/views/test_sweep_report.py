"""Tests of perm_circuits.views.sweep_report and of the shared plotly.js file (views.html)."""

from __future__ import annotations

import contextlib
import html
import io
import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from perm_circuits.cli import main
from perm_circuits.views import sweep_summary, write_sweep_report
from perm_circuits.views.html import (
    html_page,
    local_script_refs,
    offline_plotly,
    plotly_js_file_name,
    remote_resource_refs,
    write_plotly_js,
)
from perm_circuits.views.sweep_report import SWEEP_SECTIONS

from .test_sweep_figures import SWEEP_CSV

CDN_RE = re.compile(r"https?://[^\s\"'`<>]*(?:cdn|plot\.ly|jsdelivr|unpkg)")


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return pd.read_csv(SWEEP_CSV)


@pytest.fixture(scope="module")
def written(table, tmp_path_factory) -> Path:
    """The sweep page of the committed table, written once for the module."""
    return write_sweep_report(table, tmp_path_factory.mktemp("sweep") / "sweep.html")


@pytest.fixture
def fake_sweep(monkeypatch, table):
    """``perm_circuits.sweep.load_sweep`` stand-in (the engine is built elsewhere): returns the table."""
    calls: list[Path] = []

    def load_sweep(folder):
        calls.append(Path(folder))
        return table

    module = types.ModuleType("perm_circuits.sweep")
    module.load_sweep = load_sweep
    monkeypatch.setitem(sys.modules, "perm_circuits.sweep", module)
    return calls


# ----------------------------------------------------------------------------- summary


def test_summary_numbers(table):
    summary = sweep_summary(table)
    assert len(summary) == 12
    row = summary[(summary.d_model == 16) & (summary.n_heads == 2) & (summary.dropout == 0.1)].iloc[0]
    assert (row.done, row.failed, row.learned) == (2, 1, 1) and row.share_learned == 0.5
    cell = table[(table.d_model == 16) & (table.n_heads == 2) & (table.dropout == 0.1) & (table.status == "done")]
    assert row.median_epoch_recall == cell["epoch_recall_99"].median() == cell["epoch_recall_99"].dropna().iloc[0]
    assert row.verdict_zero == "fails 1, open 1" and row.verdict_mean == "fails 1, holds 1"
    all_failed = summary[(summary.d_model == 8) & (summary.n_heads == 2) & (summary.dropout == 0.1)].iloc[0]
    assert (all_failed.done, all_failed.failed) == (0, 3) and pd.isna(all_failed.share_learned)
    assert summary["done"].sum() == 31 and summary["failed"].sum() == 5 and summary["learned"].sum() == 14
    assert [c for c in summary if c.startswith("verdict_")] == ["verdict_zero", "verdict_mean", "verdict_resample"]


# ----------------------------------------------------------------------------- the page


def test_page_has_sections_figures_table_and_errors(written, table):
    text = written.read_text(encoding="utf-8")
    assert re.findall(r"<h2>([^<]+)</h2>", text) == [html.escape(s, quote=False) for s in SWEEP_SECTIONS]
    assert text.count('class="plotly-graph-div"') == 4
    assert 'id="pc-sweep-survival"' in text  # the time-to-recall curves
    assert "<title>perm_circuits sweep: 36 runs</title>" in text
    assert "36 runs: 31 finished, 5 failed." in text
    assert "<td>67% (2/3)</td>" in text and "<td>50% (1/2)</td>" in text  # d16h1 p0, d16h2 p0.1
    assert text.count('<pre class="pc-error">') == 5
    for _, row in table[table.status == "failed"].iterrows():
        assert html.escape(row["error"].strip(), quote=False).replace('"', "&quot;") in text
        assert f"(run {row['run_id']})" in text


def test_page_shares_one_offline_plotly_js(written):
    folder = written.parent
    name = plotly_js_file_name()
    assert sorted(p.name for p in folder.iterdir()) == sorted([written.name, name])
    text = written.read_text(encoding="utf-8")
    assert local_script_refs(text, folder) == [name]
    assert remote_resource_refs(text) == [] and CDN_RE.search(text) is None
    assert len(text) < 500_000  # plotly.js (about 4.8 MB) is not inlined
    shared = (folder / name).read_text(encoding="utf-8")
    assert shared.partition("\n")[2] == offline_plotly(get_plotlyjs()) and CDN_RE.search(shared) is None
    assert CDN_RE.search(get_plotlyjs()) is not None  # ... which the rewrite removed


def test_pages_written_together_share_the_file(written, table):
    folder = written.parent
    js = folder / plotly_js_file_name()
    before = js.stat().st_mtime_ns
    second = write_sweep_report(table.iloc[:18], folder / "half.html", title="first half")
    assert js.stat().st_mtime_ns == before  # kept, not rewritten
    assert sorted(p.name for p in folder.iterdir()) == sorted(["half.html", written.name, js.name])
    assert "<title>first half</title>" in second.read_text(encoding="utf-8")
    second.unlink()


def test_refuses_overwrite_and_bad_input_before_writing(written, table, tmp_path):
    with pytest.raises(ValueError, match="exists; pass force=True"):
        write_sweep_report(table, written)
    assert write_sweep_report(table, written, force=True) == written
    with pytest.raises(ValueError, match=r"ending in \.html, got '.*page\.txt'"):
        write_sweep_report(table, tmp_path / "page.txt")
    (tmp_path / "dir.html").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        write_sweep_report(table, tmp_path / "dir.html")
    with pytest.raises(TypeError, match="source must be a sweep DataFrame or a sweep folder"):
        write_sweep_report(42, tmp_path / "p.html")
    with pytest.raises(ValueError, match="is not a sweep folder"):
        write_sweep_report(tmp_path / "missing", tmp_path / "p.html")
    with pytest.raises(ValueError, match=r"\['recall_accuracy'\]"):
        write_sweep_report(table.drop(columns="recall_accuracy"), tmp_path / "out" / "p.html")
    with pytest.raises(TypeError, match="force must be a bool"):
        write_sweep_report(table, tmp_path / "p.html", force="yes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.html"]  # nothing written


def test_folder_source_uses_load_sweep_and_the_cli(fake_sweep, tmp_path):
    runs = tmp_path / "sweep"
    runs.mkdir()
    page = tmp_path / "pages" / "sweep.html"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        assert main(["sweep-report", str(runs), "--out", str(page)]) == 0
        assert main(["sweep-report", str(runs), "--out", str(page)]) == 2  # exists
        assert main(["sweep-report", str(runs), "--out", str(page), "--force", "--title", "grid"]) == 0
    assert fake_sweep == [runs, runs]
    assert stdout.getvalue().splitlines() == [str(page), str(page)]
    assert "sweep-report: error: out" in stderr.getvalue() and "--force" in stderr.getvalue()
    text = page.read_text(encoding="utf-8")
    assert "<title>grid</title>" in text and text.count('class="plotly-graph-div"') == 4
    assert (page.parent / plotly_js_file_name()).is_file()


# ----------------------------------------------------------------------------- shared plotly.js (views.html)


def test_html_page_loads_a_local_plotly_file_only():
    name = plotly_js_file_name()
    page = html_page("p", ["<div></div>"], include_plotlyjs=name)
    assert f'<script type="text/javascript" src="{name}"></script>' in page
    assert remote_resource_refs(page) == [] and local_script_refs(page) == [name]
    for bad in ("https://cdn.example.invalid/plotly.min.js", "//cdn.x/p.js", "/abs/p.js", "../up/p.js", "file:///p.js", "p.css"):
        with pytest.raises(ValueError, match="relative path of a local .js"):
            html_page("p", [], include_plotlyjs=bad)
    with pytest.raises(FileNotFoundError, match=re.escape(f"['{name}'] are missing")):
        local_script_refs(page, "/nonexistent")


def test_remote_resource_refs_rejects_non_relative_scripts():
    assert remote_resource_refs('<script src="plotly-3.0.min.js"></script><script src="js/a.js"></script>') == []
    for src in ("https://x.org/a.js", "//x.org/a.js", "file:///tmp/a.js", "/tmp/a.js", "../a.js", "data:text/javascript,1"):
        assert remote_resource_refs(f'<script src="{src}"></script>'), src


def test_write_plotly_js_refuses_a_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        write_plotly_js(tmp_path / "missing")
    path = write_plotly_js(tmp_path)
    assert path == tmp_path / plotly_js_file_name() and path.stat().st_size > 1_000_000
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


# ----------------------------------------------------------------------------- real browser


@pytest.mark.browser
def test_sweep_page_renders_in_chromium(written):
    from .browser import open_page, require_chromium

    require_chromium()
    report = open_page(written, timeout_s=30)
    assert report.remote_requests == []
    assert report.console_errors == [] and report.page_errors == []
    assert (report.plotly_total, report.plotly_rendered) == (4, 4)
    assert report.rendered_in_time and report.ok
