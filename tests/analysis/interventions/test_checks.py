"""The shared argument validators: one index rule for every analysis module."""

from __future__ import annotations

import inspect

import pytest
import torch

from perm_circuits import ModelConfig, TaskConfig, build_model
from perm_circuits.analysis.interventions import ablation
from perm_circuits.analysis.interventions import checks as _checks
from perm_circuits.analysis.probes import dla as attribution
from perm_circuits.analysis.probes import memory
from perm_circuits.analysis.study import ffn, scores, verdict
from perm_circuits.analysis.study import recall_patching as patching

MODEL = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=2, seed=0))  # 2 layers, 2 heads, d_mlp 32


def test_layer_and_head_accept_python_style_negative_indices():
    assert [_checks.check_layer(MODEL, layer) for layer in (-2, -1, 0, 1)] == [0, 1, 0, 1]
    assert [_checks.check_head(MODEL, head) for head in (-2, -1, 0, 1)] == [0, 1, 0, 1]
    for bad in (-3, 2):
        with pytest.raises(ValueError, match=rf"layer {bad} out of range: layer must be in \[-2, 1\]"):
            _checks.check_layer(MODEL, bad)
        with pytest.raises(ValueError, match=rf"head {bad} out of range"):
            _checks.check_head(MODEL, bad)
    for bad in (True, 1.0, "0", None):
        with pytest.raises(TypeError, match="layer must be an int"):
            _checks.check_layer(MODEL, bad)


def test_positions_and_index_lists():
    assert _checks.check_positions(None, 9) is None
    assert _checks.check_positions(-1, 9) == [8]
    assert _checks.check_positions([0, -1, 3], 9) == [0, 8, 3]
    assert _checks.check_positions(torch.tensor([1, -2]), 9) == [1, 7]
    assert _checks.check_position(-9, 9) == 0
    for bad, error, match in (
        ([9], ValueError, r"position 9 out of range: position must be in \[-9, 8\] \(sequences have 9 positions\)"),
        ([-10], ValueError, r"position -10 out of range: position must be in \[-9, 8\]"),
        ([], ValueError, "positions must not be empty"),
        ([8, -1], ValueError, r"positions has repeated entries: \[8, -1\]"),
        ([1.0], TypeError, "position must be an int, got float 1.0"),
        ("8", TypeError, "positions must be an int or a sequence of ints, got str '8'"),
        (torch.tensor([1.0]), TypeError, r"positions must be ints, got a torch.float32 tensor of shape \(1,\)"),
    ):
        with pytest.raises(error, match=match) as info:
            _checks.check_positions(bad, 9)
        assert type(info.value) is error, bad
    assert _checks.check_index_list("neurons", [-1, 0], 32) == [31, 0]
    assert _checks.check_neurons(MODEL, None) is None and _checks.check_neurons(MODEL, -32) == [0]
    with pytest.raises(ValueError, match="repeated"):
        _checks.check_neurons(MODEL, [31, -1])


def test_ints_seeds_and_task_configs():
    assert _checks.check_int("n", 3, 1) == 3 and _checks.check_positive_int("top_k", 1) == 1
    with pytest.raises(ValueError, match="n must be >= 1"):
        _checks.check_int("n", 0, 1)
    with pytest.raises(ValueError, match=r"groups must be in \[1, 4\]"):
        _checks.check_int("groups", 5, 1, 5)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        _checks.check_positive_int("top_k", 0)
    assert _checks.check_seed(-5) == -5
    with pytest.raises(TypeError, match="seed must be an int"):
        _checks.check_seed(False)
    assert _checks.check_task_config(MODEL, None) == TaskConfig()
    task = TaskConfig(split_seed=3)
    assert _checks.check_task_config(MODEL, task) is task
    with pytest.raises(ValueError, match="V=4"):
        _checks.check_task_config(MODEL, TaskConfig(V=4))
    with pytest.raises(TypeError, match="TaskConfig"):
        _checks.check_task_config(MODEL, {"V": 5})


def test_the_modules_share_one_validator():
    """The private per-module helpers are gone; every module uses analysis._checks."""
    for module, names in (
        (ablation, ("_check_int", "_check_index_list", "_check_positions")),
        (memory, ("_check_head",)),
        (patching, ("_check_int", "_check_positions", "_seq_len")),
        (scores, ("_check_count",)),
        (verdict, ("_check_count",)),
        (ffn, ("_check_positive_int", "_check_neurons")),
    ):
        for name in names:
            assert not hasattr(module, name), (module.__name__, name)
    assert memory.check_layer is _checks.check_layer  # kept as a re-export
    assert ffn.check_layer is _checks.check_layer and ablation.check_layer is _checks.check_layer
    assert patching.check_positions is _checks.check_positions and ablation.check_positions is _checks.check_positions
    assert scores.check_int is _checks.check_int and verdict.check_int is _checks.check_int


def test_negative_layers_everywhere_on_a_two_layer_model():
    """layer=-1 means the last layer (1 here) in ablation, memory and ffn alike."""
    assert ablation.ablate_head(MODEL, -1, -1)[0][0] == "blocks.1.attn.hook_z"
    assert ablation.ablate_mlp(MODEL, -1)[0][0] == "blocks.1.hook_mlp_out"
    assert memory.ov_memory_probe(MODEL, 0, layer=-1).component == "L1H0"
    assert memory.mlp_memory_probe(MODEL, layer=-2).component == "L0MLP"
    assert ffn.mlp_prediction_flips(MODEL, attribution.check_batch(MODEL, None, n=20)).layer == 1


@pytest.mark.parametrize(
    "fn",
    [
        scores.attention_by_source,
        scores.head_scores,
        verdict.head_roles,
        ablation.ablation_table,
        ablation.ablate,
        ablation.ablate_head,
        ablation.ablate_mlp,
        ablation.binding_free_reference,
        ablation.resample_rows,
        patching.patching_pair,
        patching.generic_patch,
        patching.patch_head_outputs,
        patching.patch_head_sources,
        patching.patch_mlp,
        patching.patch_residual,
        patching.find_recall_head,
        patching.recall_patching,
    ],
)
def test_every_seed_argument_says_what_it_seeds(fn):
    """``seed`` means different things in different functions: each docstring must say which."""
    assert "seed" in inspect.signature(fn).parameters, fn.__name__
    doc = inspect.getdoc(fn) or ""
    assert any(phrase in doc for phrase in ("seeds", "seed of", "test-set seed", "resample seed")), fn.__name__
