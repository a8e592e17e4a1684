"""A task report with a custom forward that runs no hook point (a checkpoint's training forward)."""

from __future__ import annotations

import pytest

from perm_circuits.analysis.report_data import task_report_data


def test_a_forward_without_hooks_leaves_attention_out_with_a_note():
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model, plain_forward
    from perm_circuits.tasks.bigram import BigramTriggerTask

    model = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))
    task = BigramTriggerTask(N=16, T=32)
    data = task_report_data(model, task, n=20, n_sequences=1, forward=plain_forward, ablation_hows=(),
                            n_analysis=20)
    assert data.patterns == {} and data.attention is None
    assert "no attention patterns" in data.notes["attention"]
    own = task_report_data(model, task, n=20, n_sequences=1, ablation_hows=(), analyses=False)
    assert data.evaluation.metrics == pytest.approx(own.evaluation.metrics, rel=1e-4)  # model(tokens), plain PyTorch


def test_the_page_says_why_attention_is_missing(tmp_path):
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model, plain_forward
    from perm_circuits.tasks.bigram import BigramTriggerTask
    from perm_circuits.views.task_page import render_task_report

    model = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))
    data = task_report_data(model, BigramTriggerTask(N=16, T=32), n=20, n_sequences=1, forward=plain_forward,
                            ablation_hows=(), analyses=False)
    text = render_task_report(data, tmp_path / "page").read_text()
    assert "runs no attention hook point" in text and "exposes no attention-pattern hook point" not in text
