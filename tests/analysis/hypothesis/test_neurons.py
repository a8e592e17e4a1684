"""Neuron rules: tables over named features fitted per neuron, and the replacement MLP they make."""

from __future__ import annotations

import pytest
import torch

from perm_circuits.analysis.hypothesis import Feature, retention
from perm_circuits.analysis.hypothesis.neurons import fit_neuron_rules, post_hook
from perm_circuits.analysis.hypothesis.spec import batch_tokens
from perm_circuits.hooks import hook_count, run_capture, run_logits
from perm_circuits.tasks.permutation_data import TaskConfig, make_batch

LAST = 8


@pytest.fixture(scope="module")
def setting(pretrained):
    model = pretrained("d32h2")
    tokens = batch_tokens(make_batch(TaskConfig(repeat_ratio=0.3), 600, split="test", seed=3))
    return model, tokens


def _accuracy(logits, batch):
    return (logits[:, LAST].argmax(-1) == batch.targets[:, LAST]).float()


def test_feature_codes_agree_with_values(setting):
    _, tokens = setting
    for feature in (Feature.token(LAST), Feature("pair", lambda t: t[:, :2], batched=True),
                    Feature("used", lambda row: frozenset(row[1:LAST:2]))):
        codes, values = feature.codes(tokens)
        assert [values[c] for c in codes.tolist()] == feature.values(tokens)


def test_identity_rules_explain_everything_and_reproduce_the_model(setting):
    """With the whole input as the one feature, every table cell is one row's own activation: R^2 = 1 for
    every neuron, and the replacement MLP gives the model's own logits on the fit rows."""
    model, tokens = setting
    rules = fit_neuron_rules(model, tokens, {LAST: (Feature.identity(),)}, max_features=1)
    frame = rules.to_dataframe()
    assert len(frame) == 64 and frame["explained"].all()
    assert frame["r2"].min() == pytest.approx(1.0, abs=1e-9)
    assert frame["share"].sum() == pytest.approx(1.0)
    hooks = rules.hooks(model, tokens, "rule")
    assert torch.allclose(run_logits(model, tokens, hooks), run_logits(model, tokens), atol=1e-5)
    assert hook_count(model) == 0


def test_a_constant_feature_is_the_mean_and_mean_ablation_sets_the_mean(setting):
    model, tokens = setting
    rules = fit_neuron_rules(model, tokens, {LAST: (Feature.constant(),)}, threshold=0.5)
    _, store = run_capture(model, tokens, [post_hook(0)])
    acts = store[post_hook(0)][:, LAST]
    alive = acts.std(0) > 0
    frame = rules.to_dataframe()
    # a feature that never varies adds nothing: each live neuron's rule reads nothing, R^2 = 0, unexplained
    assert (frame.loc[alive.numpy(), "rule"] == "constant").all() and (frame.loc[alive.numpy(), "r2"] == 0).all()
    assert rules.unexplained_share(0, LAST) == pytest.approx(float(frame.loc[alive.numpy(), "share"].sum()))
    _, patched = run_capture(model, tokens, [post_hook(0)], rules.hooks(model, tokens, "mean"))
    assert torch.allclose(patched[post_hook(0)][:, LAST], acts.mean(0).expand_as(acts), atol=1e-5)
    _, kept = run_capture(model, tokens, [post_hook(0)], rules.hooks(model, tokens, "keep"))
    assert torch.equal(kept[post_hook(0)][:, LAST][:, alive], acts[:, alive])


def test_greedy_choice_reads_the_informative_feature_and_the_rules_keep_the_metric(setting):
    model, tokens = setting
    noise = Feature("row parity", lambda t: torch.arange(t.shape[0]) % 2, batched=True)
    used = Feature("used", lambda t: (1 << (t[:, 1:LAST:2] - 1)).sum(1), batched=True)
    bound = Feature("bound", lambda t: ((t[:, 0:LAST:2] == t[:, LAST:]) * t[:, 1:LAST:2]).sum(1), batched=True)
    rules = fit_neuron_rules(model, tokens, {LAST: (noise, Feature.token(LAST, "x5"), used, bound)})
    frame = rules.to_dataframe()
    # noise is never a neuron's only feature (on 600 rows it can still add >= 0.01 R^2 as a third one)
    assert (frame["features"] != "row parity").all() and frame["n_features"].max() <= 3
    big = frame.sort_values("share").iloc[-1]
    assert big["explained"] and "used" in big["features"] and "row parity" not in big["features"]
    kept = retention(model, make_batch(TaskConfig(repeat_ratio=0.3), 600, split="test", seed=3),
                     rules.hooks(model, tokens, "rule"), {"accuracy": _accuracy})
    assert kept.retention["accuracy"] >= 0.95


def test_hooks_compose_and_leave_nothing_behind_after_an_error(setting):
    model, tokens = setting
    rules = fit_neuron_rules(model, tokens, {LAST: (Feature.token(LAST),)}, max_features=1)

    def boom(activation, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_logits(model, tokens, rules.hooks(model, tokens) + [("blocks.0.hook_resid_post", boom)])
    assert hook_count(model) == 0


def test_bad_arguments_are_refused(setting):
    model, tokens = setting
    good = {LAST: (Feature.token(LAST),)}
    with pytest.raises(ValueError, match="position 9"):
        fit_neuron_rules(model, tokens, {9: (Feature.token(LAST),)})
    with pytest.raises(TypeError, match="library"):
        fit_neuron_rules(model, tokens, {})
    with pytest.raises(ValueError, match="layer 3"):
        fit_neuron_rules(model, tokens, good, layers=[3])
    with pytest.raises(ValueError, match="max_features"):
        fit_neuron_rules(model, tokens, good, max_features=0)
    with pytest.raises(ValueError, match="threshold"):
        fit_neuron_rules(model, tokens, good, threshold=1.5)
    rules = fit_neuron_rules(model, tokens, good, max_features=1)
    with pytest.raises(ValueError, match="unexplained"):
        rules.hooks(model, tokens, "zero")


def test_a_required_feature_is_in_every_rule_and_counts_towards_max_features(setting):
    """``required`` puts a named feature in every rule of its position before the greedy choice: even the
    noise feature, which the greedy choice never takes alone; the rule then reads at most one more."""
    model, tokens = setting
    noise = Feature("row parity", lambda t: torch.arange(t.shape[0]) % 2, batched=True)
    library = {LAST: (noise, Feature.token(LAST, "x5"), Feature.token(LAST - 1, "y4"))}
    one = fit_neuron_rules(model, tokens, library, max_features=1).to_dataframe()
    forced = fit_neuron_rules(model, tokens, library, max_features=2, required={LAST: ("row parity",)}).to_dataframe()
    assert not one["features"].str.contains("row parity").any()
    assert forced["features"].str.contains("row parity").all() and forced["n_features"].max() == 2
    # the forced rule reads the noise feature and one more: never a worse fit than the free choice of one feature
    assert (forced["r2"] >= one["r2"] - 1e-9).all()
    with pytest.raises(ValueError, match="'nope' is not in library"):
        fit_neuron_rules(model, tokens, library, required={LAST: ("nope",)})
    with pytest.raises(ValueError, match="position 3"):
        fit_neuron_rules(model, tokens, library, required={3: ("x5",)})
    with pytest.raises(ValueError, match="max_features"):
        fit_neuron_rules(model, tokens, library, max_features=1, required={LAST: ("x5", "y4")})
