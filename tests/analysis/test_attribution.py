"""Direct logit attribution: the decomposition is exact, per head and per neuron, under hooks."""

from __future__ import annotations

import pytest
import torch
from jaxtyping import install_import_hook

with install_import_hook(
    ["perm_circuits.analysis.memory", "perm_circuits.analysis.attribution", "perm_circuits.analysis.ffn"],
    "beartype.beartype",
):
    from perm_circuits.analysis import attribution

from perm_circuits import TaskConfig, build_model, hook_count, make_batch, run_logits

BAD = (ValueError, TypeError)


@pytest.fixture(scope="module")
def model():
    """A d32h2 with every weight random, including biases and LayerNorm parameters."""
    m = build_model("d32h2", seed=3)
    gen = torch.Generator().manual_seed(7)
    sd = m.state_dict()
    for key, value in sd.items():
        if key.endswith("bias") or ".ln" in key or key.startswith("ln_final"):
            sd[key] = value + 0.3 * torch.randn(value.shape, generator=gen)
    m.load_state_dict(sd)
    m.task_config = TaskConfig(repeat_ratio=0.3)
    return m


@pytest.fixture(scope="module")
def batch():
    return make_batch(TaskConfig(), 300, split="test", seed=5, repeat_ratio=0.5)


def _value_logits(model, batch, hooks=None):
    return run_logits(model, batch.inputs, hooks)[:, 0::2, 1:6].double()


def test_components_sum_to_actual_logit_difference(model, batch):
    dec = attribution.decompose_logit_diff(model, batch)
    assert dec.components[:4] == ("embed", "pos_embed", "L0H0", "L0H1")
    assert {"L0attn_bias", "L0mlp", "L0mlp_bias", "unembed_bias", "other"} <= set(dec.components)
    torch.testing.assert_close(dec.contributions.sum(-1), dec.actual, atol=1e-4, rtol=1e-4)
    # the biases are non-zero here, so their components are too
    for name in ("L0attn_bias", "L0mlp_bias", "unembed_bias"):
        assert dec.contributions[..., dec.components.index(name)].abs().max() > 1e-3
    assert dec.contributions[..., dec.components.index("other")].abs().max() < 1e-4
    # the neurons split the MLP component exactly
    torch.testing.assert_close(
        dec.neuron_contributions.sum(-1), dec.contributions[..., dec.components.index("L0mlp")], atol=1e-5, rtol=1e-5
    )


def test_actual_is_the_documented_logit_difference(model, batch):
    logits = _value_logits(model, batch)
    dec = attribution.decompose_logit_diff(model, batch)
    target = logits.gather(2, (batch.ys - 1)[..., None])[..., 0]
    mean_others = (logits.sum(-1) - target) / 4
    repeated = batch.repeated
    expected = target - mean_others
    elim = attribution.elimination_answers(batch.inputs, 5)[:, -1]
    expected[repeated, -1] = target[repeated, -1] - logits[repeated, -1].gather(1, (elim[repeated] - 1)[:, None])[:, 0]
    torch.testing.assert_close(dec.actual.double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(dec.baseline[repeated, -1], elim[repeated])
    assert (dec.baseline[:, :-1] == -1).all()
    mean_dec = attribution.decompose_logit_diff(model, batch, recall_baseline="mean")
    torch.testing.assert_close(mean_dec.actual.double(), target - mean_others, atol=1e-5, rtol=1e-5)


def test_head_results_match_z_times_W_O(model, batch):
    """TL4 native models have no per-head hook_result: stack_head_results must equal z @ W_O."""
    _, acts, cache = attribution.run_cache(model, batch.inputs, ["blocks.0.attn.hook_z", "blocks.0.hook_attn_out"])
    with torch.no_grad():
        heads = cache.stack_head_results(layer=-1)
        mine = torch.einsum("bphd,hdm->hbpm", acts["blocks.0.attn.hook_z"], model.W_O[0])
    torch.testing.assert_close(heads, mine)
    torch.testing.assert_close(heads.sum(0) + model.b_O[0].detach(), acts["blocks.0.hook_attn_out"], atol=1e-5, rtol=1e-5)


def test_exact_under_hooks(model, batch):
    def zero_head0(z, hook):
        z = z.clone()
        z[:, :, 0] = 0.0
        return z

    hooks = [("blocks.0.attn.hook_z", zero_head0)]
    dec = attribution.decompose_logit_diff(model, batch, hooks=hooks)
    assert dec.contributions[..., dec.components.index("L0H0")].abs().max() == 0.0
    torch.testing.assert_close(dec.contributions.sum(-1), dec.actual, atol=1e-4, rtol=1e-4)
    logits = _value_logits(model, batch, hooks)
    target = logits.gather(2, (batch.ys - 1)[..., None])[..., 0]
    torch.testing.assert_close(dec.actual[:, 0].double(), target[:, 0] - (logits[:, 0].sum(-1) - target[:, 0]) / 4, atol=1e-5, rtol=1e-5)
    # a hook writing into the residual stream outside the components shows up as "other" and the sum stays exact
    # (a uniform shift is centred away by ln_final, so push one direction instead)
    direction = torch.zeros(32)
    direction[:5] = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0])
    shifted = attribution.decompose_logit_diff(
        model, batch, hooks=[("blocks.0.hook_attn_out", lambda out, hook: out + direction)]
    )
    assert shifted.contributions[..., shifted.components.index("other")].abs().max() > 1e-3
    torch.testing.assert_close(shifted.contributions.sum(-1), shifted.actual, atol=1e-4, rtol=1e-4)
    assert hook_count(model) == 0


def test_subgroup_summary(model, batch):
    dla = attribution.direct_logit_attribution(model, batch)
    frame = dla.to_dataframe()
    assert list(frame.columns) == list(attribution.SUBGROUPS)
    n = dict(zip(dla.subgroups, dla.n))
    assert n["steps 1-4"] == 4 * len(batch)
    assert n["last-step recall"] == int(batch.repeated.sum())
    assert n["last-step elimination"] == int((~batch.repeated).sum())
    torch.testing.assert_close(dla.mean.sum(-1), dla.actual, atol=1e-4, rtol=1e-4)
    assert frame.loc["total"].tolist() == pytest.approx(frame.loc["actual"].tolist(), abs=1e-4)
    assert dla.component("L0H1", "last-step recall") == pytest.approx(float(frame.loc["L0H1", "last-step recall"]))
    neurons = dla.neuron_dataframe()
    assert neurons.shape == (64, 3)
    assert neurons.sum().tolist() == pytest.approx(frame.loc["L0mlp"].tolist(), abs=1e-4)


def test_subgroup_masks_and_elimination_answers():
    inputs = torch.tensor([[2, 4, 5, 3, 4, 5, 3, 2, 2], [1, 1, 2, 2, 3, 3, 4, 4, 5]])
    masks = attribution.subgroup_masks(inputs)
    assert masks["last-step recall"].tolist() == [[False] * 4 + [True], [False] * 5]
    assert masks["last-step elimination"].tolist() == [[False] * 5, [False] * 4 + [True]]
    assert attribution.elimination_answers(inputs, 5)[:, -1].tolist() == [1, 5]
    assert (attribution.elimination_answers(inputs, 5)[:, :-1] == -1).all()


def test_validation_before_work_and_no_hook_leak(model, batch):
    calls = []

    def count(x, hook):
        calls.append(1)

    good = [("blocks.0.attn.hook_z", count)]
    with pytest.raises(ValueError, match="recall_baseline"):
        attribution.direct_logit_attribution(model, batch, hooks=good, recall_baseline="unused")
    with pytest.raises(BAD):
        attribution.direct_logit_attribution(model, batch.inputs, hooks=good)
    with pytest.raises(ValueError, match="unknown hook point"):
        attribution.direct_logit_attribution(model, batch, hooks=[("blocks.0.hook_nope", count)])
    assert calls == []

    def boom(x, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        attribution.direct_logit_attribution(model, batch, hooks=[("blocks.0.mlp.hook_post", boom)])
    assert hook_count(model) == 0
