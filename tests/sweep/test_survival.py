"""Time to recall: Kaplan-Meier curves on hand-built sweep tables, and the figure that draws them."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perm_circuits.survival import recall_by, time_to_recall
from perm_circuits.views.survival_figures import time_to_recall_figure


def _table(rows):
    base = {"status": "done", "n_heads": 1, "dropout": 0.0, "samples": 100, "epochs": 10}
    return pd.DataFrame([{**base, **row} for row in rows])


def test_common_budget_gives_the_share_of_seeds_learned_by_n():
    frame = _table([
        {"d_model": 8, "seed": 0, "epoch_recall_99": 2.0, "epochs_run": 5},   # learned at 200, then stopped early
        {"d_model": 8, "seed": 1, "epoch_recall_99": 4.0, "epochs_run": 10},  # learned at 400
        {"d_model": 8, "seed": 2, "epoch_recall_99": math.nan, "epochs_run": 10},  # censored at 1000
        {"d_model": 8, "seed": 3, "epoch_recall_99": math.nan, "epochs_run": 10},
        {"d_model": 8, "seed": 4, "epoch_recall_99": math.nan, "epochs_run": 10, "status": "failed"},
    ])
    curves = time_to_recall(frame)
    assert curves["samples_seen"].tolist() == [0.0, 200.0, 400.0, 1000.0]
    assert curves["learned"].tolist() == [0.0, 0.25, 0.5, 0.5]
    assert curves["at_risk"].tolist() == [4, 4, 3, 2]
    assert curves["censored"].tolist() == [0, 0, 0, 2]
    assert set(curves["seeds"]) == {4} and set(curves["budget"]) == {1000.0}
    read = recall_by(curves, [100, 300, 1000, 2000])
    assert read.loc[0, "by_100"] == 0.0 and read.loc[0, "by_300"] == 0.25 and read.loc[0, "by_1000"] == 0.5
    assert math.isnan(read.loc[0, "by_2000"])  # past the budget: unknown, not 0.5


def test_kaplan_meier_under_unequal_budgets():
    # one run censored early (budget 300) leaves 3 at risk when the others learn at 400 and 600
    frame = _table([
        {"d_model": 8, "seed": 0, "epoch_recall_99": 1.0, "epochs_run": 10},
        {"d_model": 8, "seed": 1, "epoch_recall_99": math.nan, "epochs_run": 3},
        {"d_model": 8, "seed": 2, "epoch_recall_99": 4.0, "epochs_run": 10},
        {"d_model": 8, "seed": 3, "epoch_recall_99": 6.0, "epochs_run": 10},
        {"d_model": 8, "seed": 4, "epoch_recall_99": math.nan, "epochs_run": 10},
    ])
    curves = time_to_recall(frame).set_index("samples_seen")
    # S(100) = 4/5; S(400) = 4/5 * 2/3; S(600) = 4/5 * 2/3 * 1/2
    assert curves.loc[100.0, "learned"] == pytest.approx(1 - 4 / 5)
    assert curves.loc[400.0, "learned"] == pytest.approx(1 - 4 / 5 * 2 / 3)
    assert curves.loc[600.0, "learned"] == pytest.approx(1 - 4 / 5 * 2 / 3 * 1 / 2)
    assert curves.loc[300.0, "censored"] == 1 and curves.loc[400.0, "at_risk"] == 3


def test_configurations_get_their_own_curves_and_the_figure_draws_each():
    frame = _table([
        {"d_model": 8, "seed": 0, "epoch_recall_99": 3.0, "epochs_run": 10},
        {"d_model": 16, "seed": 0, "epoch_recall_99": math.nan, "epochs_run": 10},
        {"d_model": 16, "seed": 0, "epoch_recall_99": math.nan, "epochs_run": 10, "dropout": 0.1},
    ])
    curves = time_to_recall(frame)
    assert len(curves.groupby(["d_model", "n_heads", "dropout"])) == 3
    fig = time_to_recall_figure(curves, marks=[500])
    lines = [t for t in fig.data if t.mode == "lines"]
    assert sorted(t.name for t in lines) == ["d16 h1", "d16 h1", "d8 h1"]
    d8 = next(t for t in lines if t.name == "d8 h1")
    assert list(d8.y) == [0.0, 1.0, 1.0] and d8.x[-1] == 1000.0  # carried to the budget
    assert sum(1 for t in fig.data if t.mode == "markers") == 2  # the two censored curves


def test_bad_tables_are_refused():
    with pytest.raises(TypeError, match="DataFrame"):
        time_to_recall([1, 2])
    with pytest.raises(ValueError, match="epochs_run"):
        time_to_recall(_table([{"d_model": 8, "seed": 0, "epoch_recall_99": 1.0}]))
    with pytest.raises(ValueError, match="no finished run"):
        time_to_recall(_table([{"d_model": 8, "seed": 0, "epoch_recall_99": 1.0, "epochs_run": 2, "status": "failed"}]))
    with pytest.raises(ValueError, match="positive"):
        recall_by(time_to_recall(_table([{"d_model": 8, "seed": 0, "epoch_recall_99": 1.0, "epochs_run": 2}])), [0])


def test_seeds_that_all_learned_and_stopped_early_are_read_up_to_the_planned_budget():
    # three seeds learn at 200, 300, 400 sequences and stop early; the planned budget is 10 x 100
    frame = pd.DataFrame({
        "status": "done", "d_model": 16, "n_heads": 1, "dropout": 0.0, "seed": [0, 1, 2],
        "epochs": 10, "samples": 100, "epoch_recall_99": [2.0, 3.0, 4.0], "epochs_run": [5, 6, 7],
        "recall_accuracy": 1.0,
    })
    curves = time_to_recall(frame)
    assert set(curves["budget"]) == {1000.0}  # no seed left without recall: nothing is censored
    read = recall_by(curves, [250, 1000]).iloc[0]
    assert read["by_250"] == pytest.approx(1 / 3) and read["by_1000"] == 1.0
    # one seed that never learns, censored at its end (700), makes 1000 unknown again
    frame.loc[2, ["epoch_recall_99", "recall_accuracy"]] = [math.nan, 0.1]
    read = recall_by(time_to_recall(frame), [1000]).iloc[0]
    assert math.isnan(read["by_1000"])
