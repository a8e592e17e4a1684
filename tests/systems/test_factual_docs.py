"""docs/factual.md shows exactly the committed quick- and full-run tables, and those tables agree with each other."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.pages.figures import FIGURES_DIR
from perm_circuits.pages.paper_figures import FACTUAL_CAPACITY, FACTUAL_TRAJECTORY, factual_capacity_svg, factual_trajectory_svg
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


NS = "{http://www.w3.org/2000/svg}"
PAGE = ROOT / "docs" / "factual.md"


def drawn_series(svg: str) -> dict[str, list[tuple[float, float]]]:
    return {line.find(f"{NS}title").text: [tuple(map(float, p.split(","))) for p in line.get("points").split()]
            for line in ET.fromstring(svg).findall(f"{NS}polyline")}


@pytest.mark.parametrize("name, table, draw", [("factual_capacity", FACTUAL_CAPACITY, factual_capacity_svg),
                                               ("factual_trajectory", FACTUAL_TRAJECTORY, factual_trajectory_svg)])
def test_docs_figures_are_the_committed_tables_drawn(name, table, draw):
    assert (ROOT / FIGURES_DIR / f"{name}.svg").read_text(encoding="utf-8") == draw(pd.read_csv(ROOT / table))
    assert f"](figures/{name}.svg)" in PAGE.read_text()


def test_capacity_figure_is_log_log_with_the_tables_slope():
    """One line per seed with one point per capacity row, a fit line labelled with the slope the
    full comparison table reports, and log-log axes: in pixels the fit line is exactly ``slope``
    times as steep as the slope-1 line."""
    comparison, capacity, _ = tables("full")
    lines = drawn_series((ROOT / FIGURES_DIR / "factual_capacity.svg").read_text(encoding="utf-8"))
    row = comparison[comparison["claim"].str.startswith("facts stored")].iloc[0]
    fit = next(name for name in lines if name.startswith("fit: "))
    assert fit.removeprefix("fit: ") in row["ours"]  # "slope 1.16"
    assert len(lines) == capacity["seed"].nunique() + 2
    for seed, rows in capacity.groupby("seed"):
        assert len(lines[f"seed {seed}"]) == len(rows)

    def steepness(points):
        (x0, y0), (x1, y1) = points
        return (y1 - y0) / (x1 - x0)

    ratio = steepness(lines[fit]) / steepness(lines["slope 1 (paper)"])
    assert ratio == pytest.approx(float(fit.removeprefix("fit: slope ")), abs=0.01)
    assert 0.75 <= ratio <= 1.25  # the row's verdict: linear


def test_trajectory_figure_draws_every_logged_step():
    trajectory = pd.read_csv(ROOT / FACTUAL_TRAJECTORY)
    svg = (ROOT / FIGURES_DIR / "factual_trajectory.svg").read_text(encoding="utf-8")
    lines = drawn_series(svg)
    assert sorted(lines) == ["loss", "relation only loss", "subject only loss"]
    assert all(len(points) == len(trajectory) for points in lines.values())
    # the loss starts at log|A| (the highest drawn point: the top of the plot) and ends near 0 (its bottom)
    frame = next(r for r in ET.fromstring(svg).findall(f"{NS}rect") if r.get("fill") == "none")
    top, height = float(frame.get("y")), float(frame.get("height"))
    assert lines["loss"][0][1] == pytest.approx(top, abs=0.1)
    assert (top + height - lines["loss"][-1][1]) / height < 0.02
    assert trajectory["loss"].iloc[-1] < 0.02 * trajectory["loss"].iloc[0]


def test_task_example_runs_as_written():
    """The page's code block runs in a fresh namespace; uniform logits over the answers cost log|A|."""
    import re

    (block,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    lines = block.strip().splitlines()
    namespace: dict = {}
    exec(compile("\n".join(lines[:-1]), str(PAGE), "exec"), namespace)
    metrics = eval(compile(lines[-1].split("#")[0], str(PAGE), "eval"), namespace)
    assert list(metrics) == ["loss", "fact_accuracy", "relation_only_loss", "subject_only_loss", "kl_to_relation_prior"]
    assert metrics["loss"] == pytest.approx(math.log(4 * 8))  # R D answers, as the page's "initial loss" row says
    # a quarter of the mass on the relation's block: -log(1/4) for the relation, KL(uniform over D || uniform over R D)
    assert metrics["relation_only_loss"] == pytest.approx(math.log(4)) and metrics["kl_to_relation_prior"] == pytest.approx(math.log(4))
