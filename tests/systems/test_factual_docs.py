"""docs/factual.md shows exactly the committed quick- and full-run tables, and those tables agree with each other."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.systems.factual import DOCS_MARKERS, results_markdown

ROOT = Path(__file__).resolve().parents[2]
RUNS = ("quick", "full")


def tables(run: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return tuple(pd.read_csv(ROOT / "results" / f"factual_{run}{suffix}.csv") for suffix in ("", "_capacity", "_runs"))


@pytest.mark.parametrize("run", RUNS)
def test_docs_table_is_rendered_from_the_committed_csv(run):
    comparison, capacity, _ = tables(run)
    begin, end = DOCS_MARKERS[run]
    page = (ROOT / "docs" / "factual.md").read_text()
    block = page.split(begin, 1)[1].split(end, 1)[0].strip()
    assert block == results_markdown(comparison, capacity, run=run)


@pytest.mark.parametrize("run", RUNS)
def test_committed_tables_agree(run):
    comparison, capacity, runs = tables(run)
    x, y = capacity["params"].map(math.log), capacity["facts_stored"].map(math.log)
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    row = comparison[comparison["claim"].str.startswith("facts stored")].iloc[0]
    assert f"slope {slope:.2f}" in row["ours"]
    assert str(row["holds"]) == str(0.75 <= slope <= 1.25)
    for cap in capacity.itertuples(index=False):  # each capacity: a stored rung, and every larger rung tried failed
        mine = runs[(runs["seed"] == cap.seed) & (runs["d_model"] == cap.d_model) & (runs["d_mlp"] == cap.d_mlp)]
        assert mine[mine["facts"] == cap.facts_stored]["stored"].all()
        assert not mine[mine["facts"] > cap.facts_stored]["stored"].any()
        assert (mine["facts"] > cap.facts_stored).any()  # the bracket's failed rung was run
        assert len(mine) == cap.runs
