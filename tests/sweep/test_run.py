"""One run's row pieces: roles under every mode from one measurement, first epochs, failures as rows."""

from __future__ import annotations

import math

import pytest

from perm_circuits.analysis import HOWS, head_roles
from perm_circuits.sweep import SweepSpec, run_one
from perm_circuits.sweep.run import VERDICT, first_epoch, roles_columns

from .conftest import TINY


@pytest.mark.slow
def test_roles_columns_equal_head_roles_under_each_mode(pretrained):
    model = pretrained("d32h2")
    sizes = dict(n=300, n_pair=60, n_boot=10)
    columns = roles_columns(model, model.task_config, **sizes)
    for how in HOWS:
        verdict = head_roles(model, task=model.task_config, how=how, circuits=False, **sizes)
        assert columns[f"verdict_{how}"] == VERDICT[verdict.story_holds]
        for component in ("L0H0", "L0H1", "L0MLP"):
            assert columns[f"role_{how}_{component}"] == verdict.role(component)
        for claim in verdict.claims:
            assert columns[f"claim_{how}_{claim.claim}"] == claim.status
    assert len([c for c in columns if c.startswith("verdict_")]) == len(HOWS)
    # d32h2 recalls, so the patching path ran: the binding-head claim is judged, not skipped
    assert {columns[f"claim_{how}_binding_head"] for how in HOWS} <= {"supported", "contradicted", "inconclusive"}


def test_first_epoch():
    rows = [{"epoch": 1, "recall_accuracy": 0.5}, {"epoch": 2, "recall_accuracy": float("nan")},
            {"epoch": 3, "recall_accuracy": 0.99}, {"epoch": 4, "recall_accuracy": 1.0}]
    assert first_epoch(rows, "recall_accuracy") == 3
    assert first_epoch(rows, "recall_accuracy", 0.999) == 4
    assert math.isnan(first_epoch(rows[:2], "recall_accuracy"))


def test_run_one_never_raises():
    run = SweepSpec.from_dict(TINY).runs[0]
    broken = {**run.config, "train": {**run.config["train"], "epochs": -1}}
    row, files = run_one(run.run_id, broken, keep_model=True)
    assert row["status"] == "failed" and files is None
    assert "ValueError: epochs must be > 0, got -1" in row["error"]
    assert row["run_id"] == run.run_id and row["d_model"] == 16 and "recall_accuracy" not in row
    assert row["wall_seconds"] >= 0 and row["version_torch"]


def test_lean_analysis_measures_recall_exhaustively_and_skips_roles(pretrained):
    from perm_circuits.sweep.run import analysis_columns

    model = pretrained("d16h1")
    row = analysis_columns(model, model.task_config, {"n": 100, "n_pair": 10, "n_boot": 10, "recall_n": 0, "roles": 0})
    assert row == {"recall_gen_x1": 1.0, "recall_gen_x2": 0.0, "recall_gen_x3": 0.0, "recall_gen_x4": 0.0}


def test_history_curves_round_trip_and_match_the_first_epoch():
    from perm_circuits.sweep.run import history_curve, parse_curve

    rows = [{"epoch": 1, "recall_accuracy": 0.1234567890123}, {"epoch": 2}, {"epoch": 3, "recall_accuracy": 0.995}]
    cell = history_curve(rows, "recall_accuracy")
    assert cell == "0.1234567890123,nan,0.995"
    values = parse_curve(cell)
    assert values[0] == 0.1234567890123 and math.isnan(values[1]) and values[2] == 0.995
    assert parse_curve("") == [] and parse_curve(None) == [] and parse_curve(float("nan")) == []


def test_a_row_keeps_its_per_epoch_curves():
    spec = {**TINY, "fixed": {**TINY["fixed"], "epochs": 2}, "analysis": {**TINY["analysis"], "roles": 0}}
    run = SweepSpec.from_dict(spec).runs[0]
    row, _ = run_one(run.run_id, run.config)
    assert row["status"] == "done", row["error"]
    from perm_circuits.sweep.run import parse_curve

    recall = parse_curve(row["recall_curve"])
    elimination = parse_curve(row["elimination_curve"])
    assert len(recall) == len(elimination) == row["epochs_run"] == 2
    assert recall[-1] == row["recall_accuracy"] and elimination[-1] == row["elimination_accuracy"]


def test_analysis_columns_names_bad_analysis_keys_before_measuring(pretrained):
    from perm_circuits.sweep.run import analysis_columns

    model = pretrained("d16h1")
    with pytest.raises(ValueError, match=r"analysis has unknown keys \['bogus'\] and lacks \['recall_n', 'n', 'n_pair', 'n_boot'\]"):
        analysis_columns(model, model.task_config, {"bogus": 1})
    with pytest.raises(ValueError, match=r"unknown keys \[\] and lacks \['recall_n'\]"):
        analysis_columns(model, model.task_config, {"roles": 0})
