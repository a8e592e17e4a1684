"""The sweep report's census section (perm_circuits.census.summary + views.census_figures) on a tiny synthetic
sweep folder whose rows carry mechanism fingerprints."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.census import census_summary, has_fingerprints, wilson_interval
from perm_circuits.cli import main
from perm_circuits.sweep.store import write_row

TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "sweep_small.csv"
DUP = ("L0H1+L0MLP", "L0H0+L0H1+L0MLP", "L0H0")      # duplicate-gated
SHARED = ("L0H0+L0H1+L0MLP", "L0H0+L0H1+L0MLP", "-")  # shared-head
NO_RECALL = ("L0H1+L0MLP", "absent", "-")            # no recall
RUNS = {(0, 1): NO_RECALL, (0, 50): DUP, (1, 1): NO_RECALL, (1, 50): SHARED, (2, 1): DUP, (2, 50): DUP}


def _rows() -> list[dict]:
    template = pd.read_csv(TEMPLATE).iloc[0].to_dict()
    rows = []
    for (seed, epoch), (elim, recall, dup) in RUNS.items():
        row = {**template, "run_id": f"d32h2_s{seed}_e{epoch}", "status": "done", "d_model": 32, "n_heads": 2,
               "seed": seed, "epoch": epoch, "duplicate_heads": dup}
        for ref in ("test", "skill"):
            row[f"circuit_elimination_mean_{ref}"], row[f"circuit_recall_mean_{ref}"] = elim, recall
        rows.append({k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()})
    return rows


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("census_sweep")
    for row in _rows():
        write_row(out, row)
    return out


def test_class_frequencies_and_formation():
    frame = pd.DataFrame(_rows())
    summary = census_summary(frame)
    counts = summary.counts.set_index("class")
    assert counts.loc["duplicate-gated", "k"] == 2 and counts.loc["shared-head", "k"] == 1
    assert set(counts["n"]) == {3}  # three runs, each counted once at epoch 50
    assert (counts.loc["duplicate-gated", "low"], counts.loc["duplicate-gated", "high"]) == wilson_interval(2, 3)
    shares = summary.formation.set_index(["epoch", "class"])["share"]
    assert shares[(1.0, "no recall")] == pytest.approx(2 / 3) and shares[(1.0, "duplicate-gated")] == pytest.approx(1 / 3)
    assert shares[(50.0, "duplicate-gated")] == pytest.approx(2 / 3)
    # one row per run (no epoch column): every row is a run, and no formation
    final = frame[frame["epoch"] == 50].drop(columns="epoch")
    assert census_summary(final).formation.empty and census_summary(final).counts["n"].iloc[0] == 3


def test_rows_without_fingerprints_have_no_census():
    frame = pd.read_csv(TEMPLATE)
    assert not has_fingerprints(frame) and census_summary(frame) is None
    with pytest.raises(TypeError, match="DataFrame"):
        census_summary([1, 2])


def test_sweep_report_shows_the_classes_and_the_formation_figure(folder, tmp_path, capsys):
    page = tmp_path / "sweep.html"
    assert main(["sweep-report", str(folder), "--out", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "<h2>Mechanism classes (census)</h2>" in text
    assert "<td>duplicate-gated</td><td>2 / 3</td><td>67%</td>" in text
    assert "<td>shared-head</td><td>1 / 3</td><td>33%</td>" in text
    assert 'id="pc-sweep-census"' in text and "When each mechanism class forms" in text


def test_sweep_report_without_fingerprints_says_so(tmp_path):
    from perm_circuits.views import write_sweep_report

    text = write_sweep_report(pd.read_csv(TEMPLATE), tmp_path / "plain.html").read_text(encoding="utf-8")
    section = re.search(r"<h2>Mechanism classes \(census\)</h2>(.*?)<h2>", text, re.S).group(1)
    assert "carry no mechanism fingerprints" in html.unescape(section)
    assert 'id="pc-sweep-census"' not in text
