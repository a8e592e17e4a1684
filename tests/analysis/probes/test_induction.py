"""Previous-token, induction and duplicate-token scores on a hand-built 2-layer model with exact
answers, and the x1 shortcut of the shipped d32h2.

The hand-built model has no LayerNorm, one-hot token and position embeddings (token t -> dim t,
position p -> dim 6 + p, a constant 1 in dim 15) and no value/output weights, so every head's
pattern is known in closed form:

- L0H0 is a positional previous-token head: its score is ``A * s - 2A * [s == p]``, so the query at
  ``p >= 1`` attends to ``p - 1`` (margin ``A = 40`` over every other key: leak below ``e^-40``);
- every other head has zero Q/K weights: uniform causal attention (``1 / (p + 1)`` per key);
- the layer-1 heads' last-query rows are forced by a ``hook_pattern`` hook passed through
  ``hooks=``: L1H0 attends to ``y_k`` (a perfect induction head), L1H1 to ``x_k`` (a perfect
  duplicate-token head), on repeated sequences only.
"""

from __future__ import annotations

import math

import pytest
import torch
from jaxtyping import install_import_hook

from perm_circuits import ModelConfig, TaskConfig, build_model, make_test_set
from perm_circuits.hooks import hook_count

with install_import_hook("perm_circuits.analysis.probes.induction", "beartype.beartype"):
    from perm_circuits.analysis.probes import induction as induction_module

from perm_circuits.analysis import InductionScores, induction_scores, induction_test_set
from perm_circuits.tasks.permutation_data import repeat_source_of

V = 5
SEQ = 2 * V - 1
A = 40.0
D_HEAD = 16
UNIFORM_PREV = sum(1 / (p + 1) for p in range(1, SEQ)) / (SEQ - 1)  # mean over p >= 1 of 1/(p+1)


def two_layer_model():
    """L0H0 previous-token head; every other head uniform (zero Q/K); nothing writes the residual."""
    model = build_model(ModelConfig(d_model=32, n_heads=2, n_layers=2, d_head=D_HEAD, normalization_type=None))
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for t in range(V + 1):
        sd["embed.weight"][t, t] = 1.0
    for p in range(SEQ):
        sd["pos_embed.weight"][p, V + 1 + p] = 1.0
        sd["pos_embed.weight"][p, 3 * V] = 1.0
    s = math.sqrt(D_HEAD)
    for p in range(SEQ):  # q = [onehot(p), 1]; k = [-2A s onehot(p), A s p]: score A*s - 2A*[s == p]
        sd["blocks.0.attn.q.weight"][p, V + 1 + p] = 1.0
        sd["blocks.0.attn.k.weight"][p, V + 1 + p] = -2.0 * A * s
        sd["blocks.0.attn.k.weight"][SEQ, V + 1 + p] = A * p * s
    sd["blocks.0.attn.q.bias"][SEQ] = 1.0
    model.load_state_dict(sd)
    return model


def forcing_hooks(tokens: torch.Tensor):
    """Layer 1: on repeated sequences the last query of H0 attends to y_k, of H1 to x_k."""
    source = repeat_source_of(tokens)
    rows = torch.nonzero(source >= 0)[:, 0]

    def force(pattern, hook):
        pattern = pattern.clone()
        pattern[rows, :, -1, :] = 0.0
        pattern[rows, 0, -1, 2 * source[rows] + 1] = 1.0
        pattern[rows, 1, -1, 2 * source[rows]] = 1.0
        return pattern

    return [("blocks.1.attn.hook_pattern", force)]


@pytest.fixture(scope="module")
def model():
    return two_layer_model()


def test_previous_token_and_uniform_heads_exact(model):
    scores = induction_scores(model, n=400)
    assert isinstance(scores, InductionScores) and scores.n_samples == scores.n_repeated == 400
    assert sum(scores.repeated_by_source) == 400 and all(c > 0 for c in scores.repeated_by_source)
    prev = scores.get(0, 0)
    assert prev.component == "L0H0" and prev.previous_token > 0.99
    assert prev.previous_token == pytest.approx(1.0, abs=1e-6)
    # the last query (position 8) reads position 7 = y4: an "induction" hit for source k = 4 only
    assert prev.induction_by_source == pytest.approx((0.0, 0.0, 0.0, 1.0), abs=1e-6)
    assert prev.duplicate_by_source == pytest.approx((0.0, 0.0, 0.0, 0.0), abs=1e-6)
    assert prev.induction == pytest.approx(scores.repeated_by_source[3] / 400, abs=1e-6)
    for layer, head in [(0, 1), (1, 0), (1, 1)]:
        uniform = scores.get(layer, head)
        assert uniform.previous_token == pytest.approx(UNIFORM_PREV, abs=1e-6)
        assert uniform.induction == pytest.approx(1 / SEQ, abs=1e-6)
        assert uniform.duplicate_token == pytest.approx(1 / SEQ, abs=1e-6)
        assert uniform.induction_by_source == pytest.approx((1 / SEQ,) * (V - 1), abs=1e-6)
    assert UNIFORM_PREV == pytest.approx(0.228621, abs=1e-6)  # (H_9 - 1) / 8


def test_forced_induction_and_duplicate_heads_exact_and_non_repeated_ignored(model):
    batch = make_test_set(TaskConfig(repeat_ratio=0.5, repeat_sources=(1, 2, 3, 4)), n=400, seed=7)
    n_rep = int(batch.extras["repeated"].sum())
    assert 0 < n_rep < 400
    scores = induction_scores(model, batch, hooks=forcing_hooks(batch.tokens))
    assert hook_count(model) == 0
    assert scores.n_samples == 400 and scores.n_repeated == n_rep
    induction, duplicate = scores.get(1, 0), scores.get(1, 1)
    assert induction.induction == pytest.approx(1.0, abs=1e-6)
    assert induction.induction_by_source == pytest.approx((1.0,) * 4, abs=1e-6)
    assert induction.duplicate_token == pytest.approx(0.0, abs=1e-6)
    assert duplicate.duplicate_token == pytest.approx(1.0, abs=1e-6)
    assert duplicate.duplicate_by_source == pytest.approx((1.0,) * 4, abs=1e-6)
    assert duplicate.induction == pytest.approx(0.0, abs=1e-6)
    # previous-token over all samples: rows 1..7 uniform; row 8 reads 7 only for induction with k = 4
    k4 = int((batch.extras["repeat_source"] == 3).sum())
    not_repeated = 400 - n_rep
    head_sum = sum(1 / (p + 1) for p in range(1, SEQ - 1))
    assert induction.previous_token == pytest.approx((head_sum + (k4 + not_repeated / SEQ) / 400) / (SEQ - 1), abs=1e-6)
    # the layer-0 scores do not move: the forced pattern of layer 1 is downstream
    assert scores.get(0, 0).previous_token == pytest.approx(1.0, abs=1e-6)


def test_dataframe_and_lookup(model):
    scores = induction_scores(model, n=200)
    frame = scores.to_dataframe()
    assert list(frame["component"]) == ["L0H0", "L0H1", "L1H0", "L1H1"]
    assert list(frame.columns[-8:]) == [f"induction_x{k}" for k in range(1, 5)] + [f"duplicate_x{k}" for k in range(1, 5)]
    assert frame.loc[0, "induction_x4"] == pytest.approx(1.0, abs=1e-6)
    assert scores.get(1, 1).component == "L1H1" and [s.component for s in scores][-1] == "L1H1"
    with pytest.raises(KeyError, match="no head L2H0"):
        scores.get(2, 0)


def test_sources_missing_from_the_test_set_are_nan(model):
    batch = make_test_set(TaskConfig(repeat_ratio=1.0, repeat_sources=(2,)), n=50)
    scores = induction_scores(model, batch)
    assert scores.repeated_by_source == (0, 50, 0, 0)
    values = scores.get(0, 1).induction_by_source
    assert math.isnan(values[0]) and math.isnan(values[2]) and values[1] == pytest.approx(1 / SEQ, abs=1e-6)


def test_validation_before_any_forward_and_no_leaks(model):
    calls = []

    def spy(activation, hook):
        calls.append(1)

    spy_hooks = [("blocks.0.attn.hook_pattern", spy)]
    no_repeats = make_test_set(TaskConfig(repeat_ratio=0.0), n=20)
    with pytest.raises(ValueError, match="no repeated samples"):
        induction_scores(model, no_repeats, hooks=spy_hooks)
    with pytest.raises(ValueError, match="V=4 but the model has V=5"):
        induction_scores(model, induction_test_set(4, n=20), hooks=spy_hooks)
    with pytest.raises(ValueError, match="sequence length must be 2V-1 = 9"):
        induction_scores(model, torch.ones(3, 7, dtype=torch.long), hooks=spy_hooks)
    with pytest.raises(TypeError, match="test_set"):  # beartype or our own check, both name it
        induction_scores(model, [[1, 2, 3]], hooks=spy_hooks)
    with pytest.raises(ValueError, match="n must be >= 1"):
        induction_scores(model, n=0, hooks=spy_hooks)
    with pytest.raises(ValueError, match="unknown hook point"):
        induction_scores(model, hooks=[("blocks.9.attn.hook_pattern", spy)])
    assert calls == []

    def boom(activation, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        induction_scores(model, n=20, hooks=[("blocks.1.attn.hook_pattern", boom)])
    assert hook_count(model) == 0


def test_default_test_set_repeats_every_source():
    batch = induction_test_set(V, n=300, seed=3)
    assert bool(batch.extras["repeated"].all()) and set(batch.extras["repeat_source"].tolist()) == {0, 1, 2, 3}
    assert torch.equal(repeat_source_of(batch.tokens), batch.extras["repeat_source"])
    assert induction_module.induction_test_set(V, n=300, seed=3).tokens.equal(batch.tokens)


def test_d32h2_duplicate_head_only_matches_x1(pretrained):
    """Shipped d32h2 (seed 0; default test set n=2000, seed=1234): L0H0 is a duplicate-token head
    for x1 only (x5 -> x1 with weight 0.66 when repeated, 0.11-0.18 on x2..x4); neither head is an
    induction head (no head attends to y_k for every k) and neither is a previous-token head."""
    model = pretrained("d32h2")
    scores = induction_scores(model)
    assert scores.n_repeated == 2000 and scores.repeated_by_source == (531, 473, 487, 509)
    dup = scores.get(0, 0)
    assert dup.duplicate_by_source == pytest.approx((0.6591, 0.1825, 0.1289, 0.1136), abs=2e-3)
    assert dup.duplicate_by_source[0] > 0.6 and max(dup.duplicate_by_source[1:]) < 0.2
    assert dup.duplicate_token == pytest.approx(0.2785, abs=2e-3)
    assert dup.induction_by_source == pytest.approx((0.0055, 0.0072, 0.0078, 0.0082), abs=2e-3)
    other = scores.get(0, 1)
    assert other.induction_by_source == pytest.approx((0.1886, 0.2394, 0.2452, 0.2484), abs=2e-3)
    assert other.duplicate_token == pytest.approx(0.0123, abs=2e-3)
    assert dup.previous_token == pytest.approx(0.0966, abs=2e-3)
    assert other.previous_token == pytest.approx(0.3214, abs=2e-3)
    assert hook_count(model) == 0
