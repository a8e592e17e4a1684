"""Ablation modes as an axis of every causal claim, on hand-built models with known answers.

The models have no LayerNorm and one-hot embeddings (token t -> dim t, position p -> dim 6 + p,
a constant 1 in dim 15), so what each ablation mode does is known in closed form:

- a *bias head* attends anywhere and writes the constant 1 (read from dim 15) into a dim the
  unembedding uses to suppress token 0 (-100).  Its mean output is large and constant: zero
  ablation removes the constant and token 0 ties with the right answer (elimination 0%), while
  mean, resample, binding-free and optimal ablation replace it by itself (nothing changes);
- a perfect eliminator (key ``C * is_y``: uniform attention over the prior ys, each y's value
  written to dims 16..20, unembedded with -E) is needed for elimination under every mode;
- an MLP whose output is linear in the logits (no final LayerNorm): its optimal constant is known
  in closed form (the log of each step's answer frequencies), the optimal loss is the mean
  entropy of the answers per step.
"""

from __future__ import annotations

import math

import pytest
import torch

from perm_circuits import ModelConfig, TaskConfig, build_model, make_test_set
from perm_circuits.hooks import hook_count
from perm_circuits.analysis import HOWS, ablate_mlp, ablation_table, head_roles, reference_activations
from perm_circuits.analysis.interventions.ablation import optimal_constant
from perm_circuits.analysis.interventions.optimal import answer_loss
from ..handbuilt import blank_model

V = 5
C = 40.0
E = 20.0
ELIM, BIAS = 16, 21
FAST = dict(n=600, n_pair=300, n_boot=50)
ALL_ROLES = ("zero", "mean", "resample", "binding_free", "optimal")


def bias_head_model():
    """H0: perfect eliminator into dims 16..20; H1: writes the constant 1 into BIAS (token 0 at -100)."""
    d_head = 8
    model, sd = blank_model(ModelConfig(d_model=32, n_heads=2, d_head=d_head, normalization_type=None))
    sd["blocks.0.attn.q.bias"][0] = 1.0
    for p in range(2 * V - 1):
        sd["blocks.0.attn.k.weight"][0, V + 1 + p] = C * float(p % 2 == 1) * math.sqrt(d_head)
    for t in range(1, V + 1):
        sd["blocks.0.attn.v.weight"][t - 1, t] = 1.0
        sd["blocks.0.attn.o.weight"][ELIM + t - 1, t - 1] = 1.0
        sd["unembed.weight"][t, ELIM + t - 1] = -E
    # head 1 (zero Q/K: uniform attention) reads the constant dim 15 and writes it to BIAS
    sd["blocks.0.attn.v.weight"][d_head, 3 * V] = 1.0
    sd["blocks.0.attn.o.weight"][BIAS, d_head] = 1.0
    sd["unembed.weight"][0, BIAS] = -100.0
    model.load_state_dict(sd)
    return model


def linear_mlp_model():
    """Attention off; the MLP copies the current token (+3) and always favours value 1 (+5); logits read it linearly."""
    model, sd = blank_model(ModelConfig(d_model=32, n_heads=2, d_head=8, normalization_type=None))
    for t in range(1, V + 1):
        sd["blocks.0.mlp.in.weight"][t - 1, t] = 1.0
        sd["blocks.0.mlp.out.weight"][ELIM + t - 1, t - 1] = 3.0
        sd["unembed.weight"][t, ELIM + t - 1] = 1.0
    sd["blocks.0.mlp.out.bias"][ELIM] = 5.0
    sd["unembed.weight"][0, 3 * V] = -100.0
    model.load_state_dict(sd)
    return model


@pytest.fixture(scope="module")
def bias_verdict():
    return head_roles(bias_head_model(), **FAST)


# ----------------------------------------------------------------------------- zero vs mean


def test_zero_and_mean_ablation_disagree_on_a_constant_bias_head(bias_verdict):
    v = bias_verdict
    assert v.hows == ALL_ROLES == HOWS and v.how == "mean"
    assert v.elimination_accuracy == 1.0 and v.recall_accuracy == 0.0
    table = v.ablation
    # zero ablation removes the constant: token 0 (logit 0) beats or ties every value (logits <= 0)
    assert table.get("L0H1", "zero")["elimination_accuracy"] == 0.0
    assert table.get("L0H1", "zero").test_loss > table.baseline.test_loss + 0.3
    for how in ("mean", "resample", "binding_free", "optimal"):
        row = table.get("L0H1", how)
        assert row["elimination_accuracy"] == 1.0 and row.test_loss == pytest.approx(table.baseline.test_loss, abs=1e-5), how
    h0, h1 = v.heads
    assert h1.role == "unused" and h1.causal_role == "none"
    assert h1.role_by_how == (("zero", "other"), ("mean", "unused"), ("resample", "unused"),
                              ("binding_free", "unused"), ("optimal", "unused"))
    assert h1.robust is False and h1.disagreeing == ("zero",)
    assert h1.mode_note() == ("mode-dependent (zero: other, mean: unused, resample: unused, binding_free: unused, "
                              "optimal: unused)")
    # the eliminator and the (empty) MLP agree in every mode
    assert h0.role_by_how == tuple((how, "eliminator") for how in ALL_ROLES) and h0.robust is True
    assert h0.disagreeing == () and h0.mode_note() == "robust"
    assert v.mlps[0].role_by_how == tuple((how, "unused") for how in ALL_ROLES) and v.mlps[0].robust is True
    assert v.mode_dependent == ["L0H1"]


def test_verdict_states_its_mode_and_the_per_mode_outcome(bias_verdict):
    v = bias_verdict
    # no recall: "recalls" is contradicted in every mode, so the verdict is the same everywhere
    assert v.verdict_by_how == tuple((how, False) for how in ALL_ROLES) and v.verdict_robust is True
    assert all(c.robust for c in v.claims) and v.claims.status("recalls") == "contradicted"
    text = v.summary()
    assert "decisions use mean ablation" in text and "Why: mean ablation keeps every coordinate" in text
    assert "L0H1 = unused [mode-dependent (zero: other, mean: unused," in text
    assert "L0H0 = eliminator [robust]" in text
    assert ("The verdict is the same under every ablation mode judged (zero, mean, resample, binding_free, "
            "optimal), though the roles of L0H1 change with the mode.") in text
    frame = v.to_dataframe().set_index("component")
    assert [f"role_{how}" for how in ALL_ROLES] == [c for c in frame.columns if c.startswith("role_")]
    assert frame.loc["L0H1", "role_zero"] == "other" and frame.loc["L0H1", "role_mean"] == "unused"
    assert frame["robust"].tolist() == [True, False, True]
    assert frame.loc["L0H1", "disagreeing"] == "zero"
    claims = v.claims.to_dataframe()
    assert claims["robust"].all() and {f"status_{how}" for how in ALL_ROLES} <= set(claims.columns)


def test_zero_decisions_flip_the_role_and_the_reason_says_so():
    v = head_roles(bias_head_model(), how="zero", hows=("zero", "mean"), probe=False, **FAST)
    h1 = v.heads[1]
    assert (h1.role, h1.causal_role) == ("other", "elimination")
    assert h1.role_by_how == (("zero", "other"), ("mean", "unused")) and h1.disagreeing == ("mean",)
    assert v.how_reason.startswith("zero ablation was asked for")
    assert "Zero-ablating it: elimination 100.0% -> 0.0%" in h1.reason


def test_modes_agree_on_the_eliminator_alone():
    """Without the bias head every mode tells the same story: a robust eliminator, a robust verdict."""
    model = bias_head_model()
    sd = model.state_dict()
    sd["blocks.0.attn.o.weight"][BIAS] = 0.0
    sd["unembed.weight"][0, BIAS] = 0.0
    sd["unembed.weight"][0, 3 * V] = -100.0
    model.load_state_dict(sd)
    v = head_roles(model, probe=False, **FAST)
    assert [h.role for h in v.heads] == ["eliminator", "unused"]
    assert all(item.robust for item in (*v.heads, *v.mlps)) and v.mode_dependent == []
    assert v.heads[1].role_by_how == tuple((how, "unused") for how in ALL_ROLES)
    assert v.verdict_robust and "so is every component's role" in v.summary()
    assert hook_count(model) == 0


# ----------------------------------------------------------------------------- optimal ablation


def _entropy_per_step(batch) -> float:
    """Closed-form optimal loss: the mean over steps of the entropy of the empirical answer distribution."""
    total = 0.0
    for j in range(V):
        q = torch.bincount(batch.extras["ys"][:, j], minlength=V + 1)[1:].double() / len(batch)
        total += float(-(q[q > 0] * q[q > 0].log()).sum())
    return total / V


def test_optimal_constant_reaches_the_closed_form_and_beats_mean_ablation():
    model = linear_mlp_model()
    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=800)
    constant = optimal_constant(model, "blocks.0.hook_mlp_out", reference=batch)
    assert constant.shape == (2 * V - 1, 32)
    hook = "blocks.0.hook_mlp_out"

    def loss_with(hooks) -> float:
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            return float(answer_loss(model(batch.tokens), batch))

    optimal = loss_with([(hook, lambda act, hook: constant[None].expand_as(act))])
    mean = loss_with(ablate_mlp(model, 0, "mean", reference=batch))
    closed_form = _entropy_per_step(batch)
    assert closed_form == pytest.approx(math.log(5), abs=0.02)  # answers are near-uniform at every step
    assert optimal == pytest.approx(closed_form, abs=1e-3)
    assert mean > closed_form + 0.5  # the mean keeps the +5 on value 1
    # the optimum's logits at x positions are the log answer frequencies (up to a constant per position)
    q = torch.stack([torch.bincount(batch.extras["ys"][:, j], minlength=V + 1)[1:].float() / len(batch) for j in range(V)])
    logits = constant[0::2, ELIM:ELIM + V]
    torch.testing.assert_close(logits.log_softmax(-1), q.log(), atol=2e-3, rtol=0)
    # the table and ablate_mlp agree with it
    table = ablation_table(model, hows=("mean", "optimal"), test_set=batch)
    assert table.get("L0MLP", "optimal").test_loss == pytest.approx(optimal, abs=1e-5)
    assert table.get("L0MLP", "optimal").test_loss <= table.get("L0MLP", "mean").test_loss
    via_ablate = loss_with(ablate_mlp(model, 0, "optimal", reference=batch))
    assert via_ablate == pytest.approx(optimal, abs=1e-6)


def _loss_with(model, batch, hook: str, index: int | None, constant: torch.Tensor) -> float:
    """Task loss with the selected entries of ``hook`` set to ``constant``."""
    def replace(act, hook):
        act = act.clone()
        if index is None:
            act[:] = constant
        else:
            act[:, :, index] = constant[:, index]
        return act

    with torch.no_grad(), model.hooks(fwd_hooks=[(hook, replace)]):
        return float(answer_loss(model(batch.tokens), batch))


def test_optimal_ablation_is_deterministic_and_the_fast_search_matches_the_bridge():
    model = linear_mlp_model()
    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=300)
    a = optimal_constant(model, "blocks.0.attn.hook_z", index=1, reference=batch, steps=5)
    b = optimal_constant(model, "blocks.0.attn.hook_z", index=1, reference=batch, steps=5)
    assert torch.equal(a, b)
    fast = optimal_constant(model, "blocks.0.hook_mlp_out", reference=batch, steps=8)
    # a no-op intervention forces the search through the bridge: same constant up to float error
    noop = [("blocks.0.hook_resid_pre", lambda act, hook: act)]
    slow = optimal_constant(model, "blocks.0.hook_mlp_out", reference=batch, steps=8, hooks=noop)
    torch.testing.assert_close(fast[0::2], slow[0::2], atol=1e-3, rtol=1e-3)
    # LayerNorm model, random weights, two layers: in layer 0 the search runs layer 1 too.  The two paths
    # agree to float error after one step; L-BFGS may then amplify float differences, not the loss
    deep = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=2))
    for hook, index in (("blocks.0.attn.hook_z", 0), ("blocks.0.hook_mlp_out", None), ("blocks.1.attn.hook_z", 1)):
        one = [optimal_constant(deep, hook, index=index, reference=batch, steps=1, hooks=h) for h in (None, noop)]
        torch.testing.assert_close(one[0], one[1], atol=1e-5, rtol=1e-4)
        four = [optimal_constant(deep, hook, index=index, reference=batch, steps=4, hooks=h) for h in (None, noop)]
        losses = [_loss_with(deep, batch, hook, index, c) for c in four]
        assert losses[0] == pytest.approx(losses[1], abs=2e-4), hook
        assert losses[0] < _loss_with(deep, batch, hook, index, one[0]), hook
    mean = reference_activations(model, batch, ["blocks.0.hook_mlp_out"])["blocks.0.hook_mlp_out"].mean(0)
    assert torch.equal(optimal_constant(model, "blocks.0.hook_mlp_out", reference=batch, steps=0), mean)
    assert hook_count(model) == 0


def test_binding_free_mode_keeps_the_queries_and_pairs_by_row():
    model = bias_head_model()
    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=200)
    table = ablation_table(model, hows=("binding_free",), test_set=batch)
    row = table.get("L0H0", "binding_free")
    # the eliminator reads the answers, which the binding-free reference redraws: elimination breaks and
    # the prediction is the reference's unused value (its answer exactly on the rows whose last query is new)
    assert row["elimination_accuracy"] < 0.5
    assert row["follows_reference"] == pytest.approx(float((~batch.extras["repeated"]).float().mean()))
    hooks = ablate_mlp(model, 0, "binding_free", reference=batch)
    with pytest.raises(ValueError, match="binding_free ablation pairs by row and needs a batch of the reference's size 200"):
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            model(batch.tokens[:10])
    assert hook_count(model) == 0


def test_new_modes_are_validated_and_listed():
    model = bias_head_model()
    with pytest.raises(ValueError, match=r"how must be one of \('zero', 'mean', 'resample', 'binding_free', "
                                         r"'optimal'\), got 'optimum'"):
        ablate_mlp(model, 0, "optimum")
    with pytest.raises(ValueError, match="steps must be >= 0, got -1"):
        optimal_constant(model, "blocks.0.hook_mlp_out", steps=-1)
    with pytest.raises(ValueError, match="hows must be modes from"):
        head_roles(model, hows=("zero", "optimum"))
