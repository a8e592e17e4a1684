"""A task report with a custom forward that runs no hook point (a checkpoint's training forward)."""

from __future__ import annotations

import pytest

from perm_circuits.analysis.report_data import task_report_data


def other_function(model, tokens):
    """A forward without hook points whose logits are not ``model(tokens)``'s."""
    from perm_circuits.systems.birth_model import plain_forward

    return plain_forward(model, tokens).flip(-1)


def test_a_plain_forward_of_the_same_model_gets_every_section():
    """A checkpoint's plain-PyTorch training forward computes model(tokens): the hook-based sections
    run the model's own forward (they were left out, so a bigram checkpoint's page had no analyses)."""
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model, plain_forward
    from perm_circuits.tasks.bigram import BigramTriggerTask

    model = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))
    task = BigramTriggerTask(N=16, T=32)
    data = task_report_data(model, task, n=20, n_sequences=1, forward=plain_forward, ablation_hows=("zero",),
                            n_analysis=20, n_boot=10)
    assert set(data.patterns) == {f"blocks.{layer}.attn.hook_pattern" for layer in (0, 1)} and data.attention is not None
    assert data.ablation is not None and data.attribution is not None and "ablation" not in data.notes
    assert "model(tokens)" in data.about["forward"]


def test_a_forward_without_hooks_leaves_attention_out_with_a_note():
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model, plain_forward
    from perm_circuits.tasks.bigram import BigramTriggerTask

    model = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))
    task = BigramTriggerTask(N=16, T=32)
    data = task_report_data(model, task, n=20, n_sequences=1, forward=other_function, ablation_hows=(),
                            n_analysis=20)
    assert data.patterns == {} and data.attention is None and "forward" not in data.about
    assert "no attention patterns" in data.notes["attention"]
    same = task_report_data(model, task, n=20, n_sequences=1, forward=plain_forward, ablation_hows=(), analyses=False)
    own = task_report_data(model, task, n=20, n_sequences=1, ablation_hows=(), analyses=False)
    assert same.evaluation.metrics == pytest.approx(own.evaluation.metrics, rel=1e-4)  # model(tokens), plain PyTorch


def test_the_page_says_why_attention_is_missing(tmp_path):
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model
    from perm_circuits.tasks.bigram import BigramTriggerTask
    from perm_circuits.views.task_page import render_task_report

    model = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))
    data = task_report_data(model, BigramTriggerTask(N=16, T=32), n=20, n_sequences=1, forward=other_function,
                            ablation_hows=(), analyses=False)
    text = render_task_report(data, tmp_path / "page").read_text()
    assert "runs no attention hook point" in text and "exposes no attention-pattern hook point" not in text
