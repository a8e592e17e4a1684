"""Static SVG charts for the docs: valid XML, one element per series / cell, values where they belong."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from perm_circuits.pages.figures import phase_svg, time_to_recall_svg
from perm_circuits.views.svg_charts import Series, svg_heatmaps, svg_line_chart

NS = "{http://www.w3.org/2000/svg}"


def test_line_chart_draws_each_series_and_steps():
    svg = svg_line_chart([Series("a", [1, 10, 100], [0, 0.5, 1], step=True), Series("b", [1, 100], [1, 0])],
                         title="t", x_label="x", y_label="y", x_log=True, y_range=(0, 1))
    root = ET.fromstring(svg)
    lines = root.findall(f"{NS}polyline")
    assert [line.find(f"{NS}title").text for line in lines] == ["a", "b"]
    # a step series has a corner before each rise: 3 points + 2 corners
    assert len(lines[0].get("points").split()) == 5 and len(lines[1].get("points").split()) == 2
    # log axis: x = 10 sits halfway between 1 and 100
    xs = [float(p.split(",")[0]) for p in lines[0].get("points").split()]
    assert xs[2] == pytest.approx((xs[0] + xs[-1]) / 2, abs=0.1)
    with pytest.raises(ValueError, match="positive"):
        svg_line_chart([Series("a", [0, 1], [0, 1])], title="t", x_label="x", y_label="y", x_log=True)


def test_log_y_axis_puts_ten_halfway_between_one_and_a_hundred():
    svg = svg_line_chart([Series("a", [1, 2, 3], [1, 10, 100])], title="t", x_label="x", y_label="y", y_log=True)
    ys = [float(p.split(",")[1]) for p in ET.fromstring(svg).find(f"{NS}polyline").get("points").split()]
    assert ys[0] > ys[1] > ys[2] and ys[1] == pytest.approx((ys[0] + ys[2]) / 2, abs=0.1)
    labels = [t.text for t in ET.fromstring(svg).findall(f"{NS}text")]
    assert {"1", "2", "5", "10", "20", "50", "100"} <= set(labels)
    with pytest.raises(ValueError, match="log y axis needs positive"):
        svg_line_chart([Series("a", [1, 2], [0, 1])], title="t", x_label="x", y_label="y", y_log=True)


def test_heatmap_colours_follow_the_share():
    svg = svg_heatmaps([("p", ["c1", "c2"], ["r1"], [[(0.0, "0/5"), (1.0, "5/5")]]),
                        ("q", ["c1"], ["r1"], [[(math.nan, "–")]])], title="t", x_label="x", y_label="y")
    cells = ET.fromstring(svg).findall(f"{NS}rect[@class='cell']")
    assert [c.get("fill") for c in cells] == ["#ffffff", "#1c7ed6", "#f1f3f5"]


def test_phase_and_survival_figures_from_a_table():
    frame = pd.DataFrame([
        {"status": "done", "d_model": 8, "n_heads": 1, "dropout": 0.0, "seed": s, "recall_accuracy": acc,
         "epoch_recall_99": ep, "samples": 100, "epochs_run": 10}
        for s, (acc, ep) in enumerate([(1.0, 3.0), (0.5, math.nan)])
    ])
    cells = ET.fromstring(phase_svg(frame, "t")).findall(f"{NS}rect[@class='cell']")
    assert len(cells) == 1 and cells[0].find(f"{NS}title").text == "1/2"
    lines = ET.fromstring(time_to_recall_svg({"only": frame})).findall(f"{NS}polyline")
    assert [line.find(f"{NS}title").text for line in lines] == ["d8h1 p0 (only)"]


def test_heatmap_note_size_and_blank_cells():
    svg = svg_heatmaps([("p", ["a", "b"], ["r"], [[(0.25, "0.25"), (math.nan, "")]])], title="t", x_label="x",
                       y_label="y", cell=28, note_size=9)
    root = ET.fromstring(svg)
    cells = root.findall(f"{NS}rect[@class='cell']")
    assert [c.get("width") for c in cells] == ["26", "26"] and cells[1].get("fill") == "#f1f3f5"
    notes = [t for t in root.findall(f"{NS}text") if t.text == "0.25"]
    assert len(notes) == 1 and notes[0].get("font-size") == "9"
    assert not [t for t in root.findall(f"{NS}text") if t.text is None]  # a blank cell prints no text element
