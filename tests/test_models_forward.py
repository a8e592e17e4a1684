"""perm_circuits.models' one plain-PyTorch body (run_blocks): a range of blocks and the last
block at chosen query positions give the full forward's numbers (the optimal-ablation search runs
it that way), and fast_forward is still the bridge's forward."""

from __future__ import annotations

import torch

from perm_circuits.models import ModelConfig, build_model, fast_forward, run_blocks, unembed, weight_ops


def test_a_range_of_blocks_at_query_positions_is_the_full_forward_there():
    config = ModelConfig(d_model=16, n_heads=2, n_layers=3, seed=4)
    model = build_model(config).eval()
    tokens = torch.randint(0, config.V + 1, (6, 2 * config.V - 1), generator=torch.Generator().manual_seed(1))
    w = {k: v.detach() for k, v in model.state_dict().items()}
    norm, linear = weight_ops(config, w)
    resid = w["embed.weight"][tokens] + w["pos_embed.weight"][: tokens.shape[1]]
    full = unembed(w, run_blocks(config, resid, norm, linear), norm)
    assert torch.allclose(full, model(tokens), atol=1e-5)
    assert torch.equal(full, fast_forward(model, tokens))
    after_first = run_blocks(config, resid, norm, linear, layers=range(1))
    rest = run_blocks(config, after_first, norm, linear, layers=range(1, 3))
    assert torch.equal(unembed(w, rest, norm), full)  # two ranges: the same arithmetic
    queries = torch.tensor([0, 3, 8])
    some = unembed(w, run_blocks(config, after_first, norm, linear, layers=range(1, 3), queries=queries), norm)
    assert some.shape == (6, 3, config.V + 1)
    assert torch.allclose(some, full[:, queries], atol=1e-5)
    assert not torch.allclose(some, full[:, [1, 3, 8]], atol=1e-3)  # the positions asked for, not others
