"""head_roles' circuit step (step 5) draws its ablated values from the verdict's reference."""

from __future__ import annotations

import pytest

from perm_circuits.analysis import head_roles

pytestmark = pytest.mark.slow

SIZES = dict(n=300, n_pair=50, n_boot=10, hows=("mean", "zero"), how="mean", probe=False)


@pytest.fixture(scope="module")
def verdicts(pretrained):
    model = pretrained("d32h2")
    return {reference: head_roles(model, reference=reference, **SIZES) for reference in ("test", "skill")}


def test_the_circuits_are_proposed_and_measured_against_the_verdicts_reference(verdicts):
    recall = {ref: next(c for c in v.circuits if c.skill == "recall") for ref, v in verdicts.items()}
    # against the test set, d32h2's duplicate-token head L0H0 is in the recall circuit; within the
    # recall rows it tells nothing apart, so against the skill's own rows it drops out
    assert "L0H0@last" in recall["test"].nodes and "L0H0@last" not in recall["skill"].nodes
    assert recall["test"].metrics.reference == "test" and recall["skill"].metrics.reference == "skill"
    assert recall["skill"].by_mode.reference == "skill"
    assert recall["skill"].metrics.recall.faithfulness == pytest.approx(1.0, abs=0.2)
