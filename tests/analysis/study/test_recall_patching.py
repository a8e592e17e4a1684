"""A PatchingCache shared across sweeps gives the same numbers as sweeps that run their own."""

from __future__ import annotations

import pytest
import torch

from perm_circuits import ModelConfig, TaskConfig, build_model
from perm_circuits.analysis.study.recall_patching import (
    PatchingCache,
    patch_head_outputs,
    patch_mlp,
    patching_cache,
    patching_pair,
)

TASK = TaskConfig(repeat_ratio=0.3)


def _model(seed: int):
    model = build_model(ModelConfig(d_model=16, n_heads=2, seed=seed))
    model.task_config = TASK
    return model


def test_cache_reuses_the_unpatched_runs_exactly():
    model = _model(5)
    pair = patching_pair(TASK, n=64, seed=1)
    cache = patching_cache(model, pair, [], [])
    assert isinstance(cache, PatchingCache)
    assert cache.caches["clean"] == {}  # names are cached on demand by the first sweep
    for sweep in (patch_head_outputs, patch_mlp):
        own = sweep(model, pair, seed=3, n_boot=20)
        shared = sweep(model, pair, seed=3, n_boot=20, cache=cache)
        assert torch.equal(own.per_sample, shared.per_sample)
        assert [(c.mean, c.ci_low, c.ci_high) for c in own.cells] == [(c.mean, c.ci_low, c.ci_high) for c in shared.cells]
    # the head sweep cached hook_z, the MLP sweep added hook_mlp_out
    assert set(cache.caches["clean"]) == {"blocks.0.attn.hook_z", "blocks.0.hook_mlp_out"}


def test_cache_of_another_model_or_type_is_refused():
    model, other = _model(5), _model(6)
    pair = patching_pair(TASK, n=16, seed=1)
    with pytest.raises(ValueError, match="different model"):
        patch_head_outputs(model, pair, n_boot=10, cache=patching_cache(other, pair, [], []))
    with pytest.raises(TypeError, match="cache"):  # beartype's check at test time, ours otherwise
        patch_head_outputs(model, pair, n_boot=10, cache={"clean": {}})
