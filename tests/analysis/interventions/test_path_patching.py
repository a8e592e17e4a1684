"""Path patching (Wang et al. 2022) with exact answers on the hand-built induction circuit, checked
against the IOI paper's two-run procedure on a LayerNorm model, and its validation."""

from __future__ import annotations

import pytest
import torch
from jaxtyping import install_import_hook

from perm_circuits import ModelConfig, TaskConfig, build_induction_model, build_model
from perm_circuits.hooks import hook_count
from perm_circuits.analysis.interventions.patching import logit_diff
from perm_circuits.hooks import run_capture
from perm_circuits.tasks.permutation_data import check_consistent, repeat_source_of

with install_import_hook("perm_circuits.analysis.interventions.path_patching", "beartype.beartype"):
    from perm_circuits.analysis.interventions import path_patching as pp

N = 300


@pytest.fixture(scope="module")
def model():
    return build_induction_model()


@pytest.fixture(scope="module")
def table(model):
    return pp.path_patching_table(model, n=N, n_boot=200)


def test_k_composition_edge_restores_everything_and_nothing_else_does(table):
    """Swap corruption: the clean run answers y_k with logit difference +10 (logit_scale), the
    corrupted run y_j, so -10.  L0H0's output differs only at the y slots after x_k and x_j (their
    previous tokens were swapped), and L1H0's *key* reads that output (PREV): patching the edge
    L0H0 -> L1H0.k alone puts the match back on y_k, restoring the clean run exactly (1.0).
    L1H0's query reads only the current token and the x-slot flag (TOK, IS_X) and its value only
    TOK, so the edges into q and v carry nothing: exactly 0.  L1H1 (the elimination head) reads only
    the positional IS_X flag with its query and key and TOK with its value: 0 on every input.
    L0H1 is zero, so nothing it sends differs: 0."""
    assert table.clean_logit_diff == pytest.approx(10.0, abs=1e-4)
    assert table.corrupted_logit_diff == pytest.approx(-10.0, abs=1e-4)
    assert len(table) == 2 * 2 * 3 and table.n == N
    k = table.get((0, 0), (1, 0), "k")
    assert k.mean == pytest.approx(1.0, abs=1e-6) and k.logit_diff == pytest.approx(10.0, abs=1e-4)
    assert 0.999 < k.ci_low <= k.ci_high < 1.001 and k.significant
    assert k.label == "L0H0->L1H0.k"
    for effect in table:
        if effect is not k:
            assert (effect.mean, effect.ci_low, effect.ci_high) == (0.0, 0.0, 0.0), effect.label
            assert not effect.significant
    assert float(table.per_sample[1].min()) == pytest.approx(1.0, abs=1e-5)  # every sequence, every k
    frame = table.to_dataframe()
    assert list(frame["receiver"][:6]) == ["L1H0"] * 3 + ["L1H1"] * 3
    assert list(frame["input"][:3]) == ["q", "k", "v"] and frame["significant"].sum() == 1
    assert table.get("L0H0", "L1H0", "k") is k
    with pytest.raises(KeyError, match="no edge L1H0->L0H0.q"):
        table.get((1, 0), (0, 0), "q")


def test_query_corruption_has_no_head_to_head_path(model):
    """Changing only the last query leaves every layer-0 output unchanged (no layer-0 head reads the
    last position's token from another position: L0H0 at the last position reads y4), so every
    head-to-head edge is exactly 0; the effect enters L1H0's query from the embedding."""
    table = pp.path_patching_table(model, n=N, n_boot=100, corruption="query")
    assert table.clean_logit_diff == pytest.approx(10.0, abs=1e-4)
    assert table.corrupted_logit_diff == pytest.approx(-10.0, abs=1e-4)
    assert all(effect.mean == 0.0 for effect in table)


def test_single_edge_and_hook_list(model):
    one = pp.path_patch(model, (0, 0), (-1, 0), "k", n=N, n_boot=100)
    assert len(one) == 1 and one.effects[0].receiver == "L1H0" and one.effects[0].mean == pytest.approx(1.0, abs=1e-6)
    clean, corrupted, answer, wrong = pp.induction_patching_pair(TaskConfig(), n=50, seed=4)
    _, c = run_capture(model, clean.tokens, ["blocks.0.attn.hook_z"])
    _, r = run_capture(model, corrupted.tokens, ["blocks.0.attn.hook_z"])
    delta = pp.sender_delta(model, (0, 0), c["blocks.0.attn.hook_z"], r["blocks.0.attn.hook_z"])
    assert delta.shape == (50, 9, model.cfg.d_model)
    hooks = pp.path_patch_hooks(model, (1, 0), "k", delta)
    assert [name for name, _ in hooks] == ["blocks.1.attn.hook_k"]
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        logits = model(corrupted.tokens)
    assert torch.allclose(logit_diff(logits, answer, wrong), torch.tensor(10.0), atol=1e-4)
    assert hook_count(model) == 0


def test_induction_pairs():
    config = TaskConfig(repeat_ratio=0.0, repeat_sources=(1,))  # the pair ignores both: every k, always repeated
    clean, corrupted, answer, wrong = pp.induction_patching_pair(config, n=400, seed=2)
    k, j = clean.extras["repeat_source"], corrupted.extras["repeat_source"]
    assert set(k.tolist()) == {0, 1, 2, 3} and bool((k != j).all()) and bool((j >= 0).all())
    check_consistent(corrupted.tokens)  # still a permutation's sequence
    assert torch.equal(repeat_source_of(corrupted.tokens), j)
    assert torch.equal(corrupted.tokens[:, -1], clean.tokens[:, -1])  # same last query
    assert torch.equal(corrupted.tokens[:, 1::2], clean.tokens[:, 1::2])  # same ys
    assert int((corrupted.tokens != clean.tokens).sum(dim=1).max()) == 2  # x_k and x_j swapped
    assert torch.equal(answer, clean.extras["ys"][:, -1]) and torch.equal(wrong, corrupted.extras["ys"][:, -1]) and bool((answer != wrong).all())
    rows = torch.arange(400)
    assert torch.equal(wrong, clean.extras["ys"][rows, j])
    again = pp.induction_patching_pair(config, n=400, seed=2)
    assert torch.equal(again[1].tokens, corrupted.tokens)

    _, query, _, wrong_q = pp.induction_patching_pair(config, n=400, seed=2, corruption="query")
    assert torch.equal(query.tokens[:, :-1], clean.tokens[:, :-1]) and torch.equal(wrong_q, wrong)
    _, unused, _, wrong_u = pp.induction_patching_pair(config, n=400, seed=2, corruption="unused")
    assert bool((repeat_source_of(unused.tokens) == -1).all()) and not bool(unused.extras["repeated"].any())
    assert bool((wrong_u != answer).all())


def test_layer_norm_edge_equals_the_two_run_procedure():
    """On a random LayerNorm model, the edge L0H1 -> L1H0.k equals Wang et al.'s procedure: run the
    corrupted input with L0H1's z clean and MLP0 frozen at its corrupted output, record L1H0's key
    (through the bridge's own ln1), then run the corrupted input with only that key replaced."""
    model = build_model(ModelConfig(d_model=32, n_heads=2, n_layers=2, seed=3))
    pair = pp.induction_patching_pair(TaskConfig(), n=64, seed=1)
    clean, corrupted, answer, wrong = pair
    result = pp.path_patch(model, (0, 1), (1, 0), "k", pair, n_boot=50).effects[0]
    names = ["blocks.0.attn.hook_z", "blocks.0.hook_mlp_out", "blocks.1.attn.hook_k"]
    _, c = run_capture(model, clean.tokens, names)
    _, r = run_capture(model, corrupted.tokens, names)

    def z_sender_clean(z, hook):
        z = z.clone()
        z[:, :, 1] = c["blocks.0.attn.hook_z"][:, :, 1]
        return z

    freeze_mlp = lambda out, hook: r["blocks.0.hook_mlp_out"]
    _, first = run_capture(
        model, corrupted.tokens, ["blocks.1.attn.hook_k"],
        [("blocks.0.attn.hook_z", z_sender_clean), ("blocks.0.hook_mlp_out", freeze_mlp)],
    )

    def set_key(k, hook):
        k = k.clone()
        k[:, :, 0] = first["blocks.1.attn.hook_k"][:, :, 0]
        return k

    with torch.no_grad(), model.hooks(fwd_hooks=[("blocks.1.attn.hook_k", set_key)]):
        reference = logit_diff(model(corrupted.tokens), answer, wrong).mean()
    assert not torch.allclose(first["blocks.1.attn.hook_k"], r["blocks.1.attn.hook_k"])  # the edge carries something
    assert result.logit_diff == pytest.approx(float(reference), abs=1e-5)
    assert hook_count(model) == 0


def test_validation_before_any_forward_and_no_leaks(model):
    calls = []
    spy = [("blocks.0.attn.hook_z", lambda z, hook: calls.append(1))]
    with pytest.raises(ValueError, match="sender layer must be < receiver layer.*L1H0 and receiver L1H1"):
        pp.path_patch(model, (1, 0), (1, 1), "k", hooks=spy)
    with pytest.raises(ValueError, match="input must be one of \\('q', 'k', 'v'\\)"):
        pp.path_patch(model, (0, 0), (1, 0), "o", hooks=spy)
    with pytest.raises(ValueError, match="head 2 out of range"):
        pp.path_patch(model, (0, 2), (1, 0), "q", hooks=spy)
    with pytest.raises(ValueError, match="layer 2 out of range"):
        pp.path_patch(model, (0, 0), (2, 0), "q", hooks=spy)
    with pytest.raises(TypeError, match="sender"):  # beartype or our own check, both name it
        pp.path_patch(model, 0, (1, 0), "q", hooks=spy)
    with pytest.raises(ValueError, match="corruption must be one of"):
        pp.path_patching_table(model, corruption="shuffle", hooks=spy)
    with pytest.raises(ValueError, match="inputs must be distinct entries"):
        pp.path_patching_table(model, inputs=("k", "k"), hooks=spy)
    with pytest.raises(ValueError, match="n_boot must be >= 10"):
        pp.path_patching_table(model, n_boot=5, hooks=spy)
    with pytest.raises(ValueError, match="needs V >= 3"):
        pp.induction_patching_pair(TaskConfig(V=2), n=10)
    assert calls == []
    one_layer = build_model(ModelConfig(d_model=16, n_heads=1))
    with pytest.raises(ValueError, match="needs n_layers >= 2"):
        pp.path_patching_table(one_layer)

    def boom(activation, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        pp.path_patch(model, (0, 0), (1, 0), "k", n=20, hooks=[("blocks.1.attn.hook_pattern", boom)])
    assert hook_count(model) == 0


def _bridge(**extra):
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_native(TransformerBridgeConfig(
        d_model=16, d_head=8, n_heads=2, n_layers=2, n_ctx=8, d_vocab=69, d_mlp=32, act_fn="relu",
        normalization_type="LN", positional_embedding_type="standard", seed=0, tokenizer_prepends_bos=False,
        model_name="gqa", **extra)).eval()


def test_grouped_query_attention_has_query_edges_only():
    """Heads sharing one key/value (n_key_value_heads=1) have no key or value edge of their own: a
    ValueError saying so (it was an IndexError from W_K[layer, head]); their query edges still patch."""
    from perm_circuits.tasks.factual import FactualRecallTask

    model = _bridge(n_key_value_heads=1)
    task = FactualRecallTask()
    pair = (task.test_set(20), task.test_set(20, seed=3))
    for call in (lambda: pp.path_patch(model, (0, 1), (1, 1), "k", pair, n_boot=10),
                 lambda: pp.path_patching_table(model, pair, n_boot=10)):
        with pytest.raises(ValueError, match=r"shares keys and values between heads \(n_key_value_heads=1, "
                                             r"n_heads=2\): no per-head .*k.* edge to patch"):
            call()
    table = pp.path_patching_table(model, pair, inputs=("q",), n_boot=10)
    assert [(e.sender, e.receiver, e.input) for e in table] == [
        (f"L0H{s}", f"L1H{r}", "q") for s in range(2) for r in range(2)]
    assert hook_count(model) == 0
