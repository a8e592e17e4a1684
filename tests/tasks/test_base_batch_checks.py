"""A task's batches are checked once per sample in training and evaluation:
tasks.base.check_task_batch, called by fit (every step) and measure_task (the drawn test set)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import pytest
import torch

from perm_circuits.tasks.base import TaskBatch, check_task_batch, fit
from perm_circuits.tasks.factual import FactualRecallTask
from perm_circuits.tasks.runner import default_model, measure_task


@dataclass(frozen=True)
class BrokenFacts(FactualRecallTask):
    """Factual recall whose ``sample`` breaks its batch as ``how`` says (a user's buggy task)."""

    how: str = "ok"

    name: ClassVar[str] = "broken_facts"

    def sample(self, n, generator, split="train"):
        batch = super().sample(n, generator, split)
        tokens, targets, mask = batch.tokens.clone(), batch.targets.clone(), batch.mask.clone()
        if self.how == "oov_target":
            targets[mask > 0] = self.d_vocab + 3
        elif self.how == "nan_mask":
            mask[0, -1] = float("nan")
        elif self.how == "negative_mask":
            mask[0, 0] = -1.0
        elif self.how == "short":
            return TaskBatch(tokens[:-1], targets[:-1], mask[:-1])
        elif self.how == "long":
            return TaskBatch(*(torch.cat([t, t[:, :1]], dim=1) for t in (tokens, targets, mask)))
        elif self.how == "oov_token":
            tokens[0, 0] = -1
        elif self.how == "not_a_batch":
            return (tokens, targets, mask)
        return TaskBatch(tokens, targets, mask, batch.extras)


@pytest.fixture(scope="module")
def model():
    return default_model(BrokenFacts(), d_model=16, n_heads=1)


CASES = [
    ("oov_target", ValueError, r"task 'broken_facts'\'s sample\(8, ...\) returned targets 0\.\.\d+ under the loss mask, "
                               r"outside the task's vocabulary \[0, \d+\)"),
    ("nan_mask", ValueError, r"task 'broken_facts'\'s sample\(8, ...\) returned a mask with NaN, infinite or negative"),
    ("negative_mask", ValueError, r"returned a mask with NaN, infinite or negative loss weights \(from -1.0 to 1.0\)"),
    ("short", ValueError, r"task 'broken_facts'\'s sample\(8, ...\) returned tokens of shape \(7, 8\): expected \[8, 1..8\]"),
    ("long", ValueError, r"returned tokens of shape \(8, 9\): expected \[8, 1..8\] \(task.n_ctx 8\)"),
    ("oov_token", ValueError, r"returned token ids -1\.\.\d+, outside the task's vocabulary"),
    ("not_a_batch", TypeError, r"task 'broken_facts'\'s sample\(8, ...\) returned a tuple, not a TaskBatch"),
]


@pytest.mark.parametrize("how, error, match", CASES)
def test_fit_refuses_a_bad_batch_naming_the_task_before_a_step(model, how, error, match):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(error, match=match):
        fit(model, BrokenFacts(how=how), steps=3, batch_size=8, progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no step was taken


@pytest.mark.parametrize("how, error, match", [case for case in CASES if case[0] != "not_a_batch"])
def test_measure_task_refuses_a_bad_test_set(model, how, error, match):
    # (a test_set that is no TaskBatch: the suite's jaxtyping import hook already refuses DataclassTask's return)
    with pytest.raises(error, match=match.replace("sample", "test_set")):
        measure_task(model, BrokenFacts(how=how), n=8)


def test_a_good_batch_passes_and_training_is_unchanged(model):
    task = BrokenFacts()
    batch = task.sample(8, torch.Generator().manual_seed(0))
    assert check_task_batch(batch, task, 8) is batch
    masked = replace(batch, targets=torch.where(batch.mask > 0, batch.targets, 10**6))  # unscored targets: any value
    assert check_task_batch(masked, task, 8) is masked
    fitted = fit(default_model(task, d_model=16, n_heads=1), task, steps=2, batch_size=8, progress=False)
    again = fit(default_model(task, d_model=16, n_heads=1), task, steps=2, batch_size=8, progress=False)
    assert fitted.losses == again.losses and len(fitted.losses) == 2
    assert measure_task(fitted.model, task, n=8).n_samples == 8
