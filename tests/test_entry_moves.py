"""Every analysis moves its batch to the model's device once, at entry, and loops there.

On the CPU ``TaskBatch.to`` returns the batch itself, so a move that is missing (or
repeated inside a loop) changes nothing and cannot be seen.  The spy below makes it visible: the
first ``.to(model's device)`` of a batch returns a *copy* (as a real move to a GPU would), later
``.to`` calls on that copy return it unchanged, and a pre-hook on the model's embedding records
whether the tokens of every forward pass belong to a moved batch.  An analysis that loops on the
caller's (or its default) batch without moving it first, or moves it again per forward, fails.
"""

from __future__ import annotations


import pytest
import torch

from perm_circuits.devices import model_device
from perm_circuits.tasks.base import TaskBatch


def _copy(batch):
    return TaskBatch(batch.tokens.clone(), batch.targets.clone(), batch.mask.clone(),
                     {k: v.clone() for k, v in batch.extras.items()})


def _tokens(batch) -> torch.Tensor:
    return batch.tokens


class MoveSpy:
    """Records ``("move", type)`` for each first move of a batch and ``("forward", ok)`` per forward."""

    def __init__(self, model, monkeypatch) -> None:
        self.device = model_device(model)
        self.events: list[tuple[str, object]] = []
        self.moved: dict[int, object] = {}  # id -> the copy handed out (kept alive: ids stay unique)
        monkeypatch.setattr(TaskBatch, "to", self._wrap(TaskBatch.to))
        # on the embedding: every forward passes its tokens there (``run_with_cache`` included)
        self.handle = model.embed.register_forward_pre_hook(self._forward, with_kwargs=True)

    def _wrap(self, original):
        spy = self

        def to(batch, device):
            out = original(batch, device)
            if torch.device(device) != spy.device or id(batch) in spy.moved:
                return out
            copy = _copy(out)  # what a move to another device gives: a new batch
            spy.moved[id(copy)] = copy
            spy.events.append(("move", type(batch).__name__))
            return copy

        return to

    def _forward(self, module, args, kwargs):
        tokens = args[0] if args else next(iter(kwargs.values()))
        storages = {_tokens(b).untyped_storage().data_ptr() for b in self.moved.values()}
        ok = tokens.device == self.device and tokens.untyped_storage().data_ptr() in storages
        self.events.append(("forward", ok))

    @property
    def moves(self) -> list[int]:
        return [i for i, (kind, _) in enumerate(self.events) if kind == "move"]

    @property
    def forwards(self) -> list[tuple[int, bool]]:
        return [(i, ok) for i, (kind, ok) in enumerate(self.events) if kind == "forward"]


@pytest.fixture(scope="module")
def model():
    from perm_circuits.models import load_pretrained

    return load_pretrained("d16h1l2-any")


def _batch(model, n=48, seed=3):
    from perm_circuits.tasks.permutation_data import make_test_set

    return make_test_set(model.task_config, n=n, seed=seed)


def _task_batch(model, n=48, seed=5):
    from perm_circuits.tasks import PermutationTask

    return PermutationTask(model.task_config).test_set(n, seed)


def _analyses():
    """name -> (analysis(model), how many batches it moves at entry)."""
    from perm_circuits.analysis import (
        ablation_table,
        circuit_metrics,
        direct_logit_attribution,
        faithfulness_by_mode,
        patch_activation,
        propose_circuit,
        target_logprob,
    )
    from perm_circuits.analysis.interventions.path_patching import path_patching_table
    from perm_circuits.analysis.probes.task_attribution import target_logit_attribution
    from perm_circuits.analysis.study.recall_patching import patch_head_outputs, patch_mlp
    from perm_circuits.analysis.study.scores import attention_by_source, head_scores
    from perm_circuits.discovery import eap
    from perm_circuits.discovery.interventions import prepare_edges
    from perm_circuits.evaluate import evaluate
    from perm_circuits.tasks import PermutationTask
    from perm_circuits.tasks.runner import measure_task

    def task(m):
        return PermutationTask(m.task_config)

    def patch(m):
        clean, corrupted = _task_batch(m, 32, 5), _task_batch(m, 32, 6)
        return patch_activation(m, clean, corrupted, target_logprob(clean), "blocks.1.attn.hook_z", n_boot=20)

    def any_path(m):
        return path_patching_table(m, (_task_batch(m, 32, 5), _task_batch(m, 32, 6)), n_boot=20)

    return {
        "ablation_table[study]": (
            lambda m: ablation_table(m, hows=("zero", "mean", "resample"), test_set=_batch(m)), 1),
        "ablation_table[study, reference]": (
            lambda m: ablation_table(m, hows=("mean",), test_set=_batch(m), reference=_batch(m, seed=4)), 2),
        "ablation_table[study, task=]": (
            lambda m: ablation_table(m, ("zero", "mean"), _task_batch(m), task=task(m),
                                     reference=_task_batch(m, 32, 6)), 2),
        "ablation_table[metric=]": (  # the any-task path
            lambda m: ablation_table(m, ("zero", "mean"), _task_batch(m), metric=lambda logits, batch: logits[:, -1, 0],
                                     reference=_task_batch(m, 32, 6)), 2),
        "patch_activation": (patch, 2),
        "patch_head_outputs": (lambda m: patch_head_outputs(m, n=32, n_boot=20), 2),
        "patch_mlp": (lambda m: patch_mlp(m, n=32, n_boot=20), 2),
        "path_patching_table[study]": (lambda m: path_patching_table(m, n=32, n_boot=20), 2),
        "path_patching_table[any task]": (any_path, 2),
        "circuit_metrics[study]": (lambda m: circuit_metrics(m, "L1H0", _batch(m), how="mean", n_subsets=4), 1),
        "circuit_metrics[any task]": (
            lambda m: circuit_metrics(m, "L1H0", _task_batch(m), task=task(m), how="mean", n_subsets=4), 1),
        "faithfulness_by_mode": (lambda m: faithfulness_by_mode(m, "L1H0", _batch(m), hows=("zero", "mean")), 1),
        "propose_circuit": (lambda m: propose_circuit(m, "elimination", _batch(m), how="zero"), 1),
        "direct_logit_attribution": (lambda m: direct_logit_attribution(m, _batch(m)), 1),
        "target_logit_attribution": (lambda m: target_logit_attribution(m, _task_batch(m)), 1),
        "attention_by_source": (lambda m: attention_by_source(m, _batch(m)), 1),
        "head_scores": (lambda m: head_scores(m, _batch(m)), 1),
        "evaluate[study]": (lambda m: evaluate(m, _batch(m), probe=False), 1),
        "evaluate[task]": (lambda m: evaluate(m, _task_batch(m), task=task(m), probe=False), 1),  # the study path
        "measure_task": (lambda m: measure_task(m, task(m), _task_batch(m)), 1),
        # the edge engine runs its own forward from the weights; the model's forward runs once, as a check
        "prepare_edges": (lambda m: prepare_edges(m, _task_batch(m, 32, 7), how="mean"), 1),
        "eap": (lambda m: eap(m, _task_batch(m, 32, 7), how="mean"), 1),
    }


ANALYSES = _analyses()


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_the_batch_moves_once_at_entry_and_every_forward_runs_on_it(model, monkeypatch, name):
    analysis, n_moves = ANALYSES[name]
    spy = MoveSpy(model, monkeypatch)
    try:
        analysis(model)
    finally:
        spy.handle.remove()
    forwards = spy.forwards
    assert forwards, f"{name} ran no forward pass"
    assert len(spy.moves) == n_moves, f"{name}: {len(spy.moves)} batch moves, expected {n_moves} (one per batch)"
    assert max(spy.moves) < forwards[0][0], f"{name} moved a batch after its first forward: {spy.events}"
    stray = [i for i, ok in forwards if not ok]
    assert not stray, f"{name}: {len(stray)} of {len(forwards)} forwards ran on tokens that were not moved first"


def _run(model, monkeypatch, analysis) -> MoveSpy:
    spy = MoveSpy(model, monkeypatch)
    try:
        analysis(model)
    finally:
        spy.handle.remove()
    return spy


def test_recall_generalisation_moves_each_batch_once_right_after_drawing_it(model, monkeypatch):
    """One fresh batch per repeated source (V - 1 of them) and one without repeats: each moved, then run once."""
    from perm_circuits.evaluate import recall_generalisation

    spy = _run(model, monkeypatch, lambda m: recall_generalisation(m, n=16))
    V = model.task_config.V
    assert [kind for kind, _ in spy.events] == ["move", "forward"] * V
    assert all(ok for _, ok in spy.forwards)


def test_head_roles_runs_every_forward_on_moved_batches(model, monkeypatch):
    """The test set moves once at entry; each patching sweep draws its clean/corrupted pair and moves it once."""
    from perm_circuits.analysis.study.verdict import head_roles

    spy = _run(model, monkeypatch, lambda m: head_roles(m, _batch(m), hows=("zero", "mean"), how="mean", n_pair=32,
                                                        n_boot=10, probe=False, circuits=False, induction=False))
    assert spy.moves[0] == 0 and len(spy.moves) == 1 + 2 * 2  # test set; head and MLP sweeps' pairs
    assert len(spy.forwards) > 3 * len(spy.moves)
    assert all(ok for _, ok in spy.forwards), spy.events


def test_the_spy_catches_a_loop_on_an_unmoved_batch(model, monkeypatch):
    """A hand-written loop over the caller's batch: no move, every forward flagged."""
    batch = _batch(model)
    spy = MoveSpy(model, monkeypatch)
    try:
        for _ in range(3):
            model(batch.tokens)
        moved = batch.to(model_device(model))
        model(moved.tokens)
        assert moved is not batch and moved.to(model_device(model)) is moved  # a fresh copy, then itself
    finally:
        spy.handle.remove()
    assert [ok for _, ok in spy.forwards] == [False, False, False, True]
    assert spy.moves == [3]


def test_the_spy_changes_no_number(model, monkeypatch):
    from perm_circuits.analysis import ablation_table

    expected = ablation_table(model, hows=("mean",), test_set=_batch(model)).to_dataframe()
    spy = MoveSpy(model, monkeypatch)
    try:
        got = ablation_table(model, hows=("mean",), test_set=_batch(model)).to_dataframe()
    finally:
        spy.handle.remove()
    assert got.to_csv() == expected.to_csv()
