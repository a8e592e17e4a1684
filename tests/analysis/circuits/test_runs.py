"""The circuit runs' shared ablation cache (:func:`shared_ablations`): an entry is keyed by the ids of the
model, the reference batch and the hooks it was built from, so the cache keeps those objects alive while
it lives; otherwise a reference freed after one call (one skill's rows) could pass its address, and its
cached means, to the next call's new batch (the recall circuit of ``head_roles(reference="skill")`` then
depended on memory layout)."""

from __future__ import annotations

import gc
import weakref

import pytest

from perm_circuits.analysis.circuits.criteria import Node, circuit_metrics
from perm_circuits.analysis.circuits.runs import shared_ablations
from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set

CIRCUIT = [Node(0, 1, "last"), Node(0, None, "last")]


@pytest.fixture(scope="module")
def model(pretrained):
    return pretrained("d32h2").eval()


def _error(model, test_set, reference) -> float:
    return circuit_metrics(model, CIRCUIT, test_set, how="mean", reference=reference,
                           max_exhaustive=0).recall.faithfulness_error


def test_inside_the_block_each_reference_gives_what_it_gives_alone(model):
    test_set = make_test_set(TaskConfig(repeat_ratio=0.3), n=120, seed=5)
    references = [make_test_set(TaskConfig(repeat_ratio=ratio), n=80, seed=seed) for ratio, seed in ((0.0, 1), (1.0, 2))]
    alone = [_error(model, test_set, reference) for reference in references]
    assert abs(alone[0] - alone[1]) > 1e-3  # the two references give different numbers
    alive = []
    with shared_ablations():
        shared = []
        for ratio, seed in ((0.0, 1), (1.0, 2)):  # each reference made, used and dropped in turn
            reference = make_test_set(TaskConfig(repeat_ratio=ratio), n=80, seed=seed)
            shared.append(_error(model, test_set, reference))
            alive.append(weakref.ref(reference))
            del reference
            gc.collect()
        assert all(ref() is not None for ref in alive)  # no address in a key can be handed on
    assert shared == pytest.approx(alone, abs=1e-12)
    gc.collect()
    assert all(ref() is None for ref in alive)  # released with the cache
