"""analysis.figure_data: what the study's figures and the report's interactive views draw, computed."""

from __future__ import annotations

import pytest
import torch

from perm_circuits import make_test_set, probe_sequence
from perm_circuits.analysis import figure_data as D
from perm_circuits.hooks import hook_count
from perm_circuits.models import task_config_of


def test_example_activations_are_one_forward_over_the_examples(pretrained):
    model = pretrained("d32h2")
    task = task_config_of(model)
    examples = D.example_sequences(task, make_test_set(task, n=50))
    assert [label.split(" ")[0] for label, _ in examples] == ["probe", "walkthrough"]
    acts = D.example_activations(model, task, examples)
    tokens = torch.cat([seq for _, seq in examples])
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    probs = logits[:, 0::2].softmax(-1)
    assert acts.tokens[0] == tuple(probe_sequence()[0].tolist())
    assert acts.targets == ((4, 3, 5, 2, 4), (3, 5, 4, 2, 1))  # the last: recall answers 4; the walkthrough's is 1
    for i, targets in enumerate(acts.targets):
        expected = torch.tensor([float(probs[i, k, t]) for k, t in enumerate(targets)])
        torch.testing.assert_close(acts.correct[i], expected, atol=1e-6, rtol=0)
        assert acts.patterns[i].shape == (1, 2, 9, 9)
        torch.testing.assert_close(acts.patterns[i][0], cache["blocks.0.attn.hook_pattern"][i].float(), atol=1e-6,
                                   rtol=0)
    torch.testing.assert_close(acts.mlp_post[0], cache["blocks.0.mlp.hook_post"][0].float(), atol=1e-6, rtol=0)
    assert D.example_activations(model, task, []) is None
    assert hook_count(model) == 0


def test_example_sequences_of_another_V_are_test_sequences():
    from perm_circuits import TaskConfig

    task = TaskConfig(V=4, repeat_ratio=0.5)
    examples = D.example_sequences(task, make_test_set(task, n=40))
    assert [label.rsplit("(", 1)[1] for label, _ in examples] == ["repeated last query)", "new last query)"]
    assert all(seq.shape == (1, 7) for _, seq in examples)


def test_walkthrough_and_probe_numbers(pretrained):
    model = pretrained("d16h1")
    walk = D.walkthrough_distributions(model)
    assert walk.tokens == D.STUDY_SEQUENCE and walk.V == 5 and walk.model_probs.shape == (5, 5)
    torch.testing.assert_close(walk.model_probs.sum(-1), torch.ones(5), atol=1e-5, rtol=0)
    assert walk.uniform[-1].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]  # the unused value 1
    probe = D.probe_distributions({"a": model})
    assert list(probe.probs) == ["a"] and sum(probe.probs["a"]) == pytest.approx(1.0, abs=1e-5)
