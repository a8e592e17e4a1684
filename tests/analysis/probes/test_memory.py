"""Memory-recall probes (Bietti et al. 2023): exact answers on hand-built matrices and models."""

from __future__ import annotations

import pytest
import torch
from jaxtyping import TypeCheckError, install_import_hook

with install_import_hook(
    ["perm_circuits.analysis.probes.memory", "perm_circuits.analysis.probes.dla", "perm_circuits.analysis.study.ffn"],
    "beartype.beartype",
):
    from perm_circuits.analysis.probes import memory as memory

from perm_circuits import ModelConfig, TaskConfig, TrainConfig, build_model, train

# ----------------------------------------------------------------------------- generic probe


def test_identity_memory_recalls_everything():
    u = torch.eye(6)
    assert memory.memory_recall(torch.eye(6), u, u, memory.identity_map(6)) == 1.0


def test_random_embeddings_identity_memory():
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(10, 64, generator=gen)
    v = torch.randn(10, 32, generator=gen)
    W = torch.linalg.pinv(u) @ torch.linalg.pinv(v).T  # u W v^T = I
    assert memory.memory_recall(W, u, v, memory.identity_map(10)) == 1.0


def test_partial_permutation_recall_is_fraction_of_correct_rows():
    perm = [3, 0, 4, 1, 2, 5, 7, 6]
    targets = [(i, j) for i, j in enumerate(perm)]
    W = torch.zeros(8, 8)
    stored = [0, 2, 3, 6, 7]  # rows that store their target
    for i in stored:
        W[i, perm[i]] = 1.0
    W[1, 5] = 1.0  # a wrong association: row 1 -> 5 instead of 0
    # rows 4, 5 are empty: all candidates tie, which counts as not recalled
    assert memory.memory_recall(W, torch.eye(8), torch.eye(8), targets) == pytest.approx(5 / 8)


def test_argmin_variant_on_negated_identity():
    u = torch.eye(5)
    assert memory.memory_recall(-torch.eye(5), u, u, memory.identity_map(5), mode="argmin") == 1.0
    assert memory.memory_recall(-torch.eye(5), u, u, memory.identity_map(5), mode="argmax") == 0.0
    assert memory.memory_recall(torch.eye(5), u, u, memory.identity_map(5), mode="argmin") == 0.0


def test_ties_count_as_failures_and_allowed_mask():
    scores = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 5.0]])
    assert memory.recall_rate(scores, [(0, 0), (1, 1)]) == 0.0
    allowed = torch.tensor([[True, False, True], [True, True, False]])
    assert memory.recall_rate(scores, [(0, 0), (1, 1)], allowed=allowed) == 1.0
    with pytest.raises(ValueError, match="masked out"):
        memory.recall_rate(scores, [(0, 1)], allowed=allowed)


def _raises(error, match, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` raises exactly ``error`` (not a subclass) with ``match`` in its message."""
    with pytest.raises(error, match=match) as info:
        fn(*args, **kwargs)
    assert type(info.value) is error
    return info.value


def test_generic_validation():
    u = torch.eye(4)
    # shape mismatches between the annotated dims (d_in, d_out) are caught by the runtime type check
    # (conftest's jaxtyping import hook), before the package's own shape check
    _raises(TypeCheckError, "parameter 'inputs'", memory.memory_recall, torch.eye(3), u, u, memory.identity_map(3))
    _raises(TypeCheckError, "parameter 'outputs'", memory.memory_recall, torch.eye(4), u, torch.eye(3),
            memory.identity_map(4))
    _raises(ValueError, r"targets has output index 4 outside \[0, 3\]", memory.memory_recall, torch.eye(4), u, u,
            [(0, 4)])
    _raises(ValueError, r"mode must be one of \('argmax', 'argmin'\), got 'max'", memory.memory_recall,
            torch.eye(4), u, u, memory.identity_map(4), mode="max")
    _raises(ValueError, "targets is empty: the target map M needs at least one", memory.memory_recall,
            torch.eye(4), u, u, [])
    _raises(TypeCheckError, "parameter 'targets'", memory.recall_rate, torch.eye(4), torch.ones(4, 2))  # float
    # a bool passes the ``tuple[int, int]`` annotation and reaches the package's own check
    _raises(TypeError, r"targets\[0\] must be an \(input, output\) pair of ints, got \(0, True\)",
            memory.recall_rate, torch.eye(4), [(0, True)])
    _raises(ValueError, "scores has non-finite values", memory.recall_rate, torch.full((2, 2), float("nan")),
            [(0, 0)])
    _raises(ValueError, "n must be >= 1, got 0", memory.identity_map, 0)


# ----------------------------------------------------------------------------- hand-built models


def _hand_model(config: ModelConfig, edit) -> object:
    model = build_model(config)
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for key in sd:
        if key.endswith("ln1.weight") or key.endswith("ln2.weight") or key == "ln_final.weight":
            sd[key] = torch.ones_like(sd[key])
    edit(sd)
    model.load_state_dict(sd)
    return model


def _one_hot_tokens(sd, d):
    sd["embed.weight"] = torch.eye(6, d)
    sd["unembed.weight"] = torch.eye(6, d)  # W_U[:, t] = e_t


def test_copying_head_ov_probe():
    def edit(sd):
        _one_hot_tokens(sd, 8)
        sd["blocks.0.attn.v.weight"] = torch.eye(8)
        sd["blocks.0.attn.o.weight"] = torch.eye(8)

    model = _hand_model(ModelConfig(d_model=8, n_heads=1), edit)
    copy = memory.ov_memory_probe(model, 0)
    assert (copy.component, copy.circuit, copy.map, copy.recall, copy.n_pairs) == ("L0H0", "OV", "copy", 1.0, 5)
    assert memory.ov_memory_probe(model, 0, position=1).recall == 1.0
    assert memory.ov_memory_probe(model, 0, mode="argmin").recall == 0.0
    scores = memory.ov_scores(model, 0)
    assert torch.equal(scores.argmax(-1), torch.arange(5))


def test_ov_probe_of_a_bridge_with_fewer_outputs_than_inputs_asks_for_targets():
    """16 input tokens, 8 output classes (perm_chain's shape): no t -> t default, and the error says why."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(TransformerBridgeConfig(
        d_model=8, d_head=4, n_heads=2, n_layers=1, n_ctx=20, d_vocab=16, d_vocab_out=8, d_mlp=16, act_fn="relu",
        normalization_type="LN", positional_embedding_type="standard", seed=0, tokenizer_prepends_bos=False,
        model_name="chain")).eval()
    with pytest.raises(ValueError, match=r"the default target t -> t needs as many input tokens as outputs, got 16 "
                                         r"inputs and 8 outputs .*: pass targets="):
        memory.ov_memory_probe(model, 1)
    scores = memory.ov_scores(model, 1)
    probe = memory.ov_memory_probe(model, 1, targets=[(8 + s, s) for s in range(8)])  # state token -> its class
    assert probe.map == "custom" and probe.n_pairs == 8
    assert probe.recall == float((scores[8:].argmax(-1) == torch.arange(8)).float().mean())


def test_suppressing_head_ov_probe():
    def edit(sd):
        _one_hot_tokens(sd, 8)
        sd["blocks.0.attn.v.weight"] = torch.eye(8)
        sd["blocks.0.attn.o.weight"] = -torch.eye(8)

    model = _hand_model(ModelConfig(d_model=8, n_heads=1), edit)
    assert memory.ov_memory_probe(model, 0, mode="argmin").recall == 1.0
    assert memory.ov_memory_probe(model, 0, mode="argmax").recall == 0.0


def _qk_model(shift: int):
    """d=16: tokens in dims 0..5, positions one-hot in dims 6..14; QK maps query position q to key
    position q - shift; the token dims do not enter QK."""

    def edit(sd):
        _one_hot_tokens(sd, 16)
        pos = torch.zeros(9, 16)
        pos[torch.arange(9), 6 + torch.arange(9)] = 1.0  # position p -> dim 6 + p
        sd["pos_embed.weight"] = pos
        W_Q = torch.zeros(16, 16)  # row convention [d_model, d_head]
        for q in range(shift, 9):
            W_Q[6 + q, 6 + q - shift] = 1.0
        W_K = torch.zeros(16, 16)
        W_K[6:15, 6:15] = torch.eye(9)
        sd["blocks.0.attn.q.weight"] = W_Q.T.contiguous()
        sd["blocks.0.attn.k.weight"] = W_K.T.contiguous()

    return _hand_model(ModelConfig(d_model=16, n_heads=1), edit)


def test_qk_positional_maps():
    prev = _qk_model(shift=1)
    assert memory.qk_memory_probe(prev, 0, "prev_y").recall == 1.0
    assert memory.qk_memory_probe(prev, 0, "self_y").recall == 0.0
    assert memory.qk_memory_probe(prev, 0, "last_to_y1").recall == 0.0
    assert memory.qk_memory_probe(prev, 0, "x_match").recall == 0.0  # all keys tie
    self_model = _qk_model(shift=0)
    assert memory.qk_memory_probe(self_model, 0, "self_y").recall == 1.0
    assert memory.qk_memory_probe(self_model, 0, "prev_y").recall == 0.0


def test_qk_token_match():
    def edit(sd):
        _one_hot_tokens(sd, 8)
        sd["blocks.0.attn.q.weight"] = torch.eye(8)
        sd["blocks.0.attn.k.weight"] = torch.eye(8)

    model = _hand_model(ModelConfig(d_model=8, n_heads=1), edit)
    probe = memory.qk_memory_probe(model, 0, "x_match")
    assert (probe.recall, probe.n_pairs, probe.chance) == (1.0, 5, 0.2)


def test_mlp_map_probe():
    def edit(sd, sign):
        _one_hot_tokens(sd, 8)
        W_in = torch.zeros(8, 16)  # neuron j reads token j + 1
        W_in[torch.arange(1, 6), torch.arange(5)] = 1.0
        sd["blocks.0.mlp.in.weight"] = W_in.T.contiguous()
        W_out = torch.zeros(16, 8)  # neuron j writes token j + 1
        W_out[torch.arange(5), torch.arange(1, 6)] = sign
        sd["blocks.0.mlp.out.weight"] = W_out.T.contiguous()

    copy = _hand_model(ModelConfig(d_model=8, n_heads=1), lambda sd: edit(sd, 1.0))
    assert memory.mlp_memory_probe(copy).recall == 1.0
    assert memory.mlp_memory_probe(copy, mode="argmin").recall == 0.0
    suppress = _hand_model(ModelConfig(d_model=8, n_heads=1), lambda sd: edit(sd, -1.0))
    assert memory.mlp_memory_probe(suppress, mode="argmin").recall == 1.0
    # custom inputs and target map: token 2's embedding should retrieve value index 1
    inputs = copy.W_E.detach()[[2, 3]]
    assert memory.mlp_memory_probe(copy, inputs=inputs, targets=[(0, 1), (1, 2)]).recall == 1.0


def _strict_recall(scores, mode="argmax"):
    """R of the identity map computed by hand: row t recalls t when its score is the strict extreme."""
    signed = scores if mode == "argmax" else -scores
    hits = 0
    for t, row in enumerate(signed.tolist()):
        hits += all(row[t] > other for j, other in enumerate(row) if j != t)
    return hits / len(signed)


# measured on the seeded, untrained d32h2 (build_model("d32h2"))
D32H2_PROBES = [
    ("L0H0", "OV", "copy", 0.4), ("L0H0", "OV", "suppress", 0.0), ("L0H0", "QK", "x_match", 0.2),
    ("L0H0", "QK", "prev_y", 0.25), ("L0H0", "QK", "self_y", 0.25), ("L0H0", "QK", "last_to_y1", 0.0),
    ("L0H1", "OV", "copy", 0.4), ("L0H1", "OV", "suppress", 0.0), ("L0H1", "QK", "x_match", 0.2),
    ("L0H1", "QK", "prev_y", 0.0), ("L0H1", "QK", "self_y", 0.0), ("L0H1", "QK", "last_to_y1", 0.0),
    ("L0MLP", "MLP", "copy", 0.6), ("L0MLP", "MLP", "suppress", 0.0),
]


def test_model_probes_table_and_validation():
    model = build_model("d32h2")
    probes = memory.model_memory_probes(model)
    frame = probes.to_dataframe()
    assert list(zip(frame["component"], frame["circuit"], frame["map"], frame["recall"])) == D32H2_PROBES
    assert frame["mode"].tolist() == ["argmax", "argmin"] + ["argmax"] * 4 + ["argmax", "argmin"] + ["argmax"] * 4 + [
        "argmax", "argmin"]
    assert frame["n_pairs"].tolist() == [5, 5, 5, 4, 4, 5] * 2 + [5, 5]
    assert probes.get("L0H0", "prev_y") == 0.25 and probes.get("L0MLP", "copy") == 0.6
    # the OV and MLP rows recomputed from the raw score matrices (argmax / argmin, ties = miss)
    for head in (0, 1):
        scores = memory.ov_scores(model, head)
        assert probes.get(f"L0H{head}", "copy") == _strict_recall(scores) == 0.4
        assert probes.get(f"L0H{head}", "suppress") == _strict_recall(scores, "argmin") == 0.0
    mlp = memory.mlp_scores(model, model.W_E.detach()[1:6])
    assert probes.get("L0MLP", "copy") == _strict_recall(mlp) == 0.6
    with pytest.raises(KeyError, match="no probe 'copy' for 'L0H2'"):
        probes.get("L0H2", "copy")
    _raises(ValueError, r"head 2 out of range: head must be in \[-2, 1\]", memory.ov_memory_probe, model, 2)
    _raises(ValueError, r"layer 1 out of range: layer must be in \[-1, 0\]", memory.qk_memory_probe, model, 0,
            layer=1)
    _raises(ValueError, r"target_map must be one of \('x_match', .*\), got 'induction'", memory.qk_memory_probe,
            model, 0, "induction")
    _raises(ValueError, r"position 9 out of range: position must be in \[-9, 8\] \(W_pos has 9 positions\)",
            memory.ov_memory_probe, model, 0, position=9)
    _raises(ValueError, r"inputs must be \[n, d_model=32\], got \(3, 16\)", memory.mlp_memory_probe, model,
            inputs=torch.zeros(3, 16))
    _raises(TypeError, "head must be an int, got bool True", memory.ov_memory_probe, model, True)


def test_tracker_records_probes_every_epoch():
    tracker = memory.memory_probe_tracker()
    every_other = memory.memory_probe_tracker(every=2)
    assert every_other.to_dataframe().empty  # nothing recorded before training
    result = train(
        "d16h1",
        TaskConfig(repeat_ratio=0.3),
        TrainConfig(epochs=2, samples_per_epoch=256, batch_size=128, test_size=100),
        callbacks=[tracker, every_other],
        progress=False,
    )
    frame = tracker.to_dataframe()
    assert frame["epoch"].tolist() == [1] * 8 + [2] * 8
    assert len(frame) == 2 * (2 + len(memory.QK_MAPS) + 2)
    final = memory.model_memory_probes(result.model).to_dataframe()
    assert frame[frame["epoch"] == 2]["recall"].tolist() == final["recall"].tolist()
    # every=2: only epoch 2 is recorded, with the same probes as the every-epoch tracker's epoch 2
    sparse = every_other.to_dataframe()
    assert sparse["epoch"].tolist() == [2] * 8
    assert sparse.reset_index(drop=True).equals(frame[frame["epoch"] == 2].reset_index(drop=True))
    _raises(ValueError, "every must be >= 1, got 0", memory.memory_probe_tracker, every=0)


def test_apply_norm_matches_the_forward_pass():
    """The probes' LayerNorms are the model's: compare with the cached ln1/ln2/ln_final outputs."""
    from perm_circuits import make_test_set
    from perm_circuits.analysis.probes.dla import run_cache

    model = build_model("d32h2", seed=1)
    sd = model.state_dict()
    gen = torch.Generator().manual_seed(0)
    for key in ("blocks.0.ln1.weight", "blocks.0.ln2.bias", "ln_final.weight", "ln_final.bias"):
        sd[key] = sd[key] + 0.5 * torch.randn(sd[key].shape, generator=gen)
    model.load_state_dict(sd)
    names = ["blocks.0.hook_resid_pre", "blocks.0.ln1.hook_out", "blocks.0.hook_resid_mid", "blocks.0.ln2.hook_out",
             "blocks.0.hook_resid_post", "ln_final.hook_out"]
    _, acts, _ = run_cache(model, make_test_set(TaskConfig(), n=50).tokens, names)
    for source, target, norm in [(0, 1, "blocks.0.ln1"), (2, 3, "blocks.0.ln2"), (4, 5, "ln_final")]:
        torch.testing.assert_close(memory.apply_norm(model, acts[names[source]], norm), acts[names[target]])


def test_negative_indices_count_from_the_end():
    """One index rule for the package: layer=-1 is the last layer, head=-1 the last head, position=-1
    the last row of W_pos; labels show the normalised indices."""
    model = build_model("d32h2")
    last = memory.ov_memory_probe(model, -1, layer=-1, position=-1)
    assert last.component == "L0H1"
    assert last == memory.ov_memory_probe(model, 1, layer=0, position=8)
    assert torch.equal(memory.ov_scores(model, -2, layer=-1), memory.ov_scores(model, 0))
    assert memory.qk_memory_probe(model, -1, "prev_y", layer=-1) == memory.qk_memory_probe(model, 1, "prev_y")
    assert memory.mlp_memory_probe(model, layer=-1, position=-9) == memory.mlp_memory_probe(model, position=0)
    probes = memory.model_memory_probes(model, layer=-1).to_dataframe()
    assert probes.equals(memory.model_memory_probes(model).to_dataframe())
    with pytest.raises(ValueError, match="layer -2 out of range"):
        memory.ov_memory_probe(model, 0, layer=-2)
    with pytest.raises(ValueError, match="head -3 out of range"):
        memory.ov_memory_probe(model, -3)
    with pytest.raises(ValueError, match="position -10 out of range"):
        memory.mlp_memory_probe(model, position=-10)
    assert memory.memory_probe_tracker(layer=-1, position=-1).layer == -1
    _raises(TypeCheckError, "parameter 'layer'", memory.memory_probe_tracker, layer=0.0)  # a float is no int
    _raises(TypeError, "layer must be an int, got bool True", memory.memory_probe_tracker, layer=True)
