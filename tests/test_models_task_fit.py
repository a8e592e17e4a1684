"""perm_circuits.models: a ModelConfig carries no task's rule (it is checked against the task it
trains on where it meets it), and fast_forward runs any build_model bridge, whatever its task."""

from __future__ import annotations

import pytest
import torch

from perm_circuits.models import ModelConfig, build_model, check_permutation_fit, fast_forward, model_config_of
from perm_circuits.tasks.runner import default_model


def _tokens(d_vocab: int = 7, seq: int = 8) -> torch.Tensor:
    return torch.randint(0, d_vocab, (4, seq), generator=torch.Generator().manual_seed(0))


def test_a_config_for_a_task_of_its_own_length_is_not_held_to_the_permutation_rule():
    config = ModelConfig(d_model=16, n_heads=2, V=6, n_ctx=8)  # a task of 8 tokens over 6 values
    assert config.resolved_n_ctx == 8
    with pytest.raises(ValueError, match=r"n_ctx=8 is shorter than the permutation task's 2V-1=11"):
        check_permutation_fit(config)  # where the model meets the permutation task
    from perm_circuits import TrainConfig, train

    with pytest.raises(ValueError, match=r"n_ctx=8 is shorter than the permutation task's 2V-1=11"):
        train(config, None, TrainConfig(epochs=1))  # the study's loop trains on the permutation task
    assert check_permutation_fit(ModelConfig(V=6)) == ModelConfig(V=6)  # default n_ctx 2V-1


def test_fast_forward_runs_a_bridge_built_for_another_task():
    model = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=2, V=6, n_ctx=8))
    tokens = _tokens()
    assert torch.allclose(fast_forward(model, tokens), model(tokens), atol=1e-5)


def test_fast_forward_runs_a_bridge_without_a_model_config_in_plain_pytorch():
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(TransformerBridgeConfig(
        d_model=16, d_head=8, n_heads=2, n_layers=2, n_ctx=8, d_vocab=7, d_mlp=32, act_fn="relu",
        normalization_type="LN", positional_embedding_type="standard", seed=0, tokenizer_prepends_bos=False,
        model_name="own")).eval()
    tokens = _tokens()
    expected = model(tokens)
    calls = []
    handle = model.embed.register_forward_hook(lambda *args: calls.append(1))
    try:
        got = fast_forward(model, tokens)
    finally:
        handle.remove()
    assert calls == [] and torch.allclose(got, expected, atol=1e-5)  # its own arithmetic, the bridge's logits
    with pytest.raises(TypeError, match=r"not a permutation-lookup model .*shorter than the permutation task's 2V-1=11"):
        model_config_of(model)  # read as the study's model, it still is not one


def test_fast_forward_runs_any_other_bridge_through_its_own_forward():
    from perm_circuits.tasks import BigramTriggerTask

    task = BigramTriggerTask()  # 65 ids: no ModelConfig describes it
    model = default_model(task, d_model=16, n_heads=2)
    tokens = _tokens(task.d_vocab, 12)
    assert torch.allclose(fast_forward(model, tokens), model(tokens), atol=1e-6)
