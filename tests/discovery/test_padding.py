"""Mixed input lengths in one batch (perm_circuits.discovery.padding), on the weight-built induction model.

A right-padded batch with ``extras["lengths"]``: with every edge kept, each row's real positions equal
the model run on that row unpadded; under resample ablation with every edge ablated, they equal the
resample source's own run; under mean ablation every row's fully ablated run is the same; padded
positions are never scored.  (Bidirectional attention, where the key mask matters most, is tested on
tracr's ``make_length`` in test_tracr_programs.py.)
"""

from __future__ import annotations

import pytest
import torch

from perm_circuits.discovery import prepare_edges
from perm_circuits.discovery.padding import batch_lengths, key_mask
from perm_circuits.handbuilt import build_induction_model
from perm_circuits.tasks.base import TaskBatch

WIDTH = 9


@pytest.fixture(scope="module")
def model():
    return build_induction_model(5)


def _padded(n: int = 24, seed: int = 0) -> TaskBatch:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, 6, (n, WIDTH), generator=generator)
    lengths = torch.tensor([3, 5, 9] * (n // 3))
    real = key_mask(lengths, WIDTH)
    tokens = torch.where(real, tokens, torch.zeros_like(tokens))  # pad id 0
    targets = torch.randint(1, 6, (n, WIDTH), generator=generator)
    mask = real.float()
    mask[:, 0] = 0.0
    return TaskBatch(tokens, targets, mask, {"lengths": lengths})


@pytest.mark.parametrize("how", ["zero", "mean", "resample"])
def test_every_edge_kept_is_the_model_on_each_row_unpadded(model, how):
    batch = _padded()
    ei = prepare_edges(model, batch, how=how)  # its check compares each length with the model unpadded
    logits = ei.run(ei.ones())
    for row, length in enumerate(batch.extras["lengths"].tolist()):
        expected = model(batch.tokens[row : row + 1, :length])[0]
        torch.testing.assert_close(logits[row, :length], expected, atol=1e-4, rtol=1e-4)


def test_resample_every_edge_ablated_is_the_source_run(model):
    batch = _padded()
    ei = prepare_edges(model, batch, how="resample", seed=3)
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(3))
    empty = ei.run(torch.zeros(ei.n_edges))
    lengths = batch.extras["lengths"]
    assert len(set(zip(lengths.tolist(), lengths[order].tolist()))) > 3  # rows paired across lengths
    for row in range(len(batch)):
        source = int(order[row])
        shared = min(int(lengths[row]), int(lengths[source]))
        expected = model(batch.tokens[source : source + 1, : int(lengths[source])])[0, :shared]
        torch.testing.assert_close(empty[row, :shared], expected, atol=1e-4, rtol=1e-4)


def test_mean_every_edge_ablated_is_one_run_for_every_row(model):
    ei = prepare_edges(model, _padded(), how="mean")
    empty = ei.run(torch.zeros(ei.n_edges))
    assert float((empty - empty[:1]).abs().max()) < 1e-5
    assert ei.full_metric != pytest.approx(ei.empty_metric)


def test_padded_positions_change_nothing_real_under_zero_ablation(model):
    """Other pad tokens: the same metric under zero ablation (a row's padded positions are neither read
    nor scored); under resample ablation a shorter source's padded positions are what a longer row
    receives, so the pad token is part of the ablation there."""
    batch = _padded()
    real = key_mask(batch.extras["lengths"], WIDTH)
    other = TaskBatch(torch.where(real, batch.tokens, torch.full_like(batch.tokens, 4)), batch.targets, batch.mask,
                      batch.extras)
    a, b = prepare_edges(model, batch, how="zero"), prepare_edges(model, other, how="zero")
    masks = (torch.rand(5, a.n_edges, generator=torch.Generator().manual_seed(1)) > 0.5).float()
    torch.testing.assert_close(a.evaluate(masks), b.evaluate(masks), atol=1e-5, rtol=1e-5)
    a, b = prepare_edges(model, batch, how="resample"), prepare_edges(model, other, how="resample")
    assert a.full_metric == pytest.approx(b.full_metric, abs=1e-5)
    assert a.empty_metric != pytest.approx(b.empty_metric, abs=1e-3)


def test_bad_lengths_are_refused(model):
    batch = _padded()
    with pytest.raises(ValueError, match=r"must be in 1\.\.9"):
        batch_lengths(TaskBatch(batch.tokens, batch.targets, batch.mask, {"lengths": batch.extras["lengths"] + 1}))
    with pytest.raises(ValueError, match="integer lengths"):
        prepare_edges(model, TaskBatch(batch.tokens, batch.targets, batch.mask,
                                       {"lengths": batch.extras["lengths"].float()}))
    scored_pad = batch.mask.clone()
    scored_pad[0, -1] = 1.0  # row 0 has length 3
    with pytest.raises(ValueError, match="loss mask must be 0 at padded positions"):
        prepare_edges(model, TaskBatch(batch.tokens, batch.targets, scored_pad, batch.extras))
    assert batch_lengths(TaskBatch(batch.tokens, batch.targets, batch.mask)) is None
