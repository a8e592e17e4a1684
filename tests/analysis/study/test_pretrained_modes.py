"""The ablation mode changes d32h2's L0H0 role, measured on the shipped checkpoint.

``head_roles(d32h2)`` with every mode (zero, mean, resample, binding-free, optimal) on the fixed
test set (5000 sequences, 1534 repeated), ablation seed 0, decisions under mean ablation:

- mean-ablating L0H0 leaves elimination at 100% and removes recall (0.0%): a duplicate/recall head;
- zero-ablating it does nearly the reverse: elimination 3.2%, recall 96.8% ("mixed": its clean
  output still carries recall, patching restores 0.94), and so do resample (67.9% / 29.3%) and
  optimal ablation (78.8% / 20.3%); binding-free resample (same queries) changes nothing;
- L0H1 ("mixed") and the MLP ("needed for both") are robust, and the verdict (the study's story does
  not hold) is the same in every mode.
"""

from __future__ import annotations

import pytest

from perm_circuits.analysis import head_roles

ROLES = (("zero", "mixed"), ("mean", "duplicate/recall"), ("resample", "mixed"),
         ("binding_free", "duplicate/recall"), ("optimal", "mixed"))


@pytest.fixture(scope="module")
def verdict(pretrained):
    return head_roles(pretrained("d32h2"), n_pair=1000, n_boot=200, circuits=False)


def test_l0h0_role_depends_on_the_ablation_mode(verdict):
    table = verdict.ablation
    expected = {  # (elimination, recall) with L0H0 ablated
        "zero": (0.0323, 0.9681), "mean": (1.0, 0.0), "resample": (0.6795, 0.2934),
        "binding_free": (1.0, 1.0), "optimal": (0.7882, 0.2027),
    }
    for how, (elimination, recall) in expected.items():
        row = table.get("L0H0", how)
        assert row.elimination_accuracy == pytest.approx(elimination, abs=0.002), how
        assert row.recall_accuracy == pytest.approx(recall, abs=0.002), how
    h0 = verdict.heads[0]
    assert h0.role == "duplicate/recall" and h0.role_by_how == ROLES
    assert h0.robust is False and h0.disagreeing == ("zero", "resample", "optimal")
    assert "L0H0 = duplicate/recall [mode-dependent (zero: mixed, mean: duplicate/recall," in verdict.summary()


def test_other_components_and_the_verdict_are_robust(verdict):
    h1, mlp = verdict.heads[1], verdict.mlps[0]
    assert h1.role == "mixed" and h1.robust and mlp.role == "needed for both" and mlp.robust
    assert verdict.mode_dependent == ["L0H0"]
    assert verdict.verdict_by_how == tuple((how, False) for how, _ in ROLES) and verdict.verdict_robust
    assert "The verdict is the same under every ablation mode judged" in verdict.summary()
    # the optimal constant never does worse than the mean on the test set it was fitted on
    for component in ("L0H0", "L0H1", "L0MLP"):
        optimal, mean = verdict.ablation.get(component, "optimal"), verdict.ablation.get(component, "mean")
        assert optimal.loss < mean.loss, component
    assert verdict.ablation.get("L0H1", "optimal").loss == pytest.approx(1.69, abs=0.02)
