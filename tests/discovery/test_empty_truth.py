"""An empty truth (nothing to explain under a mode) is one documented result for every method."""

from __future__ import annotations

import math

import pytest
import torch

from perm_circuits.discovery import METHODS, prepare_edges
from perm_circuits.models import task_config_of
from perm_circuits.tasks import PermutationTask
from perm_circuits.tasks.base import TaskBatch


@pytest.fixture(scope="module")
def empty(pretrained):
    """d16h1 on one sequence repeated: its resample source (the rows permuted) is itself, nothing is ablated."""
    model = pretrained("d16h1").eval()
    one = PermutationTask(task_config_of(model)).test_set(1, seed=1234)
    rep = lambda t: t.expand(8, -1).clone()
    batch = TaskBatch(rep(one.tokens), rep(one.targets), rep(one.mask))
    return prepare_edges(model, batch, how="resample")


def test_intervention_says_nothing_to_explain(empty):
    assert empty.nothing_to_explain
    assert empty.full_metric == pytest.approx(empty.empty_metric, abs=1e-6)
    assert math.isnan(float(empty.faithfulness(torch.tensor([0.5]))[0]))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_returns_the_empty_circuit(empty, method):
    result = METHODS[method](intervention=empty)
    assert result.nothing_to_explain
    assert result.method == method
    assert result.circuit == frozenset()
    assert result.faithfulness == 1.0
    assert len(result.scores) == empty.n_edges == 8
    assert (result.scores == 0.0).all() and not result.scores.isna().any()
    assert result.search.startswith("nothing to explain")


def test_method_arguments_still_checked_first(empty):
    with pytest.raises(ValueError, match="steps"):
        METHODS["mask_pruning"](intervention=empty, steps=0)


def test_a_normal_run_is_not_flagged(pretrained):
    model = pretrained("d16h1").eval()
    batch = PermutationTask(task_config_of(model)).test_set(64, seed=1234)
    result = METHODS["eap"](model, batch, how="resample")
    assert not result.nothing_to_explain
    assert 0 < result.n_edges <= 8 and result.faithfulness >= 0.9
