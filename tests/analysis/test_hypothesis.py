"""Hypotheses as objects: causal scrubbing, interchange accuracy and replacement, on models whose
mechanism is known by construction (the weight-built induction model) or checkable by hand."""

from __future__ import annotations

import pytest
import torch

from perm_circuits.analysis import ablate_head
from perm_circuits.analysis.hypothesis import (
    Component, Feature, FeatureRule, HighLevelModel, Hypothesis, causal_scrub, fit_table, interchange_accuracy,
    replace, retention,
)
from perm_circuits.handbuilt import build_induction_model
from perm_circuits.hooks import hook_count, run_logits
from perm_circuits.tasks.permutation_data import TaskConfig, make_batch

RECALLED = Feature("recalled y", lambda row: next((row[2 * k + 1] for k in range(4) if row[2 * k] == row[-1]), 0))
YS = Feature("revealed ys (multiset)", lambda row: tuple(sorted(row[1:-1:2])))
PREV = Feature("previous tokens", lambda t: t[:, :-1], batched=True)
X5 = Feature.token(8, "x5")


def last_accuracy(logits, batch):
    return (logits[:, -1].argmax(-1) == batch.targets[:, -1]).float()


@pytest.fixture(scope="module")
def induction():
    model = build_induction_model(5)
    return model, make_batch(model.task_config, 400, split="test", seed=0)


def test_component_names_round_trip_and_hypothesis_prints():
    for name in ("embed", "L1H0", "L1H0.q", "L0MLP", "L0MLP.in", "resid2", "L1H1@8"):
        assert str(Component.parse(name)) == name
    hypothesis = Hypothesis.of({"L1H0@8": RECALLED, "L1H1@8": [YS, X5]}, name="induction")
    assert str(hypothesis) == "Hypothesis 'induction'\n  L1H0@8 <- recalled y\n  L1H1@8 <- revealed ys (multiset), x5"
    with pytest.raises(ValueError, match="cannot parse component 'L1X0'"):
        Component.parse("L1X0")
    with pytest.raises(ValueError, match="repeated"):
        Hypothesis.of({"L1H0": X5, Component("z", 1, 0): YS})


def test_bad_arguments_are_refused_before_work(induction):
    model, batch = induction
    with pytest.raises(ValueError, match="layer 7 out of range"):
        causal_scrub(model, Hypothesis.of({"L7H0": X5}), batch, last_accuracy)
    with pytest.raises(ValueError, match="head 3 out of range"):
        causal_scrub(model, Hypothesis.of({"L0H3": X5}), batch, last_accuracy)
    with pytest.raises(ValueError, match=r"one number per row, shape \(400,\) \(batch,\)"):
        causal_scrub(model, Hypothesis(()), batch, lambda logits, b: logits[:, -1].argmax(-1).float().mean())
    with pytest.raises(TypeError, match="hypothesis"):
        causal_scrub(model, {"L1H0": X5}, batch, last_accuracy)


def test_induction_hypothesis_recovers_and_a_wrong_claim_does_not(induction):
    model, batch = induction
    right = Hypothesis.of({"L0H0": PREV, "L1H0@8": RECALLED, "L1H1@8": YS}, name="induction")
    result = causal_scrub(model, right, batch, last_accuracy, n_boot=100)
    assert result.model_metric == 1.0 and 0.1 < result.random_metric < 0.4
    assert result.recovery >= 0.95 and result.ci_low >= 0.95
    assert result.forwards == 5  # L0H0 once, each layer-1 head once plus its own draw of L0H0
    # the induction head said to read only the query token: recall is lost
    wrong = Hypothesis.of({"L0H0": PREV, "L1H0@8": X5, "L1H1@8": YS}, name="induction head reads x5")
    bad = causal_scrub(model, wrong, batch, last_accuracy, n_boot=100)
    assert bad.ci_high < 0.6 and bad.recovery < result.recovery - 0.4
    frame = bad.to_dataframe().set_index("component")
    assert frame.loc["L1H0@8", "recovery"] < 0.6 and frame.loc["L1H1@8", "recovery"] == pytest.approx(1.0)


def test_identity_everywhere_recovers_one_and_nothing_named_recovers_zero(pretrained):
    model = pretrained("d32h2")
    batch = make_batch(TaskConfig(repeat_ratio=0.3), 200, split="test", seed=1)
    everything = Hypothesis.of({c: Feature.identity() for c in ("embed", "L0H0", "L0H1", "L0MLP")})
    full = causal_scrub(model, everything, batch, last_accuracy, n_boot=50, per_claim=False)
    assert full.recovery == pytest.approx(1.0, abs=1e-6) and full.scrubbed_metric == full.model_metric
    none = causal_scrub(model, Hypothesis(()), batch, last_accuracy, n_boot=50)
    assert none.recovery == 0.0 and none.scrubbed_metric == none.random_metric < full.model_metric
    again = causal_scrub(model, Hypothesis(()), batch, last_accuracy, n_boot=50)
    assert again == none  # same seed, same draws, bit for bit


def test_interchange_accuracy_finds_the_recall_variable(induction):
    model, batch = induction
    repeated = torch.nonzero(batch.extras["repeated"]).flatten()
    pairs = torch.stack([repeated, repeated.roll(1)], 1)
    high = HighLevelModel({"recalled": RECALLED}, output=lambda values: values["recalled"])
    good = interchange_accuracy(model, high, {"recalled": "L1H0@8"}, pairs, batch=batch)
    wrong = interchange_accuracy(model, high, {"recalled": "L0H1"}, pairs, batch=batch)
    # the source's recalled y always wins: +1 from the induction head against at most 5/8 removed
    assert good.accuracy["recalled"] == 1.0
    same = float((torch.tensor(RECALLED.values(batch.tokens))[pairs[:, 0]]
                  == torch.tensor(RECALLED.values(batch.tokens))[pairs[:, 1]]).float().mean())
    assert wrong.overall == pytest.approx(same)  # L0H1 is zero: only pairs that already agree count
    with pytest.raises(ValueError, match="lacks"):
        interchange_accuracy(model, high, {"other": "L1H0"}, pairs, batch=batch)


def test_replacement_by_rules_keeps_the_metric_composes_and_leaves_no_hook(induction):
    model, batch = induction
    table = fit_table(model, "L1H1@8", YS, batch)
    hooks = replace(model, "L1H1@8", table, batch)
    kept = retention(model, batch, hooks, {"accuracy": last_accuracy})
    assert kept.retention["accuracy"] == pytest.approx(1.0)
    constant = fit_table(model, "L1H0@8", Feature.constant(), batch)
    lost = retention(model, batch, replace(model, "L1H0@8", constant, batch), {"accuracy": last_accuracy})
    recall = batch.extras["repeated"].float().mean().item()
    assert lost.retention["accuracy"] == pytest.approx(1 - recall, abs=0.05)  # the recall rows are lost
    # a function of named features: the induction head's output, written down
    induction_table = fit_table(model, "L1H0@8", RECALLED, batch)
    copy = FeatureRule((RECALLED,), lambda y: induction_table.table[(y,)])
    written = replace(model, "L1H0@8", copy, batch)
    assert written[0][0] == "blocks.1.attn.hook_z"
    assert retention(model, batch, written + hooks, {"accuracy": last_accuracy}).retention["accuracy"] == 1.0
    combined = hooks + ablate_head(model, layer=1, head=0, how="zero")
    zeroed = run_logits(model, batch.tokens, combined)
    assert (last_accuracy(zeroed, batch).mean() < 0.9) and hook_count(model) == 0

    def boom(activation, hook):
        raise RuntimeError("rule failed")

    with pytest.raises(RuntimeError, match="rule failed"):
        run_logits(model, batch.tokens, hooks + [("blocks.0.attn.hook_z", boom)])
    assert hook_count(model) == 0


def test_unnamed_random_needs_the_embedding_named(induction):
    """Chan et al.'s stricter resampling: unnamed upstream components run on random rows, so the
    tokens reach a component only through the named embedding."""
    model, batch = induction
    claims = {"L0H0": PREV, "L1H0@8": RECALLED, "L1H1@8": YS}
    named = causal_scrub(model, Hypothesis.of({"embed": Feature.identity(), **claims}), batch, last_accuracy,
                         n_boot=50, per_claim=False, unnamed="random")
    assert named.recovery == pytest.approx(1.0) and named.forwards == 11
    bare = causal_scrub(model, Hypothesis.of(claims), batch, last_accuracy, n_boot=50, per_claim=False,
                        unnamed="random")
    assert bare.ci_high < 0.2  # no component may read the tokens: nothing is recovered
    with pytest.raises(ValueError, match="unnamed must be"):
        causal_scrub(model, Hypothesis.of(claims), batch, last_accuracy, unnamed="fresh")
