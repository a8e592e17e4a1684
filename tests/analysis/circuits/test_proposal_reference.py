"""propose_circuit(reference=...): the vocabulary of circuit_metrics ("test", "skill", a batch -> "custom"),
recorded on the result; on the shipped d32h2 the recall proposal needs L0H0 only against the test set."""

from __future__ import annotations

import pickle

import pytest

from perm_circuits.analysis.circuits.criteria import Node, ProposedCircuit, circuit_metrics, propose_circuit


@pytest.fixture(scope="module")
def model(pretrained):
    return pretrained("d32h2").eval()


def test_skill_reference_drops_the_duplicate_token_head(model):
    test = propose_circuit(model, "recall", n=300, how="mean")
    skill = propose_circuit(model, "recall", n=300, how="mean", reference="skill")
    assert isinstance(test, ProposedCircuit) and (test.reference, skill.reference) == ("test", "skill")
    assert test == (Node(0, 0, "last"), Node(0, 1, "last"), Node(0, None, "last"))
    assert skill == (Node(0, 1, "last"), Node(0, None, "last"))  # the recall rows' own mean keeps "repeated"
    # the proposal is what circuit_metrics measures under the same reference
    assert circuit_metrics(model, skill, n=300, how="mean", reference="skill", max_exhaustive=0
                           ).recall.faithfulness_error <= 0.1
    again = pickle.loads(pickle.dumps(skill))
    assert again == skill and again.reference == "skill"


def test_a_batch_is_custom_and_a_bad_name_is_refused(model):
    from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set

    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=100, seed=1)
    assert propose_circuit(model, "elimination", batch, how="zero", reference=batch).reference == "custom"
    with pytest.raises(ValueError, match="reference must be one of"):
        propose_circuit(model, "recall", how="mean", reference="recall")
