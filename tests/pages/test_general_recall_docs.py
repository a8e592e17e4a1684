"""docs/general_recall.md: its numbers come from the committed tables, and its prose claims hold."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from perm_circuits.pages.build import (
    GENERAL_NUMBERS,
    GENERAL_PAGE,
    GENERAL_TEMPLATES,
    GENERALISATION_FIGURE,
    GENERALISATION_TABLE,
    build_pages,
    read_numbers,
)
from perm_circuits.pages.figures import generalisation_svg
from perm_circuits.pages.generalisation import (
    ANY_MODEL,
    DYNAMICS_SIGNALS,
    any_model_numbers,
    dynamics_numbers,
    generalisation_numbers,
    load_generalisation_table,
)
from perm_circuits.pages.render import template_keys

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def numbers():
    table = read_numbers(ROOT / GENERAL_NUMBERS)
    table.update(generalisation_numbers(load_generalisation_table(ROOT / GENERALISATION_TABLE)))
    return table


def test_the_committed_page_is_the_rendered_tables():
    assert (ROOT / GENERAL_PAGE).read_text(encoding="utf-8") == build_pages(ROOT)[GENERAL_PAGE]


def test_the_committed_figure_is_the_sweep_table_drawn(numbers):
    """docs/figures/generalisation.svg is the committed sweep drawn, the page embeds it, and it has one
    panel per (layers, training distribution) and one cell per configuration, annotated with the
    page's generalising/finished counts."""
    svg = (ROOT / GENERALISATION_FIGURE).read_text(encoding="utf-8")
    table = load_generalisation_table(ROOT / GENERALISATION_TABLE)
    assert svg == generalisation_svg(table)
    assert "](figures/generalisation.svg)" in (ROOT / GENERAL_PAGE).read_text(encoding="utf-8")
    ns = "{http://www.w3.org/2000/svg}"
    notes = [cell.find(f"{ns}title").text for cell in ET.fromstring(svg).findall(f"{ns}rect[@class='cell']")]
    configs = table.groupby(["n_layers", "repeat_sources", "n_heads", "d_model"], sort=True).size()
    assert len(notes) == len(configs) == 16
    keys = [f"generalisation.d{d}h{h}l{layers}.x{src.replace(',', '')}" for layers, src, h, d in configs.index]
    expected = [f"{numbers[key + '.generalise']}/{numbers[key + '.done']}" for key in keys]
    assert notes == expected
    # trained on x1 only nothing generalises; trained on every x_k: the one-layer d32h2 and every two-layer model
    drawn = {(layers, src, h, d) for (layers, src, h, d), note in zip(configs.index, notes) if not note.startswith("0/")}
    assert drawn == {(1, "1,2,3,4", 2, 32)} | {(2, "1,2,3,4", h, d) for h in (1, 2) for d in (16, 32)}


def test_every_placeholder_names_a_number(numbers):
    for template in GENERAL_TEMPLATES:
        keys = template_keys((ROOT / template).read_text(encoding="utf-8"))
        assert keys and [k for k in keys if k not in numbers] == []


@pytest.mark.parametrize("template", GENERAL_TEMPLATES)
def test_templates_quote_no_hand_typed_result(template):
    prose = re.sub(r"\{\{.*?\}\}", " ", (ROOT / template).read_text(encoding="utf-8"))
    prose = re.sub(r"`[^`]*`", " ", prose)
    found = set(re.findall(r"(?<![\w.])(?:x?\d+(?:[.-]\d+)+|\d+%)", prose))
    assert found - {"0.99", "95%"} == set()


def test_the_prose_claims_hold(numbers):
    """Each qualitative sentence of the page, checked against its numbers."""
    # "trained on repeats of x1 only, no run generalises"; the two-layer runs learn the shortcut
    assert numbers["generalisation.l1.x1.generalise"] == 0 and numbers["generalisation.l2.x1.generalise"] == 0
    assert numbers["generalisation.l2.x1.shortcut"] > numbers["generalisation.l2.x1.done"] / 2
    # "for the study's d32h2 the training distribution is all that stands between it and general recall"
    assert numbers["generalisation.d32h2l1.x1234.generalise"] == numbers["generalisation.d32h2l1.x1234.done"] == 5
    assert numbers["generalisation.d32h2l1.x1.generalise"] == 0
    # "two layers are not required": the one-layer d32h2 generalises; one-layer d16 / one-head never do
    assert numbers["generalisation.d32h2l1.x1234.generalise"] > 0
    for config in ("d16h1l1", "d16h2l1", "d32h1l1"):
        assert numbers[f"generalisation.{config}.x1234.generalise"] == 0, config
    # "the smallest configuration that generalises is d16h1l2"; "the one-layer d32h2 has twice as many"
    assert numbers["generalisation.smallest"] == "d16h1l2" == ANY_MODEL.removesuffix("-any")
    from perm_circuits.pages.generalisation import parameters

    assert parameters(1, 32, 2) == 2 * numbers["generalisation.smallest.parameters"]
    # "the one-layer d32h2 splits the work between its two heads ... in every generalising seed"; "about a quarter"
    assert numbers["generalisation.d32h2l1.x1234.split_heads"] == numbers["generalisation.d32h2l1.x1234.generalise"]
    assert 0.15 < numbers["generalisation.d32h2l1.x1234.y_head_yk.min"] <= numbers["generalisation.d32h2l1.x1234.y_head_yk.max"] < 0.35
    for how in ("zero", "mean", "resample"):  # "both heads and the MLP are necessary"
        for component in ("L0H0", "L0H1", "L0MLP"):
            assert numbers[f"generalisation.d32h2l1.x1234.necessary.{how}.{component}"] == 5
    # "no model uses the induction circuit"
    assert numbers["generalisation.story.holds"] == 0 and numbers["generalisation.story.runs"] == 40
    # the induction story does not hold on the shipped model, and both heads are necessary in every mode
    assert numbers["any.story.holds"] == "does not hold"
    assert min(numbers[f"any.recall.x{k}"] for k in range(1, 5)) >= 0.99
    for how in ("zero", "mean", "resample"):
        for role in ("previous", "induction"):
            assert numbers[f"any.ablate.{how}.{role}.recall.max"] < 0.5
            assert numbers[f"any.ablate.{how}.{role}.elimination"] < 0.5
    # the dynamics table's columns are seeds 0, 3 and 4: the generalising seeds of d16h1l2
    table = load_generalisation_table(ROOT / GENERALISATION_TABLE)
    rows = table[(table["n_layers"] == 2) & (table["d_model"] == 16) & (table["n_heads"] == 1)
                 & (table["repeat_sources"] == "1,2,3,4")]
    general = rows[rows[[f"recall_gen_x{k}" for k in range(1, 5)]].min(axis=1) >= 0.99]
    assert numbers["any.dynamics.seed_list"] == ",".join(str(int(s)) for s in sorted(general["seed"])) == "0,3,4"


def test_committed_numbers_equal_a_fresh_measurement(pretrained):
    """The shipped model's story and ablations, and the dynamics from the committed records."""
    from perm_circuits.dynamics import load_dynamics
    from perm_circuits.models import PRETRAINED_DIR

    committed = read_numbers(ROOT / GENERAL_NUMBERS)
    fresh = any_model_numbers(pretrained(ANY_MODEL))
    records = {0: load_dynamics(PRETRAINED_DIR / ANY_MODEL)}
    for path in sorted((ROOT / "results" / "general_recall_dynamics").glob("seed*.json")):
        records[int(path.stem.removeprefix("seed"))] = load_dynamics(path)
    fresh.update(dynamics_numbers(records, DYNAMICS_SIGNALS))
    for key, value in fresh.items():
        if isinstance(value, str):
            assert committed[key] == value, key
        elif math.isnan(value):
            assert math.isnan(committed[key]), key
        else:
            assert committed[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
