import math

import pytest
import torch

from perm_circuits import TaskConfig, build_model, evaluate, make_test_set, recall_generalisation
from perm_circuits.evaluate import evaluate_logits
from perm_circuits.posterior import bayes_posterior


def _oracle_logits(batch, probs):
    """Logits whose value-token softmax equals ``probs`` exactly at the y positions (token 0 at -inf)."""
    logits = torch.full((len(batch), 9, 6), -1e4)
    logits[:, 0::2, 1:] = probs.clamp_min(1e-30).log()
    return logits


def test_bayes_oracle_has_zero_error_and_bayes_accuracy():
    config = TaskConfig(repeat_ratio=0.3)
    batch = make_test_set(config, n=2000)
    uniform = bayes_posterior(batch.tokens, config).probs
    evaluation = evaluate_logits(_oracle_logits(batch, uniform), batch, config)
    result = evaluation.detail
    for step, expected in zip(result.steps, [1 / 5, 1 / 4, 1 / 3, 1 / 2, 1.0]):
        assert step.mae_uniform < 1e-6 and step.max_ae_uniform < 1e-6
        assert step.bayes_accuracy == pytest.approx(expected, abs=1e-6)
    assert result.elimination.accuracy == 1.0 and result.memorization.accuracy == 1.0
    assert result.memorization.n + result.elimination.n == 2000
    assert abs(result.memorization.n / 2000 - 0.3) < 0.03
    expected_loss = (math.log(5) + math.log(4) + math.log(3) + math.log(2)) / 5
    assert evaluation.test_loss == pytest.approx(expected_loss, abs=1e-4)
    assert evaluation.reference["reference_tv"] < 1e-6 and evaluation.reference["reference_agreement"] == 1.0


def test_elimination_only_oracle_fails_memorization():
    """A pure elimination predictor: perfect on new queries, 0% on repeated ones (the study's trap)."""
    config = TaskConfig(repeat_ratio=0.3)
    batch = make_test_set(config, n=1000)
    probs = bayes_posterior(batch.tokens, config).probs.clone()
    used = torch.zeros(len(batch), 5, dtype=torch.bool)
    used.scatter_(1, batch.extras["ys"][:, :4] - 1, True)
    probs[:, 4] = (~used).float()
    result = evaluate_logits(_oracle_logits(batch, probs), batch, config).detail
    assert result.elimination.accuracy == 1.0 and result.memorization.accuracy == 0.0
    assert result.memorization.max_ae == pytest.approx(1.0)


def test_evaluate_untrained_model_and_tables():
    model = build_model("d16h1")
    result = evaluate(model, task=TaskConfig(repeat_ratio=0.3), n=500)
    detail = result.detail
    frame = detail.step_dataframe()
    assert list(frame.index) == [1, 2, 3, 4, 5] and "mae_train" in frame.columns
    assert list(detail.subgroup_dataframe().index) == ["elimination", "memorization", "recall_x1"]
    assert detail.recall_by_source[0].n == detail.memorization.n  # the study repeats only x1
    assert not any(key.startswith("recall_x") for key in result.summary())  # the shipped metrics' keys
    text = str(result)
    assert "| step" in text.replace("|   step", "| step") and "memorization" in text and "Probe" in text
    from perm_circuits import probe_sequence

    token0 = model(probe_sequence())[0, 8].softmax(-1)[0].item()
    assert len(detail.probe) == 5 and sum(detail.probe) == pytest.approx(1.0 - token0, abs=1e-6)
    assert result.test_loss == pytest.approx(2.0217, abs=1e-3)  # seeded init, fixed test set


def test_hooks_change_the_evaluation():
    model = build_model("d16h1")
    zero_all = [("blocks.0.hook_resid_post", lambda x, hook: torch.zeros_like(x))]
    result = evaluate(model, task=TaskConfig(), n=300, hooks=zero_all)
    # zero residual -> LayerNorm of zeros -> logits equal the unembedding bias (zero): uniform over 6 tokens
    assert result.test_loss == pytest.approx(math.log(6), abs=1e-4)


def test_evaluate_rejects_bad_inputs():
    model = build_model("d16h1")
    with pytest.raises(TypeError, match="test_set must be a TaskBatch|parameter 'test_set'"):
        evaluate(model, test_set=torch.ones(3, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown hook point"):
        evaluate(model, n=10, hooks=[("blocks.0.hook_nothing", lambda x, hook: x)])


def test_recall_generalisation_shape():
    result = recall_generalisation(build_model("d16h1"), task=TaskConfig(), n=100)
    assert len(result.recall) == 4 and list(result.to_dataframe().index) == ["x1", "x2", "x3", "x4"]
    with pytest.raises(TypeError, match="seed must be an int, got bool True"):
        recall_generalisation(build_model("d16h1"), task=TaskConfig(), n=10, seed=True)


@pytest.mark.parametrize("name", ["d16h1", "d32h2"])
def test_shipped_models_recall_only_a_repeated_x1(name, pretrained):
    """Training only repeats x1: the shipped models learned that position, not general recall."""
    result = recall_generalisation(pretrained(name), n=None)  # exhaustive: 24 test perms x 120 orders per k
    assert result.n_per_source == 24 * 120
    assert result.recall == (1.0, 0.0, 0.0, 0.0)
    assert result.elimination == 1.0


def test_recall_generalisation_n_is_checked():
    with pytest.raises(ValueError, match=r"n must be a positive int or None \(exhaustive\), got 0"):
        recall_generalisation(build_model("d16h1"), n=0)


def test_no_hooks_left_after_a_hook_raises():
    from perm_circuits.hooks import hook_count

    model = build_model("d16h1")

    def boom(x, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        evaluate(model, n=20, hooks=[("blocks.0.attn.hook_z", boom)])
    assert hook_count(model) == 0
    with pytest.raises(ValueError):  # a bad second hook: nothing is attached at all
        evaluate(model, n=20, hooks=[("blocks.0.attn.hook_z", lambda x, hook: x), ("nope", boom)])
    assert hook_count(model) == 0


# ----------------------------------------------------------------------------- repeat sources


def _x1_shortcut_logits(batch, config):
    """The Bayes posterior except at a repeated last query: answer y1 (right only when it repeats x1)."""
    probs = bayes_posterior(batch.tokens, config).probs.clone()
    rep = batch.extras["repeated"]
    probs[rep, 4] = torch.nn.functional.one_hot(batch.extras["ys"][rep, 0] - 1, 5).float()
    return _oracle_logits(batch, probs)


def test_one_subgroup_per_repeat_source():
    config = TaskConfig(repeat_ratio=0.4, repeat_sources=(1, 2, 3, 4))
    batch = make_test_set(config, n=4000)
    evaluation = evaluate_logits(_x1_shortcut_logits(batch, config), batch, config)
    result = evaluation.detail
    groups = result.subgroup_dataframe()
    assert list(groups.index) == ["elimination", "memorization", "recall_x1", "recall_x2", "recall_x3", "recall_x4"]
    n = [g.n for g in result.recall_by_source]
    assert sum(n) == result.memorization.n and all(abs(m / 4000 - 0.1) < 0.015 for m in n)
    assert n == [int((batch.extras["repeat_source"] == s).sum()) for s in range(4)]
    assert result.recall_accuracy_by_source == {1: 1.0, 2: 0.0, 3: 0.0, 4: 0.0}
    assert result.recall_accuracy == pytest.approx(n[0] / sum(n), abs=1e-7)  # every repeated sample
    assert result.elimination.accuracy == 1.0
    assert groups.loc["recall_x1", "max_ae"] < 1e-6 and groups.loc["recall_x3", "max_ae"] == pytest.approx(1.0)
    summary = evaluation.summary()
    assert [summary[f"recall_x{k}_accuracy"] for k in (1, 2, 3, 4)] == [1.0, 0.0, 0.0, 0.0]
    assert "recall_x4" in evaluation.to_markdown() and "recall_x4" in str(evaluation)


def test_single_other_source_is_reported_by_name():
    config = TaskConfig(repeat_ratio=0.5, repeat_sources=(3,))
    batch = make_test_set(config, n=600)
    evaluation = evaluate_logits(_x1_shortcut_logits(batch, config), batch, config)
    assert [g.name for g in evaluation.detail.recall_by_source] == ["recall_x3"]
    assert evaluation.metrics["recall_accuracy"] == 0.0 and evaluation.summary()["recall_x3_accuracy"] == 0.0
    assert "recall_x1_accuracy" not in evaluation.summary()


def test_evaluate_default_test_set_follows_the_model_task():
    model = build_model("d16h1")
    model.task_config = TaskConfig(repeat_ratio=0.3, repeat_sources=(2, 4))
    result = evaluate(model, n=400, probe=False)
    assert [g.name for g in result.detail.recall_by_source] == ["recall_x2", "recall_x4"]
    no_repeats = evaluate(model, task=TaskConfig(), n=50, probe=False).detail
    assert no_repeats.recall_by_source == () and math.isnan(no_repeats.recall_accuracy)
    assert list(no_repeats.subgroup_dataframe().index) == ["elimination"]


def test_recall_generalisation_ignores_the_training_sources_when_measuring():
    """Every k is measured on the same batches whatever the task repeats; trained_sources says which."""
    model = build_model("d16h1")
    study = recall_generalisation(model, task=TaskConfig(repeat_ratio=0.3), n=300)
    general = recall_generalisation(model, task=TaskConfig(repeat_ratio=0.3, repeat_sources=(1, 2, 3, 4)), n=300)
    assert general.recall == study.recall and general.elimination == study.elimination
    assert study.trained_sources == (1,) and general.trained_sources == (1, 2, 3, 4)
    assert len(set(study.recall)) > 1  # an untrained model: the four batches really differ


def test_shipped_model_recall_is_measured_for_every_k_under_a_general_task(pretrained):
    result = recall_generalisation(pretrained("d16h1"), task=TaskConfig(repeat_ratio=0.3, repeat_sources=(1, 2, 3, 4)), n=500)
    assert result.recall == (1.0, 0.0, 0.0, 0.0) and result.elimination == 1.0
