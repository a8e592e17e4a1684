"""FFN key-value probing (Geva et al. 2021) and MLP prediction flips, on hand-built models."""

from __future__ import annotations

import pytest
import torch
from jaxtyping import TypeCheckError, install_import_hook

with install_import_hook(
    ["perm_circuits.analysis.probes.memory", "perm_circuits.analysis.probes.dla", "perm_circuits.analysis.study.ffn"],
    "beartype.beartype",
):
    from perm_circuits.analysis.study import ffn as ffn

from perm_circuits import ModelConfig, TaskConfig, build_model
from perm_circuits.hooks import hook_count
from perm_circuits.tasks.permutation_data import check_consistent, make_batch, split_permutations

TASK = TaskConfig(repeat_ratio=0.3)
D = 16
IS_X, POS0, DET, POS8 = 6, 7, 8, 9  # residual dims: tokens 0..5, then these flags
Q = 3  # the token neuron 0 fires on (at the last query)


def _written_token() -> tuple[int, float]:
    """The most frequent y of Q among the test permutations, and its frequency."""
    _, test = split_permutations(TASK)
    values, counts = test[:, Q - 1].unique(return_counts=True)
    return int(values[counts.argmax()]), float(counts.max()) / len(test)


def _hand_model(normalization: str | None, with_detector: bool = True):
    """Neuron 0: fires on query token Q at the last position, writes token W (x10).
    Neuron 1 (normalization None only): fires on a *repeated* last query, via a head that attends
    from the last query to an earlier x with the same token and copies its "position 0" flag;
    writes token 2.  Neurons 2..7: dead."""
    W, _ = _written_token()
    model = build_model(ModelConfig(d_model=D, n_heads=1, d_mlp=8, normalization_type=normalization))
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for key in sd:
        if key.endswith("ln1.weight") or key.endswith("ln2.weight") or key == "ln_final.weight":
            sd[key] = torch.ones_like(sd[key])
    sd["embed.weight"] = torch.eye(6, D)
    sd["unembed.weight"] = torch.eye(6, D)
    pos = torch.zeros(9, D)
    pos[8, POS8] = 1.0
    W_in, b_in, W_out = torch.zeros(D, 8), torch.zeros(8), torch.zeros(8, D)  # row convention
    W_in[Q, 0] = W_in[POS8, 0] = 1.0
    W_out[0, W] = 10.0
    if normalization is None:
        b_in[0] = -1.5
    else:
        b_in[0] = -4.5  # LN: 5.3 when both match, <= 3.6 otherwise
    if with_detector:
        assert normalization is None
        pos[0::2, IS_X] = 1.0
        pos[0, POS0] = 1.0
        beta = 200.0
        W_Q = torch.zeros(D, D)
        W_Q[:6, :6] = beta * torch.eye(6)
        b_Q = torch.zeros(D)
        b_Q[IS_X] = beta  # score: beta * ([same token] + [key is an x])
        W_K = torch.zeros(D, D)
        W_K[:7, :7] = torch.eye(7)
        W_V = torch.zeros(D, D)
        W_V[POS0, POS0] = 1.0
        W_O = torch.zeros(D, D)
        W_O[POS0, DET] = 1.0  # 0.5 at a repeated last query (attends x1 and itself), else 0
        sd["blocks.0.attn.q.weight"], sd["blocks.0.attn.q.bias"] = W_Q.T.contiguous(), b_Q
        sd["blocks.0.attn.k.weight"] = W_K.T.contiguous()
        sd["blocks.0.attn.v.weight"] = W_V.T.contiguous()
        sd["blocks.0.attn.o.weight"] = W_O.T.contiguous()
        W_in[DET, 1], W_in[POS0, 1], b_in[1] = 2.0, -10.0, -0.5
        W_out[1, 2] = 1.0
    sd["pos_embed.weight"] = pos
    sd["blocks.0.mlp.in.weight"], sd["blocks.0.mlp.in.bias"] = W_in.T.contiguous(), b_in
    sd["blocks.0.mlp.out.weight"] = W_out.T.contiguous()
    model.load_state_dict(sd)
    model.task_config = TASK
    return model


@pytest.fixture(scope="module")
def hand():
    return _hand_model(None)


# ----------------------------------------------------------------------------- enumeration


def test_enumeration_is_complete():
    batch = ffn.enumerate_sequences(TASK)
    _, test = split_permutations(TASK)
    assert len(batch) == len(test) * 120 * 2 == 5760
    check_consistent(batch.tokens)
    assert len(torch.unique(batch.tokens, dim=0)) == 5760
    assert int(batch.extras["repeated"].sum()) == 2880
    assert torch.equal(batch.extras["xs"][batch.extras["repeated"], -1], batch.extras["xs"][batch.extras["repeated"], 0])
    assert torch.equal(batch.extras["ys"], batch.extras["perms"].gather(1, batch.extras["xs"] - 1))
    assert len(ffn.enumerate_sequences(TASK, repeat_sources=())) == 2880
    assert len(ffn.enumerate_sequences(TASK, split="all", repeat_sources=(0, 3))) == 120 * 120 * 3


def test_triggers_deduplicate_prefixes():
    batch = ffn.enumerate_sequences(TASK)
    triggers, rows, steps = ffn.x_position_triggers(batch)
    per_step = torch.bincount(triggers.step, minlength=6)[1:]
    assert per_step[0] == 5 and per_step[-1] == 5760
    assert torch.equal(torch.zeros(5).index_add_(0, triggers.step - 1, triggers.count.float()), torch.full((5,), 5760.0))
    torch.testing.assert_close(triggers.target_probs.sum(-1), torch.ones(len(triggers)))
    last = triggers.step == 5
    assert ((triggers.target_probs[last] == 0) | (triggers.target_probs[last] == 1)).all()
    assert torch.equal(triggers.target[last], batch.extras["ys"][rows[last], 4])
    assert (triggers.elimination[last] > 0).all() and (triggers.elimination[~last] == -1).all()
    assert torch.equal(triggers.repeated, last & batch.extras["repeated"][rows])
    # step 1: nothing used, the answer is uniform over the 24 test permutations' y of x1
    assert not triggers.used[triggers.step == 1].any()
    frame = triggers.to_dataframe([0, len(triggers) - 1])
    assert list(frame["position"]) == [0, 8]


def test_enumeration_validation():
    with pytest.raises(ValueError, match="repeat source 4"):
        ffn.enumerate_sequences(TASK, repeat_sources=(4,))
    with pytest.raises(ValueError, match="duplicates"):
        ffn.enumerate_sequences(TASK, repeat_sources=(0, 0))
    with pytest.raises(ValueError, match="split"):
        ffn.enumerate_sequences(TASK, split="val")
    with pytest.raises(TypeCheckError, match="parameter 'repeat_sources'"):  # an int is no Sequence[int]
        ffn.enumerate_sequences(TASK, repeat_sources=0)


def test_enumeration_refuses_a_task_too_large_to_enumerate():
    """V = 7's test split is 1008 x 7! x 2 sequences: refused before anything is built (the report of a
    V = 8 model asked for 20 GB here and was killed for memory); V = 6's largest enumeration fits."""
    from perm_circuits import TaskConfig

    with pytest.raises(ValueError, match=r"V=7 gives 10,160,640 sequences \(1008 permutations x 7! query orders x 2 variants\)"):
        ffn.enumerate_sequences(TaskConfig(V=7))
    with pytest.raises(ValueError, match=r"V=8 gives"):
        ffn.enumerate_sequences(TaskConfig(V=8), split="train", repeat_sources=())
    assert 720 * 720 * 5 <= ffn.MAX_ENUMERATED  # V = 6, split "all", every repeat source
    assert len(ffn.enumerate_sequences(TaskConfig(V=6), repeat_sources=())) == 144 * 720


# ----------------------------------------------------------------------------- key-value probe


@pytest.mark.parametrize("normalization", [None, "LN"])
def test_token_neuron_agreement_is_exact(normalization):
    model = _hand_model(normalization, with_detector=normalization is None)
    W, frequency = _written_token()
    probe = ffn.ffn_key_value_probe(model, top_k=100_000)
    n0 = probe.neurons[0]
    # fires on every last-step prefix whose query is Q: 24 x-orders x 24 test perms, plain and repeated
    assert n0.live and n0.n_triggers == 2 * 24 * 24
    assert (n0.value_top, n0.top_position, n0.top_query) == (W, 8, Q)
    assert n0.top_position_share == n0.top_query_share == 1.0
    # the correct y of a query Q is perm(Q): agreement = share of test perms with perm(Q) = W
    assert n0.agreement == pytest.approx(frequency)
    assert n0.repeated_share == pytest.approx(0.5) and not n0.fires_on_repeated
    assert n0.recall_agreement == pytest.approx(frequency)
    assert max(n0.value_probs) == n0.value_probs[W - 1]
    assert [n.live for n in probe.neurons[2:]] == [False] * 6
    assert probe.fraction_above_chance == (1.0 if normalization else 0.5)


def test_repeat_neuron(hand):
    probe = ffn.ffn_key_value_probe(hand, top_k=100_000)
    n1 = probe.neurons[1]
    assert n1.live and n1.n_triggers == 2880  # every repeated last query, nothing else
    assert n1.repeated_share == 1.0 and n1.fires_on_repeated
    assert n1.repeated_selectivity == pytest.approx(1.0, abs=1e-3)
    assert n1.value_top == 2
    # y1 (the recall answer) is uniform over the enumeration, and so is the elimination trap
    assert n1.recall_agreement == pytest.approx(0.2) and n1.trap_agreement == pytest.approx(0.2)
    assert n1.agreement == pytest.approx(0.2)
    assert probe.repeated_neurons == (1,)
    summary = probe.summary()
    assert summary["n_live"] == 2.0 and summary["n_repeated_neurons"] == 1.0
    frame = probe.to_dataframe()
    assert frame.shape[0] == 8 and frame.loc[1, "fires_on_repeated"]
    top = probe.triggers_dataframe(1)
    assert top["repeated"].all() and (top["position"] == 8).all()


def test_top_k_and_neuron_subset(hand):
    probe = ffn.ffn_key_value_probe(hand, neurons=[1], top_k=10)
    assert [n.neuron for n in probe.neurons] == [1]
    assert probe.neurons[0].n_triggers == 10 and len(probe.neurons[0].top_triggers) == 10


def test_probe_validation_before_work_and_no_leak():
    model = build_model("d32h2")
    calls = []
    good = [("blocks.0.mlp.hook_post", lambda x, hook: calls.append(1))]
    for kwargs, error, match in [
        ({"layer": 1}, ValueError, r"layer 1 out of range: layer must be in \[-1, 0\]"),
        ({"neurons": [64]}, ValueError, r"neurons entry 64 out of range: neurons entry must be in \[-64, 63\]"),
        ({"neurons": []}, ValueError, "neurons must not be empty"),
        ({"neurons": [True]}, TypeError, "neurons entry must be an int, got bool True"),
        ({"top_k": 0}, ValueError, "top_k must be >= 1, got 0"),
        ({"repeat_sources": (4,)}, ValueError, r"repeat source 4 out of range \[0, 3\]"),
        ({"split": "val"}, ValueError, "split must be 'train', 'test' or 'all', got 'val'"),
        ({"task": TaskConfig(V=4)}, ValueError, "task has V=4 but the model has V=5"),
        ({"hooks": [("blocks.0.hook_nope", print)]}, ValueError, r"hooks\[0\] names unknown hook point 'blocks.0.hook_nope'"),
    ]:
        with pytest.raises(error, match=match) as info:
            ffn.ffn_key_value_probe(model, hooks=kwargs.pop("hooks", good), **kwargs)
        assert type(info.value) is error, kwargs
    assert calls == []

    def boom(x, hook):
        raise RuntimeError("boom")

    for fn in (ffn.ffn_key_value_probe, ffn.mlp_prediction_flips):
        with pytest.raises(RuntimeError, match="boom"):
            fn(model, hooks=[("blocks.0.mlp.hook_post", boom)])
        assert hook_count(model) == 0


def test_random_model_probe_values():
    """The seeded, untrained d16h1: measured numbers, and the summaries recomputed from the table."""
    probe = ffn.ffn_key_value_probe(build_model("d16h1"), task=TASK)
    frame = probe.to_dataframe()
    assert frame.shape[0] == 32 and probe.n_sequences == 5760
    assert frame["live"].all() and len(probe.live) == 32  # every neuron fires on some trigger
    assert (frame["n_triggers"] == 25).all()  # the default top_k
    # measured: mean agreement 0.15832 (below chance 0.2), 9 of 32 neurons above chance
    assert probe.mean_agreement == pytest.approx(0.158322, abs=1e-6)
    assert probe.fraction_above_chance == 9 / 32
    live = frame[frame["live"]]
    assert probe.mean_agreement == pytest.approx(float(live["agreement"].mean()), abs=1e-12)
    assert int((live["agreement"] > 0.2 + 1e-6).sum()) == 9
    assert probe.summary()["mean_agreement"] == probe.mean_agreement


# ----------------------------------------------------------------------------- flips


def test_mlp_flips_exact(hand):
    W, _ = _written_token()
    batch = make_batch(TASK, 2000, split="test", seed=3)
    flips = ffn.mlp_prediction_flips(hand, batch)
    frame = flips.to_dataframe()
    assert list(frame.index) == ["steps 1-4", "last-step elimination", "last-step recall"]
    # before the MLP every position predicts its own query token; the MLP rewrites a last query Q
    # to W (and the repeat neuron's +0.5 on token 2 never beats the query's +1)
    last_q = batch.extras["xs"][:, -1] == Q
    rep = batch.extras["repeated"]
    early = flips.get("steps 1-4")
    assert early.n == 4 * 2000 and early.flip_rate == 0.0
    assert early.accuracy_mid == pytest.approx(float((batch.extras["xs"][:, :4] == batch.extras["ys"][:, :4]).float().mean()))
    elim, recall = flips.get("last-step elimination"), flips.get("last-step recall")
    assert elim.flip_rate == pytest.approx(float(last_q[~rep].float().mean()))
    assert recall.flip_rate == pytest.approx(float(last_q[rep].float().mean()))
    assert elim.accuracy_post == pytest.approx(
        float(torch.where(last_q, batch.extras["ys"][:, -1] == W, batch.extras["xs"][:, -1] == batch.extras["ys"][:, -1])[~rep].float().mean())
    )
    # before the MLP a repeated last query predicts itself (x5 = x1): a trap whenever x1 is the unused y
    values = torch.arange(1, TASK.V + 1)
    unused = (batch.extras["ys"][:, :4, None] != values).all(1)  # [batch, V]: the one value no earlier y took
    assert bool((unused.sum(1) == 1).all())
    elimination = values.expand(len(batch), -1)[unused]
    expected_trap_mid = float((batch.extras["xs"][rep, -1] == elimination[rep]).double().mean())
    assert 0.0 < expected_trap_mid < 1.0
    assert recall.trap_mid == pytest.approx(expected_trap_mid, abs=1e-12)
    assert frame["trap_mid"].isna().tolist() == [True, True, False]
    assert elim.fixed_rate - elim.broken_rate == pytest.approx(elim.accuracy_post - elim.accuracy_mid, abs=1e-9)


def test_flips_validation(hand):
    with pytest.raises(ValueError, match="layer"):
        ffn.mlp_prediction_flips(hand, layer=2)
    with pytest.raises(TypeCheckError, match="parameter 'test_set'"):  # a tensor is not a TaskBatch | None
        ffn.mlp_prediction_flips(hand, test_set=torch.ones(3, 9, dtype=torch.long))


def test_negative_layer_and_neurons_count_from_the_end(hand):
    """One index rule for the package: layer=-1 (mlp_prediction_flips' default) is the last layer,
    here layer 0, in every analysis; negative neurons count from d_mlp."""
    assert ffn.mlp_prediction_flips(hand, make_batch(TASK, 200, seed=1)).layer == 0
    a = ffn.ffn_key_value_probe(hand, layer=-1, neurons=[-8, -1], top_k=5, task=TASK)
    b = ffn.ffn_key_value_probe(hand, layer=0, neurons=[0, 7], top_k=5, task=TASK)
    assert [n.neuron for n in a.neurons] == [0, 7]
    assert a.to_dataframe().equals(b.to_dataframe())
    for kwargs, error, match in [
        ({"layer": -2}, ValueError, r"layer -2 out of range: layer must be in \[-1, 0\]"),
        ({"neurons": [-9]}, ValueError, r"neurons entry -9 out of range: neurons entry must be in \[-8, 7\]"),
        ({"neurons": [0, -8]}, ValueError, r"neurons has repeated entries: \[0, -8\]"),
        ({"neurons": 3}, TypeCheckError, "parameter 'neurons'"),  # an int is not Sequence[int] | None
    ]:
        with pytest.raises(error, match=match) as info:
            ffn.ffn_key_value_probe(hand, task=TASK, **kwargs)
        assert type(info.value) is error, kwargs
