"""The suite's run-time type checks (tests/conftest.py): jaxtyping's import hook with beartype checks
every function of perm_circuits, and the closures that carry array shapes; plain closures (hooks,
callbacks) are left unchecked, since decorating them anew on every call of their enclosing function
doubled the suite's compute time."""

from __future__ import annotations

import sys

import pytest
import torch
from jaxtyping import TypeCheckError

from perm_circuits.metric import target_logprob
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation import value_probs

pytestmark = pytest.mark.skipif("conftest" not in sys.modules or sys.modules["conftest"].typechecker is None,
                                reason="the type-check hook is installed only in processes that run tests")


def test_a_module_function_checks_its_shapes():
    assert value_probs(torch.zeros(2, 9, 6), 5).shape == (2, 5, 5)
    with pytest.raises(TypeCheckError):
        value_probs(torch.zeros(9, 6), 5)  # rank 2 where [batch seq vocab] is due
    with pytest.raises(TypeCheckError):
        value_probs(torch.zeros(2, 9, 6), "5")


def test_a_closure_with_array_annotations_is_checked():
    batch = TaskBatch(tokens=torch.zeros(2, 3, dtype=torch.long), targets=torch.ones(2, 3, dtype=torch.long),
                      mask=torch.ones(2, 3))
    metric = target_logprob(batch)
    assert metric(torch.zeros(2, 3, 4)).shape == (2,)
    with pytest.raises(TypeCheckError):
        metric(torch.zeros(2, 3))  # no vocabulary axis


def test_a_plain_closure_is_left_unchecked():
    """A closure without array annotations is the function its ``def`` made (no jaxtyping wrapper)."""
    from perm_circuits.analysis.interventions import hooks

    source = hooks.ablation_fn("zero", "pos", None, None, None, 0, "random", None)
    assert not hasattr(source, "__wrapped__")
    assert hasattr(value_probs, "__wrapped__")  # a module-level function is wrapped
