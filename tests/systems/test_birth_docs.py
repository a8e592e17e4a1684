"""docs/birth.md shows the committed ``--quick`` run (results/birth_quick), and that run's table is
what the code computes from its own numbers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

import pytest

from perm_circuits.pages.figures import FIGURES_DIR
from perm_circuits.pages.paper_figures import BIRTH_NUMBERS, BIRTH_PROBES, birth_positions_svg, birth_probes_svg

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


NS = "{http://www.w3.org/2000/svg}"


def drawn_series(svg: str) -> dict[str, list[tuple[float, float]]]:
    """Each line of a committed chart: its legend name -> its pixel points."""
    return {line.find(f"{NS}title").text: [tuple(map(float, p.split(","))) for p in line.get("points").split()]
            for line in ET.fromstring(svg).findall(f"{NS}polyline")}


@pytest.mark.parametrize("name, draw", [("birth_probes", birth_probes_svg), ("birth_positions", birth_positions_svg)])
def test_committed_figures_are_the_committed_numbers_drawn(name, draw):
    numbers = json.loads((ROOT / BIRTH_NUMBERS).read_text(encoding="utf-8"))
    assert (ROOT / FIGURES_DIR / f"{name}.svg").read_text(encoding="utf-8") == draw(numbers)
    assert f"](figures/{name}.svg)" in PAGE


def test_probe_figure_draws_every_probe_of_every_seed_at_every_logged_step():
    _, numbers = load_results(ROOT / "results" / "birth_quick")
    lines = drawn_series((ROOT / FIGURES_DIR / "birth_probes.svg").read_text(encoding="utf-8"))
    seeds = [s["seed"] for s in numbers["seeds"]]
    assert sorted(lines) == sorted(f"{probe}, seed {seed}" for probe in BIRTH_PROBES for seed in seeds)
    assert len(lines) == 4 * 3
    for seed in numbers["seeds"]:
        assert len(lines[f"W_O2, seed {seed['seed']}"]) == len(seed["probes"])


def test_position_figure_shows_early_positions_above_late_ones_at_the_end():
    """The page's "early positions are stored first": in every seed the drawn W_K1 early-half curve
    ends above the late-half one (smaller pixel y), as the committed final probes say."""
    _, numbers = load_results(ROOT / "results" / "birth_quick")
    lines = drawn_series((ROOT / FIGURES_DIR / "birth_positions.svg").read_text(encoding="utf-8"))
    assert len(lines) == 2 * len(numbers["seeds"])
    for seed in numbers["seeds"]:
        early, late = lines[f"W_K1_early, seed {seed['seed']}"][-1], lines[f"W_K1_late, seed {seed['seed']}"][-1]
        assert early[0] == late[0] and early[1] < late[1]
        assert seed["final"]["W_K1_early"] > seed["final"]["W_K1_late"] + 0.3
