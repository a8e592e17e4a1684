"""docs/forner.md and the committed Forner tables agree with each other and with the code that made them.

``scripts/forner_results.py [--full]`` writes ``results/forner_{quick,full}*.csv`` from one run; here
the comparison rows are recomputed from the committed training log (the ODE integrated again), and
each generated block of the docs page must equal the rendering of its committed comparison table.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perm_circuits.pages.figures import FIGURES_DIR
from perm_circuits.pages.paper_figures import forner_svg
from perm_circuits.systems.forner import (
    FULL,
    QUICK,
    FornerConfig,
    compare_with_ode,
    comparison_markdown,
    comparison_rows,
    docs_markers,
    rollout_accuracy,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
KINDS = ("quick", "full")


def committed(kind: str):
    name = f"forner_{kind}"
    log = pd.read_csv(RESULTS / f"{name}.csv")
    ode = pd.read_csv(RESULTS / f"{name}_ode.csv")
    table = pd.read_csv(RESULTS / f"{name}_comparison.csv", keep_default_na=False)
    numbers = json.loads((RESULTS / f"{name}_numbers.json").read_text())
    return log, ode, table, numbers


@pytest.mark.parametrize("kind", KINDS)
def test_docs_page_quotes_the_committed_table(kind):
    _, _, table, numbers = committed(kind)
    text = (ROOT / "docs" / "forner.md").read_text()
    begin, end = docs_markers(quick=kind == "quick")
    block = text[text.index(begin): text.index(end) + len(end)]
    assert block == comparison_markdown(table, numbers["seconds"], quick=kind == "quick")
    assert "| yes |" in block


@pytest.mark.parametrize("kind", KINDS)
def test_comparison_rows_and_ode_table_follow_from_the_training_log(kind):
    log, ode, table, numbers = committed(kind)
    settings = QUICK if kind == "quick" else FULL
    assert numbers["settings"]["seeds"] == list(settings["seeds"]) == sorted(log["seed"].unique().tolist())
    assert numbers["settings"]["steps"] == settings["steps"] == log["step"].max()
    cfg = FornerConfig(**numbers["config"])
    again = compare_with_ode(log, cfg, numbers["settings"]["lr"])
    pd.testing.assert_frame_equal(again, ode, check_exact=False, rtol=1e-6, atol=1e-9)
    rows, measured = comparison_rows(log, ode, cfg, n_seeds=log["seed"].nunique())
    recomputed = pd.DataFrame([vars(r) for r in rows])
    assert recomputed["ours"].tolist() == table["ours"].tolist()
    assert recomputed["holds"].tolist() == table["holds"].tolist()
    for key in ("A_final", "rollout_accuracy_final", "eq18_max_gap", "A_half_alpha_ode"):
        assert measured[key] == pytest.approx(numbers[key], rel=1e-9)
    np.testing.assert_allclose(log["rollout_eq18"], rollout_accuracy(log["rho"].to_numpy(), cfg.N, cfg.L))


@pytest.mark.parametrize("kind", KINDS)
def test_the_docs_prose_reading_of_the_results(kind):
    """docs/forner.md, "Reading the results": S falls after its peak in every seed; the ODE tracks the
    order parameters on the plateau but its attention transition comes later than the simulation's."""
    log, _, _, numbers = committed(kind)
    for stats in numbers["per_seed"]:
        assert stats["S_final"] < stats["S_peak"] and stats["S_peak_alpha"] < stats["A_090_alpha"]
    assert max(numbers[f"ode_plateau_gap_{name}"] for name in "ARS") < 0.05
    assert numbers["A_half_alpha_ode"] > numbers["A_half_alpha_sim_mean"]
    assert log.groupby("seed")["rollout"].first().max() < 0.2 and log.groupby("seed")["rollout"].last().min() == 1.0


NS = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("kind", KINDS)
def test_docs_figure_is_the_committed_ode_table_drawn(kind):
    """docs/figures/forner_KIND.svg is forner_KIND_ode.csv drawn, the page embeds it, and the drawing
    shows the page's reading: the ODE's A crosses one half later than the simulation's."""
    log, ode, _, numbers = committed(kind)
    svg = (ROOT / FIGURES_DIR / f"forner_{kind}.svg").read_text(encoding="utf-8")
    assert svg == forner_svg(ode, log["seed"].nunique(), kind)
    assert f"](figures/forner_{kind}.svg)" in (ROOT / "docs" / "forner.md").read_text()
    root = ET.fromstring(svg)
    lines = {line.find(f"{NS}title").text: [tuple(map(float, p.split(","))) for p in line.get("points").split()]
             for line in root.findall(f"{NS}polyline")}
    n = log["seed"].nunique()
    simulated = f"A: simulation ({n} seed{'s' if n > 1 else ''})"
    assert sorted(lines) == sorted([simulated, "A: ODE (eq. 15)", f"rollout acc.: simulation ({n} seed{'s' if n > 1 else ''})",
                                    "rollout acc.: ODE (eq. 15)"])
    assert all(len(points) == len(ode) for points in lines.values())
    frame = next(r for r in root.findall(f"{NS}rect") if r.get("fill") == "none")
    half = float(frame.get("y")) + float(frame.get("height")) / 2  # pixel y of 0.5 (y axis 0..1)

    def first_x_above_half(points):
        return next(x for x, y in points if y <= half)

    assert first_x_above_half(lines[simulated]) < first_x_above_half(lines["A: ODE (eq. 15)"])
    assert numbers["A_half_alpha_ode"] > numbers["A_half_alpha_sim_mean"]
