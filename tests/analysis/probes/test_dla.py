"""Direct logit attribution: the decomposition is exact, per head and per neuron, under hooks."""

from __future__ import annotations

import warnings

import pytest
import torch
from jaxtyping import TypeCheckError, install_import_hook

with install_import_hook(
    ["perm_circuits.analysis.probes.memory", "perm_circuits.analysis.probes.dla", "perm_circuits.analysis.study.ffn"],
    "beartype.beartype",
):
    from perm_circuits.analysis.probes import dla as attribution

from perm_circuits import TaskConfig, build_model
from perm_circuits.hooks import hook_count, run_logits
from perm_circuits.tasks.permutation_data import make_batch

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
    return run_logits(model, batch.tokens, hooks)[:, 0::2, 1:6].double()


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
    target = logits.gather(2, (batch.extras["ys"] - 1)[..., None])[..., 0]
    mean_others = (logits.sum(-1) - target) / 4
    repeated = batch.extras["repeated"]
    expected = target - mean_others
    elim = attribution.elimination_answers(batch.tokens, 5)[:, -1]
    expected[repeated, -1] = target[repeated, -1] - logits[repeated, -1].gather(1, (elim[repeated] - 1)[:, None])[:, 0]
    torch.testing.assert_close(dec.actual.double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(dec.baseline[repeated, -1], elim[repeated])
    assert (dec.baseline[:, :-1] == -1).all()
    mean_dec = attribution.decompose_logit_diff(model, batch, recall_baseline="mean")
    torch.testing.assert_close(mean_dec.actual.double(), target - mean_others, atol=1e-5, rtol=1e-5)


def test_head_results_match_z_times_W_O(model, batch):
    """TL4 native models have no per-head hook_result: stack_head_results must equal z @ W_O."""
    _, acts, cache = attribution.run_cache(model, batch.tokens, ["blocks.0.attn.hook_z", "blocks.0.hook_attn_out"])
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
    target = logits.gather(2, (batch.extras["ys"] - 1)[..., None])[..., 0]
    torch.testing.assert_close(dec.actual[:, 0].double(), target[:, 0] - (logits[:, 0].sum(-1) - target[:, 0]) / 4, atol=1e-5, rtol=1e-5)
    # a hook editing the attention output shows up in that layer's "attn_edit" (the attention total is the
    # cached hook_attn_out); one editing the residual stream itself shows up as "other"; the sum stays exact
    # (a uniform shift is centred away by ln_final, so push one direction instead)
    direction = torch.zeros(32)
    direction[:5] = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0])
    for hook_name, where in (("blocks.0.hook_attn_out", "L0attn_edit"), ("blocks.0.hook_resid_post", "other")):
        shifted = attribution.decompose_logit_diff(model, batch, hooks=[(hook_name, lambda out, hook: out + direction)])
        column = shifted.contributions[..., shifted.components.index(where)]
        assert column.abs().max() > 1e-3, where
        for name in {"L0attn_edit", "other"} - {where}:
            assert shifted.contributions[..., shifted.components.index(name)].abs().max() < 1e-4, name
        torch.testing.assert_close(shifted.contributions.sum(-1), shifted.actual, atol=1e-4, rtol=1e-4)
        assert shifted.max_residual_error < 1e-4 and bool(shifted.neuron_split_exact.all())
    assert hook_count(model) == 0


def test_subgroup_summary(model, batch):
    dla = attribution.direct_logit_attribution(model, batch)
    frame = dla.to_dataframe()
    assert list(frame.columns) == list(attribution.SUBGROUPS)
    n = dict(zip(dla.subgroups, dla.n))
    assert n["steps 1-4"] == 4 * len(batch)
    assert n["last-step recall"] == int(batch.extras["repeated"].sum())
    assert n["last-step elimination"] == int((~batch.extras["repeated"]).sum())
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
    cases = [
        (ValueError, r"recall_baseline must be one of \('elimination', 'mean'\), got 'unused'", dict(test_set=batch, hooks=good, recall_baseline="unused")),
        # (token ids are attributed on their next token: tests/analysis/test_own_model.py)
        (TypeCheckError, "parameter 'test_set'", dict(test_set=[1, 2], hooks=good)),
        (ValueError, r"hooks\[0\] names unknown hook point 'blocks.0.hook_nope'",
         dict(test_set=batch, hooks=[("blocks.0.hook_nope", count)])),
    ]
    for error, match, kwargs in cases:
        with pytest.raises(error, match=match) as info:
            attribution.direct_logit_attribution(model, **kwargs)
        assert type(info.value) is error
    assert calls == []

    def boom(x, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        attribution.direct_logit_attribution(model, batch, hooks=[("blocks.0.mlp.hook_post", boom)])
    assert hook_count(model) == 0


# ----------------------------------------------------------------------------- regressions: totals from the cache


def test_zero_ablated_mlp_is_attributed_as_ablated(model, batch):
    """Regression: the MLP column was rebuilt from mlp.hook_post @ W_out, so under the package's own
    ablate_mlp(model, 0, "zero") (which zeroes hook_mlp_out) L0mlp showed the un-ablated contribution and
    "other" carried minus that.  The layer's total now comes from the cached hook_mlp_out."""
    from perm_circuits.analysis import ablate_mlp

    clean = attribution.decompose_logit_diff(model, batch)
    ablated = attribution.decompose_logit_diff(model, batch, hooks=ablate_mlp(model, 0, "zero"))
    column = {name: ablated.contributions[..., k] for k, name in enumerate(ablated.components)}
    # the ablated MLP writes nothing: its two columns cancel exactly, nothing leaks into "other"
    both = column["L0mlp"] + column["L0mlp_bias"]
    torch.testing.assert_close(both, torch.zeros_like(both), atol=1e-5, rtol=0)
    assert column["other"].abs().max() < 1e-4 and column["L0attn_edit"].abs().max() < 1e-4
    # there was something to remove
    assert clean.contributions[..., clean.components.index("L0mlp")].abs().mean() > 0.1
    torch.testing.assert_close(ablated.contributions.sum(-1), ablated.actual, atol=1e-4, rtol=1e-4)
    expected = _diff(model, batch, ablate_mlp(model, 0, "zero"))
    torch.testing.assert_close(ablated.actual.double(), expected, atol=1e-4, rtol=1e-4)
    # the neurons (which still fire) no longer add up to the MLP's output: their split is nan, flagged
    exact = ablated.neuron_split_exact[..., 0]
    assert not bool(exact.all())
    assert torch.equal(ablated.neuron_contributions.isnan().all(-1), ~exact)
    assert not ablated.neuron_contributions[exact].isnan().any()
    summary = attribution.direct_logit_attribution(model, batch, hooks=ablate_mlp(model, 0, "zero"))
    assert summary.neuron_mean.isnan().any() and summary.max_residual_error < 1e-4
    assert abs(summary.component("L0mlp", "steps 1-4") + summary.component("L0mlp_bias", "steps 1-4")) < 1e-5


def test_neuron_ablation_keeps_an_exact_neuron_split(model, batch):
    from perm_circuits.analysis import ablate_mlp

    dec = attribution.decompose_logit_diff(model, batch, hooks=ablate_mlp(model, 0, "zero", neurons=[0, 5, -1]))
    assert bool(dec.neuron_split_exact.all())
    assert dec.neuron_contributions[..., [0, 5, 63]].abs().max() == 0.0
    torch.testing.assert_close(
        dec.neuron_contributions.sum(-1).double(),
        dec.contributions[..., dec.components.index("L0mlp")].double(), atol=1e-5, rtol=1e-5,
    )


def _diff(model, batch, hooks):
    """The documented logit difference (mean baseline at steps 1-4, elimination answer at a repeat)."""
    logits = _value_logits(model, batch, hooks)
    target = logits.gather(2, (batch.extras["ys"] - 1)[..., None])[..., 0]
    expected = target - (logits.sum(-1) - target) / 4
    elim = attribution.elimination_answers(batch.tokens, 5)[:, -1]
    r = batch.extras["repeated"]
    expected[r, -1] = target[r, -1] - logits[r, -1].gather(1, (elim[r] - 1)[:, None])[:, 0]
    return expected


def test_a_hook_after_the_residual_stream_is_recorded_and_warned(model, batch):
    """Regression: a hook on ln_final.hook_normalized broke sum == actual silently.  The gap is now
    recorded in residual_error (and the dataframe) and a RuntimeWarning names it."""
    hooks = [("ln_final.hook_normalized", lambda x, hook: 2.0 * x)]
    with pytest.warns(RuntimeWarning, match="do not add up"):
        dec = attribution.decompose_logit_diff(model, batch, hooks=hooks)
    torch.testing.assert_close(dec.actual.double(), _diff(model, batch, hooks), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dec.residual_error, dec.actual - dec.contributions.sum(-1), atol=1e-5, rtol=1e-5)
    # logits = 2 (normalised @ W_U) + b_U: the gap is everything but the unembedding bias, once more
    bias = dec.contributions[..., dec.components.index("unembed_bias")]
    torch.testing.assert_close(dec.residual_error, dec.contributions.sum(-1) - bias, atol=1e-4, rtol=1e-4)
    assert dec.max_residual_error > 0.1
    with pytest.warns(RuntimeWarning, match="residual_error"):
        dla = attribution.direct_logit_attribution(model, batch, hooks=hooks)
    frame = dla.to_dataframe()
    gap = (frame.loc["actual"] - frame.loc["total"]).tolist()
    assert frame.loc["residual_error"].tolist() == pytest.approx(gap, abs=1e-4)
    assert dla.max_residual_error == pytest.approx(dec.max_residual_error)
    # a tolerance above the gap silences the warning; no hooks: no warning, no gap
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attribution.decompose_logit_diff(model, batch, hooks=hooks, tolerance=10 * dec.max_residual_error)
        clean = attribution.direct_logit_attribution(model, batch)
    assert clean.max_residual_error < 1e-4 and clean.tolerance == 1e-3
    assert hook_count(model) == 0


@pytest.mark.parametrize("tolerance, error", [(0.0, ValueError), (-1e-3, ValueError), (float("nan"), ValueError),
                                              ("1e-3", TypeError), (True, TypeError)])
def test_tolerance_is_validated_before_work(model, batch, tolerance, error):
    calls = []
    hooks = [("blocks.0.attn.hook_z", lambda x, hook: calls.append(1))]
    with pytest.raises(error, match="tolerance"):
        attribution.direct_logit_attribution(model, batch, hooks=hooks, tolerance=tolerance)
    with pytest.raises(error, match="tolerance"):
        attribution.decompose_logit_diff(model, batch, hooks=hooks, tolerance=tolerance)
    assert calls == []
