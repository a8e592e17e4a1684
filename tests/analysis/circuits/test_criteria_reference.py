"""circuit_metrics(reference=...): "test" (the test set) vs "skill" (each subgroup against its own rows), on the
shipped d32h2, whose recall circuit needs L0H0 only against the test set."""

from __future__ import annotations

import pytest

from perm_circuits.analysis.circuits.criteria import circuit_metrics

CIRCUIT = ["L0H1", "L0MLP"]  # d32h2's recall circuit without its duplicate-token head L0H0


@pytest.fixture(scope="module")
def model(pretrained):
    return pretrained("d32h2").eval()


def test_reference_changes_whether_recall_needs_l0h0(model):
    test = circuit_metrics(model, CIRCUIT, n=300, how="mean", max_exhaustive=1)
    skill = circuit_metrics(model, CIRCUIT, n=300, how="mean", reference="skill", max_exhaustive=1)
    assert (test.reference, skill.reference) == ("test", "skill")
    assert (skill.elimination.n, skill.recall.n) == (test.elimination.n, test.recall.n)
    assert skill.n_samples == test.n_samples == 300
    assert test.recall.faithfulness < 0.0      # without L0H0 the test-set mean says "new query": recall breaks
    assert skill.recall.faithfulness > 0.9     # the recall rows' own mean keeps "repeated": recall stands
    assert test.elimination.faithfulness > 0.85 and skill.elimination.faithfulness > 0.85


def test_zero_ablation_ignores_the_reference(model):
    a = circuit_metrics(model, CIRCUIT, n=200, how="zero", max_exhaustive=1)
    b = circuit_metrics(model, CIRCUIT, n=200, how="zero", reference="skill", max_exhaustive=1)
    assert a.recall.faithfulness == pytest.approx(b.recall.faithfulness, abs=1e-5)


def test_a_batch_is_custom_and_a_bad_name_is_refused(model):
    from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set

    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=100, seed=1)
    assert circuit_metrics(model, CIRCUIT, batch, how="zero", reference=batch, max_exhaustive=0).reference == "custom"
    with pytest.raises(ValueError, match="reference must be one of"):
        circuit_metrics(model, CIRCUIT, how="mean", reference="recall")


def test_faithfulness_by_mode_takes_the_reference(model):
    from perm_circuits.analysis.circuits.criteria import faithfulness_by_mode

    test = faithfulness_by_mode(model, CIRCUIT, n=300, hows=["mean", "zero"])
    skill = faithfulness_by_mode(model, CIRCUIT, n=300, hows=["mean", "zero"], reference="skill")
    assert (test.reference, skill.reference) == ("test", "skill")
    assert len(skill.rows) == len(test.rows) == 4
    assert test.get("mean", "recall").faithfulness < 0.0 < 0.9 < skill.get("mean", "recall").faithfulness
    assert test.get("zero", "recall").faithfulness == pytest.approx(skill.get("zero", "recall").faithfulness, abs=1e-5)
