"""Edge-level interventions: exact at both ends, equal to path patching on one edge, every ablation mode."""

from __future__ import annotations

import pytest
import torch

from perm_circuits.analysis.interventions import path_patching as pp
from perm_circuits.discovery import prepare_edges
from perm_circuits.handbuilt import build_induction_model
from perm_circuits.hooks import run_capture
from perm_circuits.models import ModelConfig, build_model
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.tasks import PermutationTask


@pytest.fixture(scope="module")
def batch():
    return PermutationTask(TaskConfig(repeat_ratio=0.3)).test_set(64)


def _ln_model(dtype=torch.float64):
    return build_model(ModelConfig(d_model=16, n_heads=2, n_layers=2, seed=3)).eval().to(dtype)


@pytest.mark.parametrize("kind", ["layernorm", "induction"])
def test_all_kept_is_the_model_and_all_ablated_is_the_corrupted_run(kind, batch):
    model = _ln_model() if kind == "layernorm" else build_induction_model().to(torch.float64)
    corrupted = batch.tokens.roll(1, dims=0)
    ei = prepare_edges(model, batch, how="resample", corrupted=corrupted)
    with torch.no_grad():
        full, empty = ei.run(ei.ones()), ei.run(torch.zeros(ei.n_edges))
        assert (full - model(batch.tokens)).abs().max() < 1e-5
        assert (empty - model(corrupted)).abs().max() < 1e-5
        assert (full - empty).abs().max() > 0.1  # the two runs differ: the check is not vacuous
    assert ei.faithfulness(torch.tensor([ei.full_metric, ei.empty_metric], dtype=torch.float64)).tolist() == [1.0, 0.0]


def test_float32_model_matches_to_float_precision(batch):
    model = _ln_model(torch.float32)
    ei = prepare_edges(model, batch, how="resample")
    with torch.no_grad():
        assert (ei.run(ei.ones()) - model(batch.tokens)).abs().max() < 1e-4


def test_one_edge_equals_path_patching(batch):
    """Resample mode with only L0H0 -> L1H0.k clean (plus what L0H0 and L1H0 need) is IOI path patching."""
    model = _ln_model()
    corrupted = batch.tokens.roll(3, dims=0)
    ei = prepare_edges(model, batch, how="resample", corrupted=corrupted)
    mask = torch.zeros(ei.n_edges, dtype=torch.float64)
    keep = ["embed->L0H0.q", "embed->L0H0.k", "embed->L0H0.v", "L0H0->L1H0.k",
            "L1H0->L1MLP", "L1H0->logits", "L1MLP->logits"]
    mask[[ei.graph.edge_index(e) for e in keep]] = 1.0
    with torch.no_grad():
        mine = ei.run(mask)
    names = ["blocks.0.attn.hook_z", "blocks.1.hook_resid_pre"]
    _, clean_cache = run_capture(model, batch.tokens, names)
    _, corrupted_cache = run_capture(model, corrupted, names)
    delta = pp.sender_delta(model, (0, 0), clean_cache[names[0]], corrupted_cache[names[0]])
    hooks = pp.path_patch_hooks(model, (1, 0), "k", delta, corrupted_cache[names[1]])
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        theirs = model(corrupted)
    assert (mine - theirs).abs().max() < 1e-6
    assert (mine - model(corrupted)).abs().max() > 1e-3  # the edge carries something


def test_zero_mean_and_optimal_values(batch):
    model = _ln_model()
    zero = prepare_edges(model, batch, how="zero")
    with torch.no_grad():
        logits = zero.run(torch.zeros(zero.n_edges))
    w = zero.weights
    constant = w.b_O.sum(0) + w.b_out.sum(0)  # every sender zero: only the biases remain
    by_hand = w.norm(constant, "ln_final") @ w.W_U + w.b_U
    assert (logits - by_hand).abs().max() < 1e-10
    mean = prepare_edges(model, batch, how="mean")
    embed = (w.W_E[batch.tokens] + w.W_pos[None, : batch.tokens.shape[1]]).mean(0)
    assert (mean.ablated["embed"][0] - embed).abs().max() < 1e-12
    assert mean.ablated["L1H0"].shape == (1, 9, 16)
    optimal = prepare_edges(model, batch, how="optimal", optimal_steps=5)
    for sender in ("L0H1", "L1MLP"):
        mask = torch.ones(optimal.n_edges, dtype=torch.float64)
        mask[list(optimal.graph.outgoing(sender))] = 0.0
        value_mean = float(mean.evaluate(mask[None])[0])
        value_optimal = float(optimal.evaluate(mask[None])[0])
        assert value_optimal >= value_mean - 1e-9  # the optimal constant starts at the mean and only improves


def test_soft_masks_are_differentiable_and_batched(batch):
    model = _ln_model()
    ei = prepare_edges(model, batch, how="mean")
    masks = torch.rand(3, ei.n_edges, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    masks.requires_grad_(True)
    values = ei.metric_of(ei.run(masks))
    values.sum().backward()
    assert masks.grad.shape == (3, ei.n_edges) and masks.grad.abs().sum() > 0
    one_by_one = torch.stack([ei.metric_of(ei.run(m[None].detach()))[0] for m in masks])
    assert torch.allclose(values.detach(), one_by_one, atol=1e-10)
    hard = (masks.detach() > 0.5).double()
    assert torch.allclose(ei.evaluate(hard), ei.evaluate(hard, dedupe=True), atol=1e-10)


def test_bad_input(batch):
    model = _ln_model()
    with pytest.raises(ValueError, match="how must be one of"):
        prepare_edges(model, batch, how="binding_free")
    with pytest.raises(ValueError, match="metric is required"):
        prepare_edges(model, batch.tokens)
    with pytest.raises(ValueError, match="row-paired"):
        prepare_edges(model, batch, corrupted=batch.tokens[:3])
    ei = prepare_edges(model, batch, how="zero")
    with pytest.raises(ValueError, match="46 edges"):
        ei.run(torch.ones(45))


def test_split_embeddings_are_exact_too(batch):
    model = _ln_model()
    ei = prepare_edges(model, batch, how="resample", split_embed=True)
    assert ei.n_edges == 46 + 15  # the 15 embedding edges, twice
    mask = torch.ones(ei.n_edges, dtype=torch.float64)
    with torch.no_grad():
        assert (ei.run(mask) - model(batch.tokens)).abs().max() < 1e-5
        # ablating only the positional embedding's edges changes nothing: the corrupted rows share positions
        mask[list(ei.graph.outgoing("pos_embed"))] = 0.0
        assert (ei.run(mask) - model(batch.tokens)).abs().max() < 1e-5
        mask[list(ei.graph.outgoing("tok_embed"))] = 0.0
        assert (ei.run(mask) - model(batch.tokens)).abs().max() > 0.1


@pytest.mark.parametrize("how", ["resample", "mean", "zero"])
def test_bridge_hooks_compute_the_same_runs(batch, how):
    """edge_hooks on the bridge (hook_q/k/v, mlp.hook_in, unembed.hook_in) equals the batched plain-PyTorch run."""
    from perm_circuits.discovery.edge_hooks import edge_hooks
    from perm_circuits.hooks import hook_count

    model = _ln_model()
    ei = prepare_edges(model, batch, how=how)
    generator = torch.Generator().manual_seed(1)
    masks = torch.cat([(torch.rand(3, ei.n_edges, generator=generator) > 0.5).double(),
                       torch.rand(2, ei.n_edges, generator=generator, dtype=torch.float64)])
    with torch.no_grad():
        mine = ei.run(masks)
        for row, mask in enumerate(masks):
            with model.hooks(fwd_hooks=edge_hooks(ei, mask)):
                theirs = model(batch.tokens)
            assert (mine[row] - theirs).abs().max() < 1e-9
        assert (mine[0] - model(batch.tokens)).abs().max() > 1e-3
    assert hook_count(model) == 0


def test_faithfulness_is_nan_when_the_runs_agree_up_to_rounding(batch):
    """A metric averaged over rows does not move when the default resample corruption permutes the rows:
    the float32 rounding left between the two runs is no denominator (it gave faithfulness ~1e6)."""
    model = _ln_model(torch.float32)

    def row_mean(logits):
        return logits[..., -1, 1] - logits[..., -1, 2]  # per row; the tools take the mean over rows

    ei = prepare_edges(model, batch.tokens, how="resample", metric=row_mean)
    assert abs(ei.full_metric - ei.empty_metric) < 1e-5  # the same runs, up to rounding
    assert torch.isnan(ei.faithfulness(torch.tensor([ei.full_metric, 0.0]))).all()
    real = prepare_edges(model, batch, how="resample")  # the targets' log-probability does move
    assert real.faithfulness(torch.tensor([real.full_metric, real.empty_metric])).tolist() == [1.0, 0.0]


@pytest.mark.parametrize("extra, message", [
    ({"gated_mlp": True}, r"do not support gated MLPs"),
    ({"n_key_value_heads": 1}, r"grouped-query attention \(n_key_value_heads=1, n_heads=2\) is not supported"),
])
def test_unsupported_blocks_are_named(extra, message):
    """A gated MLP or shared keys/values: a ValueError naming it (they were an AttributeError from the
    bridge's missing b_in / an IndexError)."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(TransformerBridgeConfig(
        d_model=16, d_head=8, n_heads=2, n_layers=2, n_ctx=9, d_vocab=6, d_mlp=32, act_fn="relu",
        normalization_type="LN", positional_embedding_type="standard", seed=0, tokenizer_prepends_bos=False,
        model_name="odd", **extra)).eval()
    with pytest.raises(ValueError, match=message):
        prepare_edges(model, PermutationTask(TaskConfig()).test_set(8), how="zero")


def test_tokens_the_model_cannot_embed_are_refused_before_any_run(batch):
    from perm_circuits.tasks import BigramTriggerTask

    model = _ln_model()  # vocabulary of 6 ids, context of 9 positions
    other = BigramTriggerTask().sample(2, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"batch has 256 positions but the model's context is n_ctx=9"):
        prepare_edges(model, other)
    past = batch.tokens.clone()
    past[0, 0] = 7
    with pytest.raises(ValueError, match=r"batch token ids must be in \[0, 6\) \(the model's vocabulary\), got values 1\.\.7"):
        prepare_edges(model, past, metric=lambda logits: logits.sum((-1, -2)))
    with pytest.raises(ValueError, match=r"corrupted token ids must be in \[0, 6\)"):
        prepare_edges(model, batch, corrupted=batch.tokens + 10)
    with pytest.raises(ValueError, match=r"reference token ids must be in \[0, 6\)"):
        prepare_edges(model, batch, how="mean", reference=batch.tokens - 10)


@pytest.mark.parametrize("unscored", [7, -1])
def test_metric_ignores_targets_where_the_mask_is_zero(unscored):
    """TaskBatch allows any target where the mask is 0; a column scored in another row must not read it."""
    from perm_circuits.discovery.interventions import target_logprob_metric
    from perm_circuits.tasks import TaskBatch

    tokens = torch.zeros(2, 3, dtype=torch.long)
    targets = torch.tensor([[0, 0, 2], [0, 0, unscored]])
    mask = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    value = float(target_logprob_metric(TaskBatch(tokens, targets, mask))(logits))  # was an index RuntimeError
    assert value == pytest.approx(float(logits[0, 2].log_softmax(-1)[2]), abs=1e-6)


def test_degenerate_batches_are_refused_before_any_run(batch):
    """A one-row batch is its own resample source and an all-zero mask scores nothing: both gave
    full == empty metric, so every faithfulness was nan."""
    from perm_circuits.tasks import TaskBatch

    model = build_induction_model()
    with pytest.raises(ValueError, match="at least 2 rows"):
        prepare_edges(model, batch.subset(torch.arange(1)), how="resample")
    one = batch.subset(torch.arange(1))
    assert prepare_edges(model, one, how="resample", corrupted=batch.subset(torch.arange(1, 2)).tokens).n_edges == 46
    assert prepare_edges(model, one, how="zero").n_edges == 46
    with pytest.raises(ValueError, match="no position > 0"):
        prepare_edges(model, TaskBatch(batch.tokens, batch.targets, torch.zeros_like(batch.mask)), how="zero")
