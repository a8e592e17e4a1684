"""The ablation reference as an argument of the roles and claims: ``reference="test"``
(the whole test set) vs ``"skill"`` (each skill's own rows), on the shipped d32h2."""

from __future__ import annotations

import math

import pytest

from perm_circuits.ablation_modes import REFERENCES, check_reference_name
from perm_circuits.analysis.interventions.ablation_table import AblationRow
from perm_circuits.analysis.interventions.permutation_table import ABLATION_METRICS
from perm_circuits.analysis.study.reference import _merge_row


@pytest.fixture(scope="module")
def verdicts(pretrained):
    from perm_circuits.analysis import head_roles

    model = pretrained("d32h2")
    return {ref: head_roles(model, n=600, hows=("mean", "zero"), n_pair=200, n_boot=10, circuits=False,
                            induction=False, probe=False, reference=ref) for ref in REFERENCES}


def test_reference_is_recorded_in_every_result(verdicts):
    for ref, verdict in verdicts.items():
        assert verdict.reference == ref
        assert verdict.claims.reference == ref
        assert set(verdict.to_dataframe()["reference"]) == {ref}
        assert set(verdict.claims.to_dataframe()["reference"]) == {ref}
    assert verdicts["test"].ablation.reference == "test set"
    assert verdicts["skill"].ablation.reference == "each skill's own rows"
    assert "each skill's own rows" in verdicts["skill"].summary()


def test_zero_ablation_does_not_depend_on_the_reference(verdicts):
    test, skill = (verdicts[r].ablation for r in ("test", "skill"))
    assert test.baseline["recall_accuracy"] == skill.baseline["recall_accuracy"]
    for component in ("L0H0", "L0H1", "L0MLP"):
        a, b = test.get(component, "zero"), skill.get(component, "zero")
        assert (a["elimination_accuracy"], a["recall_accuracy"]) == (b["elimination_accuracy"], b["recall_accuracy"])
        assert a.test_loss == pytest.approx(b.test_loss, rel=1e-5)


def test_duplicate_head_is_needed_for_recall_only_against_the_test_set(verdicts):
    # d32h2's L0H0 tells repeated from new queries: mean-ablated over the test set recall collapses,
    # mean-ablated over the recall rows themselves it survives.
    test = next(h for h in verdicts["test"].heads if h.component == "L0H0")
    skill = next(h for h in verdicts["skill"].heads if h.component == "L0H0")
    assert test.recall_retention < 0.25
    assert skill.recall_retention > 0.75
    assert "(each skill's own rows)" in skill.reason and "(each skill's own rows)" not in test.reason


def test_bad_reference_is_refused_before_any_work(pretrained):
    from perm_circuits.analysis import head_roles

    with pytest.raises(ValueError, match="reference must be one of"):
        head_roles(pretrained("d32h2"), reference="recall")
    with pytest.raises(ValueError, match="'tests'"):
        check_reference_name("tests")


def test_merge_takes_each_skill_from_its_own_rows():
    def row_of(elim_acc, recall_acc, mae, loss, elim_loss, recall_loss, follows):
        values = (elim_acc, recall_acc, mae, elim_loss, recall_loss, follows)
        return AblationRow("L0H0", "mean", 0, 0, dict(zip(ABLATION_METRICS, values)), loss)

    elim = row_of(0.9, math.nan, 0.1, 1.0, 0.5, math.nan, 0.2)
    recall = row_of(math.nan, 0.6, 0.3, 2.0, math.nan, 0.8, 0.4)
    row = _merge_row(elim, recall, 3, 1)
    assert (row["elimination_accuracy"], row["recall_accuracy"], row["elimination_loss"], row["recall_loss"]) == (
        0.9, 0.6, 0.5, 0.8)
    assert row["early_mae_train"] == pytest.approx(0.15)
    assert row.test_loss == pytest.approx(1.25)
    assert row["follows_reference"] == pytest.approx(0.25)
