"""docs/census.md is generated from results/census_fingerprints.csv, and its numbers follow from the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from perm_circuits.census import wilson_interval
from perm_circuits.pages.census_page import (
    CENSUS_PAGE,
    census_pages,
    class_counts,
    epoch_spread,
    final_rows,
    formation,
    load_census,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table():
    return load_census(ROOT)


def test_committed_page_and_figures_equal_a_fresh_rendering():
    pages = census_pages(ROOT)
    assert CENSUS_PAGE in pages
    for path, text in pages.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, f"{path} is stale: run python scripts/build_results.py"
    for figure in (p for p in pages if p.suffix == ".svg"):
        assert f"figures/{figure.name}" in pages[CENSUS_PAGE]


def test_the_table_holds_the_shipped_models_and_census_runs(table):
    assert set(table[table["source"] == "shipped"]["config"]) == {"d16h1", "d32h1", "d32h2"}
    census = table[table["source"] == "census"]
    assert set(census["epoch"]) <= {1, 2, 4, 8, 16, 32, 50}
    assert not census.duplicated(["config", "seed", "epoch"]).any()


def test_class_counts_and_intervals_follow_from_the_rows(table):
    finals = final_rows(table)
    counts = class_counts(finals)
    for config, group in counts.groupby("config"):
        assert group["k"].sum() == (finals["config"] == config).sum() == group["n"].iloc[0]
        for row in group.itertuples(index=False):
            assert (row.low, row.high) == wilson_interval(row.k, row.n)
            assert f"| {config} | {row[1]} | {row.k} / {row.n} |" in census_pages(ROOT)[CENSUS_PAGE]


def test_formation_shares_sum_to_one(table):
    for config in table[table["source"] == "census"]["config"].unique():
        share = formation(table, config)
        assert ((share.drop(columns="n").sum(axis=1) - 1).abs() < 1e-9).all()


def test_epoch_spread(table):
    for config in table[table["source"] == "census"]["config"].unique():
        spread = epoch_spread(table, config)
        assert spread["n"] == (final_rows(table)["config"] == config).sum()
        if spread["n"] > spread["never"]:
            assert spread["min"] <= spread["q1"] <= spread["median"] <= spread["q3"] <= spread["max"]
