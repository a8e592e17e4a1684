"""docs/birth.md shows the committed ``--quick`` run (results/birth_quick), and that run's table is
what the code computes from its own numbers."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from perm_circuits.systems.birth import (
    FULL_COMMAND,
    QUICK,
    BirthSettings,
    compare,
    describe_settings,
    describe_time,
    load_results,
    markdown_table,
    seed_results,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "birth.md").read_text(encoding="utf-8")


def test_page_shows_the_committed_table_settings_and_time():
    table, numbers = load_results(ROOT / "results" / "birth_quick")
    assert markdown_table(table) in PAGE
    assert describe_settings(numbers["settings"]) in PAGE
    assert describe_time(numbers) in PAGE
    assert FULL_COMMAND in PAGE


def test_committed_table_is_computed_from_the_committed_numbers():
    table, numbers = load_results(ROOT / "results" / "birth_quick")
    settings = BirthSettings(**{**numbers["settings"], "seeds": tuple(numbers["settings"]["seeds"])})
    assert settings == QUICK  # the committed run is the current --quick
    rows = compare(seed_results(numbers), settings)
    assert [r.ours for r in rows] == list(table["ours"])
    assert [str(r.holds) for r in rows] == list(table["holds"].astype(str))
    assert [r.claim for r in rows] == list(table["claim"])
    assert asdict(settings)["T"] == 64 and numbers["cpu_seconds_total"] < 300  # --quick: < 5 min on one core
