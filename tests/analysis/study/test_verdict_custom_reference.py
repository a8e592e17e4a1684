"""head_roles(reference=<a TaskBatch>): a batch of one's own as the ablation reference, recorded as "custom"
on the shipped d32h2."""

from __future__ import annotations

import pytest

from perm_circuits.analysis import head_roles
from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set

OPTIONS = dict(hows=("mean", "zero"), n_pair=60, n_boot=10, circuits=False, induction=False, probe=False)


@pytest.fixture(scope="module")
def model(pretrained):
    return pretrained("d32h2")


@pytest.fixture(scope="module")
def test_set(model):
    return make_test_set(TaskConfig.from_dict({**model.task_config.to_dict(), "repeat_ratio": 0.3}), n=300, seed=5)


def test_the_test_set_as_a_batch_matches_the_test_reference(model, test_set):
    test = head_roles(model, test_set, **OPTIONS)
    custom = head_roles(model, test_set, reference=test_set, **OPTIONS)
    assert (test.reference, custom.reference) == ("test", "custom")
    assert custom.claims.reference == "custom" and custom.columns()["reference"] == "custom"
    assert custom.ablation.reference == "batch of 300"
    assert "a batch of one's own" in custom.summary()
    for component in ("L0H0", "L0H1", "L0MLP"):
        a, b = test.ablation.get(component, "mean"), custom.ablation.get(component, "mean")
        names = ("elimination_accuracy", "recall_accuracy")
        assert [a[m] for m in names] == pytest.approx([b[m] for m in names])
        assert test.role(component) == custom.role(component)


def test_a_recall_only_reference_keeps_recall_without_l0h0(model, test_set):
    recall_rows = make_test_set(TaskConfig.from_dict({**model.task_config.to_dict(), "repeat_ratio": 1.0}),
                                n=300, seed=6)
    test = head_roles(model, test_set, **OPTIONS)
    custom = head_roles(model, test_set, reference=recall_rows, **OPTIONS)
    # mean-ablating the duplicate-token head with the recall rows' mean keeps "repeated": recall survives
    assert custom.ablation.get("L0H0", "mean")["recall_accuracy"] > test.ablation.get("L0H0", "mean")["recall_accuracy"] + 0.3


def test_bad_references_are_refused_before_any_work(model):
    with pytest.raises(ValueError, match="reference must be one of"):
        head_roles(model, reference="custom", **OPTIONS)
    with pytest.raises(TypeError, match="reference"):
        head_roles(model, reference=3, **OPTIONS)


def test_verdict_reference_labels():
    from perm_circuits.analysis.study.reference import verdict_reference

    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=10, seed=0)
    assert verdict_reference("skill") == ("skill", None)
    assert verdict_reference(batch) == ("custom", batch)
    assert verdict_reference("custom", batch_allowed=False) == ("custom", None)
    with pytest.raises(TypeError, match="name from REFERENCES or a TaskBatch, got int"):
        verdict_reference(3)
    with pytest.raises(TypeError, match="got TaskBatch"):
        verdict_reference(batch, batch_allowed=False)
