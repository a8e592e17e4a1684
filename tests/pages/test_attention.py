"""The docs' attention heatmaps: rendered from the committed table, and the table from the shipped models.

* ``docs/figures/attention_*.svg`` equal, byte for byte, what ``scripts/build_results.py`` renders from
  ``results/attention_patterns.csv``; each has one cell per (group, query, key) and prints the
  table's weights;
* the committed table equals a fresh ``attention_table()`` (the shipped models on the pages' test set);
* the captions on ``docs/results.md`` say what the table shows.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.pages.attention import (
    ATTENTION_GROUPS,
    ATTENTION_TABLE,
    attention_csv,
    attention_figure_path,
    attention_figures,
    attention_svg,
    attention_table,
    read_attention_table,
)

ROOT = Path(__file__).resolve().parents[2]
NS = "{http://www.w3.org/2000/svg}"
HEADS = [("d16h1", 0, 0), ("d32h1", 0, 0), ("d32h2", 0, 0), ("d32h2", 0, 1)]
POSITIONS = 9  # x1 y1 ... x4 y4 x5


@pytest.fixture(scope="module")
def committed():
    return read_attention_table(ROOT / ATTENTION_TABLE)


def _weights(frame: pd.DataFrame, model: str, head: int, group: str) -> dict[tuple[int, int], float]:
    rows = frame[(frame["model"] == model) & (frame["head"] == head) & (frame["group"] == group)]
    return {(int(q), int(k)): float(w) for q, k, w in zip(rows["query"], rows["key"], rows["weight"])}


def test_committed_figures_are_rendered_from_the_committed_table(committed):
    figures = attention_figures(committed)
    assert sorted(map(str, figures)) == sorted(str(attention_figure_path(m, l, h)) for m, l, h in HEADS)
    for path, text in figures.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, f"{path} differs: run python scripts/build_results.py"
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for model, layer, head in HEADS:
        assert f"]({attention_figure_path(model, layer, head).relative_to('docs')})" in page


@pytest.mark.parametrize(("model", "layer", "head"), HEADS)
def test_each_heatmap_has_a_cell_per_position_pair_and_prints_the_table(committed, model, layer, head):
    root = ET.fromstring((ROOT / attention_figure_path(model, layer, head)).read_text(encoding="utf-8"))
    cells = root.findall(f"{NS}rect[@class='cell']")
    assert len(cells) == len(ATTENTION_GROUPS) * POSITIONS * POSITIONS  # 3 panels of 9 x 9
    causal = POSITIONS * (POSITIONS + 1) // 2
    notes = [c.find(f"{NS}title").text for c in cells]
    assert sum(1 for n in notes if n) == len(ATTENTION_GROUPS) * causal  # masked cells are blank and grey
    assert sum(1 for c in cells if c.get("fill") == "#f1f3f5") == len(ATTENTION_GROUPS) * (POSITIONS * POSITIONS - causal)
    # cells run panel by panel, row (query) by row, column (key) by column
    for g, group in enumerate(ATTENTION_GROUPS):
        weights = _weights(committed, model, head, group)
        for (query, key), weight in weights.items():
            assert notes[g * POSITIONS * POSITIONS + query * POSITIONS + key] == f"{weight:.2f}"
    # a weight of 1 (query x1 on itself) is full blue
    assert cells[0].get("fill") == "#1c7ed6" and notes[0] == "1.00"


def test_the_table_is_a_set_of_attention_patterns(committed):
    assert len(committed) == len(HEADS) * len(ATTENTION_GROUPS) * POSITIONS * (POSITIONS + 1) // 2
    sums = committed.groupby(["model", "layer", "head", "group", "query"])["weight"].sum()
    assert (sums - 1).abs().max() <= 5e-4  # each query's weights sum to 1 (4-decimal rounding)
    assert (committed["key"] <= committed["query"]).all()
    n = committed.groupby("group")["n"].first()
    assert n["new"] + n["repeated"] == n["all"] == 5000


def test_the_captions_say_what_the_table_shows(committed):
    last = POSITIONS - 1  # x5, the last query
    repeated, new = _weights(committed, "d32h2", 0, "repeated"), _weights(committed, "d32h2", 0, "new")
    # d32h2 L0H0: a repeated x5 attends most to x1; a new x5 most to itself
    assert max(range(POSITIONS), key=lambda k: repeated[(last, k)]) == 0
    assert max(range(POSITIONS), key=lambda k: new[(last, k)]) == last
    assert repeated[(last, 0)] > 0.5 > new[(last, 0)]
    # L0H1 and the one-head models: x5 spreads its attention over the earlier ys, in both groups alike
    for model, head in (("d32h2", 1), ("d16h1", 0), ("d32h1", 0)):
        for group in ("new", "repeated"):
            weights = _weights(committed, model, head, group)
            y_mass = sum(weights[(last, k)] for k in range(1, last, 2))
            assert y_mass > 0.8, (model, head, group, y_mass)
            assert max(weights[(last, k)] for k in range(1, last, 2)) < 0.5  # spread, not one y


def test_committed_table_equals_a_fresh_measurement(committed):
    fresh = attention_table()
    assert list(fresh.columns) == list(committed.columns) and len(fresh) == len(committed)
    key = ["model", "layer", "head", "group", "query", "key", "n"]
    assert fresh[key].equals(committed[key])
    assert (fresh["weight"] - committed["weight"]).abs().max() <= 1.5e-4
    assert attention_csv(committed) == (ROOT / ATTENTION_TABLE).read_text(encoding="utf-8")


def test_bad_input_is_refused(committed, tmp_path):
    with pytest.raises(TypeError, match="models must be a non-empty sequence"):
        attention_table("d32h2")
    with pytest.raises(ValueError, match=r"unknown model\(s\) \['d99h9'\]"):
        attention_table(["d99h9"])
    with pytest.raises(FileNotFoundError, match="no attention table at"):
        read_attention_table(tmp_path / "absent.csv")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['weight'\]"):
        attention_figures(committed.drop(columns="weight"))
    with pytest.raises(ValueError, match="no rows for d32h2 L0H2"):
        attention_svg(committed, "d32h2", 0, 2)
    with pytest.raises(ValueError, match=r"unknown group\(s\) \['odd'\]"):
        attention_figures(committed.assign(group="odd"))
