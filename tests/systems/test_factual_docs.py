"""docs/factual.md shows exactly the committed quick-run tables, and those tables agree with each other."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from perm_circuits.systems.factual import DOCS_BEGIN, DOCS_END, results_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_docs_table_is_rendered_from_the_committed_csv():
    comparison = pd.read_csv(ROOT / "results" / "factual_quick.csv")
    capacity = pd.read_csv(ROOT / "results" / "factual_quick_capacity.csv")
    page = (ROOT / "docs" / "factual.md").read_text()
    block = page.split(DOCS_BEGIN, 1)[1].split(DOCS_END, 1)[0].strip()
    assert block == results_markdown(comparison, capacity)


def test_committed_tables_agree():
    comparison = pd.read_csv(ROOT / "results" / "factual_quick.csv")
    capacity = pd.read_csv(ROOT / "results" / "factual_quick_capacity.csv")
    runs = pd.read_csv(ROOT / "results" / "factual_quick_runs.csv")
    x, y = capacity["params"].map(math.log), capacity["facts_stored"].map(math.log)
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    row = comparison[comparison["claim"].str.startswith("facts stored")].iloc[0]
    assert f"slope {slope:.2f}" in row["ours"]
    assert str(row["holds"]) == str(0.75 <= slope <= 1.25)
    for cap in capacity.itertuples(index=False):  # each capacity: a stored rung, and the next tried rung failed
        mine = runs[(runs["seed"] == cap.seed) & (runs["d_model"] == cap.d_model) & (runs["d_mlp"] == cap.d_mlp)]
        assert mine[mine["facts"] == cap.facts_stored]["stored"].all()
        assert not mine[mine["facts"] > cap.facts_stored]["stored"].any()
        assert len(mine) == cap.runs
