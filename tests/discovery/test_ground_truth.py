"""Ground-truth circuits read off the weights: the edge graph, the weight-built models, tracr programs.

The induction model's circuits are checked against the edges its construction states (listed by
hand from its module docstring: an independent derivation); tracr circuits against the RASP
programs' structure (which operation each layer computes, and which variables it reads).
"""

from __future__ import annotations

import pytest
import torch

from perm_circuits.discovery.ground_truth import (
    ABLATION_MODES,
    GroundTruth,
    all_edges,
    birth_ground_truth,
    ground_truth_models,
    induction_ground_truths,
    receiver_nodes,
    sender_nodes,
    weight_circuit,
)
from perm_circuits.discovery.tracr_models import tracr_available


def test_edge_counts_and_order():
    assert len(all_edges(1, 2)) == 13
    assert len(all_edges(2, 1)) == 23
    assert len(all_edges(2, 2)) == 46
    assert len(all_edges(2, 1, split_embed=True)) == 23 + 9  # pos_embed feeds the 9 receivers too
    edges = all_edges(2, 2)
    assert len(set(edges)) == len(edges)
    assert "embed->L0H0.q" in edges and "L0H0->L1H0.k" in edges and "L0MLP->logits" in edges
    assert "L0H0->L0MLP" in edges  # a head feeds its own layer's MLP
    assert "L0H0->L0H1.q" not in edges and "L1H0->L0MLP" not in edges and "L1MLP->L1H0.q" not in edges
    assert sender_nodes(1, 2) == ("embed", "L0H0", "L0H1", "L0MLP")
    assert receiver_nodes(1, 1) == ("L0H0.q", "L0H0.k", "L0H0.v", "L0MLP", "logits")
    with pytest.raises(ValueError, match="n_layers"):
        all_edges(0, 1)


def test_attention_only_edge_count():
    # senders embed, L0H0, L1H0; receivers L0H0.qkv, L1H0.qkv, logits: 7 + 4 + 1
    # receiver by receiver in forward order, each receiver's senders in forward order
    assert all_edges(2, 1, mlp=False) == tuple(
        [f"embed->L0H0.{p}" for p in "qkv"]
        + [f"{s}->L1H0.{p}" for p in "qkv" for s in ("embed", "L0H0")]
        + [f"{s}->logits" for s in ("embed", "L0H0", "L1H0")]
    )


def test_ground_truth_and_discovery_share_one_graph():
    from perm_circuits.discovery import circuit_graph_of
    from perm_circuits.discovery.graph import graph_edges
    from perm_circuits.handbuilt import build_induction_model

    assert all_edges is graph_edges
    assert circuit_graph_of(build_induction_model(5)).edges == all_edges(2, 2)


def test_ground_truth_validates():
    with pytest.raises(ValueError, match="not edges"):
        GroundTruth("m", {"L1H0->L0H0.q"}, ("zero",), 2, 1)
    with pytest.raises(ValueError, match="modes"):
        GroundTruth("m", {"embed->logits"}, ("optimal",), 2, 1)
    truth = GroundTruth("m", {"embed->logits"}, ("zero",), 1, 1)
    assert truth.label("embed->logits") and not truth.label("L0H0->logits")
    with pytest.raises(ValueError, match="not an edge"):
        truth.label("L3H0->logits")


INDUCTION_ZERO = {
    "embed->L0H0.q", "embed->L0H0.k",  # previous-token head: positions
    "embed->L0H0.v",  # ... copies the token
    "embed->L1H0.q", "embed->L1H0.k",  # induction head: token + x-slot flag; flag on the key side
    "L0H0->L1H0.k",  # K-composition: the key reads PREV
    "embed->L1H0.v",  # copies the attended token
    "embed->L1H1.q", "embed->L1H1.k", "embed->L1H1.v",  # elimination head: flag pattern, token copy
    "L1H0->logits", "L1H1->logits",
}
POSITIONAL = {"embed->L0H0.q", "embed->L0H0.k", "embed->L1H0.k", "embed->L1H1.q", "embed->L1H1.k"}


def test_induction_model_circuits_match_construction():
    zero, resample = induction_ground_truths(5)
    assert zero.modes == ("zero",) and set(resample.modes) == {"mean", "resample"}
    assert zero.edges == INDUCTION_ZERO
    assert resample.edges == INDUCTION_ZERO - POSITIONAL  # same-length inputs: positions never differ
    assert len(zero.edges) == 12 and len(zero.all_edges) == 46
    bare_zero, bare_resample = induction_ground_truths(5, eliminate=False)
    assert bare_zero.edges == {e for e in INDUCTION_ZERO if "L1H1" not in e}
    assert bare_resample.edges == {e for e in INDUCTION_ZERO - POSITIONAL if "L1H1" not in e}


def test_weight_circuit_refuses_layernorm_and_bad_tokens():
    from perm_circuits import build_model
    from perm_circuits.handbuilt import build_induction_model

    ln_model = build_model("d16h1")
    assert ln_model.cfg.normalization_type is not None
    with pytest.raises(ValueError, match="LayerNorm"):
        weight_circuit(ln_model)
    with pytest.raises(ValueError, match="ids"):
        weight_circuit(build_induction_model(5), varying_tokens=[[99]])


def test_birth_ground_truth_fits_its_model():
    from perm_circuits.systems.birth_model import BirthModelConfig, build_birth_model

    truth = birth_ground_truth()
    model = build_birth_model(BirthModelConfig(N=8, T=8, d_model=16))
    assert (model.cfg.n_layers, model.cfg.n_heads, model.cfg.attn_only) == (truth.n_layers, truth.n_heads, True)
    assert truth.edges <= set(all_edges(2, 1, mlp=False))
    assert len(truth.edges) == 5 and "L0H0->L1H0.k" in truth.edges and "embed->L1H0.k" not in truth.edges
    assert truth.modes == ("resample",) and set(truth.modes) <= set(ABLATION_MODES)


def test_birth_ground_truth_is_faithful_and_minimal_under_resample():
    """Every declared edge is needed; the previous-token head's position-only reads are not (resampled
    inputs have the same positions), so they are not in the resample truth."""
    from perm_circuits.discovery import prepare_edges
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model
    from perm_circuits.tasks.bigram import BigramTriggerTask

    model = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128)).eval()
    ei = prepare_edges(model, BigramTriggerTask(N=16, T=32, K=3).test_set(64), how="resample")
    truth = birth_ground_truth().edges

    def faith(edges) -> float:
        mask = torch.tensor([[float(e in edges) for e in ei.graph.edges]])
        return float(ei.faithfulness(ei.evaluate(mask))[0])

    assert faith(truth) > 0.99
    for edge in truth:
        assert faith(truth - {edge}) < 0.5, edge
    for edge in ("embed->L0H0.q", "embed->L0H0.k"):  # were declared: adding them changes nothing
        assert edge not in truth
        assert abs(faith(truth | {edge}) - faith(truth)) < 1e-3


needs_tracr = pytest.mark.skipif(
    not tracr_available(), reason="tracr is not installed (optional extra: pip install 'perm_circuits[tracr]')"
)


@pytest.fixture(scope="module")
def tracr_models():
    from perm_circuits.discovery.tracr_models import cached_tracr_model

    return {name: cached_tracr_model(name) for name in ("reverse", "frac_prevs")}  # shared with test_tracr


@pytest.fixture(scope="module")
def tracr_truths(tracr_models):
    from perm_circuits.discovery.ground_truth import tracr_ground_truths

    return {name: tracr_ground_truths(model) for name, model in tracr_models.items()}


@needs_tracr
@pytest.mark.slow
def test_reverse_circuits_follow_the_program(tracr_truths):
    zero, resample = tracr_truths["reverse"]
    assert zero.model == "tracr:reverse" and (zero.n_layers, zero.n_heads) == (4, 1)
    carries = dict(zero.carries)
    # length (selector width: L0 attention + L0 MLP) -> opp_idx (L1 MLP) -> opp_idx-1 (L2 MLP)
    # -> the reverse aggregate's query (L3 head), whose key reads indices and value tokens.
    chain = ["L0H0->L0MLP", "L0MLP->L1MLP", "L1MLP->L2MLP", "L2MLP->L3H0.q", "L3H0->logits"]
    assert set(chain) <= zero.edges
    assert [carries[e][0].rsplit("_", 1)[0] for e in chain] == ["length", "length", "opp_idx", "opp_idx-1", "reverse"]
    assert "indices" in carries["embed->L3H0.k"] and carries["embed->L3H0.v"] == ("tokens",)
    assert not any(e.startswith(("L1H0", "L2H0")) or e.endswith(("L1H0.q", "L2H0.v")) for e in zero.edges)
    assert len(zero.edges) == 13
    # same-length inputs: length and opp_idx never differ, only the token copy does
    assert resample.edges == {"embed->L3H0.v", "L3H0->logits"}
    assert resample.edges <= zero.edges <= set(zero.all_edges)


@needs_tracr
@pytest.mark.slow
def test_frac_prevs_circuits_follow_the_program(tracr_truths):
    zero, resample = tracr_truths["frac_prevs"]
    assert (zero.n_layers, zero.n_heads) == (2, 1)
    # is_x (L0 MLP) -> mean over previous positions (L1 head's value) -> >= 1/2 read-out (L1 MLP)
    assert resample.edges == {"embed->L0MLP", "L0MLP->L1H0.v", "L1H0->L1MLP", "L1MLP->logits"}
    # zero ablation adds the head's positional query/key (Select(indices, indices, LEQ)) and the
    # constant 'one' direction the MLPs use as a bias
    assert zero.edges - resample.edges == {"embed->L1H0.q", "embed->L1H0.k", "embed->L1MLP"}
    assert dict(zero.carries)["embed->L1MLP"] == ("one",)


@needs_tracr
@pytest.mark.slow
def test_reverse_mode_dependence_holds_on_the_model(tracr_models, tracr_truths):
    """What the two rules claim, checked by running the bridge: on every length-4 input the
    components outside the resample circuit (length, opp_idx) output the same at each position,
    so resampling them changes nothing; zeroing the length head changes the outputs (of shorter
    inputs), so the zero-ablation circuit needs it."""
    import torch

    model = tracr_models["reverse"]
    inputs = model.domain(4)
    tokens = model.encode(inputs)
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(tokens)
    spread = {
        name: float((cache[hook] - cache[hook][:1]).abs().max())
        for name, hook in [("L0H0", "blocks.0.hook_attn_out"), ("L0MLP", "blocks.0.hook_mlp_out"),
                           ("L1MLP", "blocks.1.hook_mlp_out"), ("L2MLP", "blocks.2.hook_mlp_out"),
                           ("L3H0", "blocks.3.hook_attn_out")]
    }
    zero, resample = tracr_truths["reverse"]
    in_resample = {part.split(".")[0] for e in resample.edges for part in e.split("->")}
    for name, value in spread.items():
        assert (value > 0) == (name in in_resample), (name, value)
    assert spread["L3H0"] >= 0.5  # the copied token differs between inputs

    def zero_out(activation, hook):
        return torch.zeros_like(activation)

    # zeroing the length head reads as "no width" -> the largest length, 4: right by chance on
    # length-4 inputs, wrong on shorter ones
    short = model.domain(3)
    with torch.no_grad(), model.bridge.hooks(fwd_hooks=[("blocks.0.hook_attn_out", zero_out)]):
        ablated = model.bridge(model.encode(short)).argmax(-1)[:, 1:]
    decode = {i: v for v, i in model.assembled.output_encoder.encoding_map.items()}
    ablated = [[decode[int(i)] for i in row] for row in ablated]
    unchanged = {seq for seq, a, b in zip(short, ablated, model.tracr_outputs(short)) if a == b}
    assert "L0H0->L0MLP" in zero.edges
    assert unchanged == {("a", "a", "a"), ("b", "b", "b"), ("c", "c", "c")}  # only where any read is right


def test_ground_truth_models_registry():
    registry = ground_truth_models(include_tracr=False)
    assert set(registry) == {"induction", "induction_bare", "birth"}
    for name in ("induction", "birth"):
        model, truths = registry[name]()
        for truth in truths:
            assert (model.cfg.n_layers, model.cfg.n_heads) == (truth.n_layers, truth.n_heads)
            assert truth.mlp == (not model.cfg.attn_only)
            assert truth.edges <= set(truth.all_edges)
    assert {t.modes for t in registry["induction"]()[1]} == {("zero",), ("mean", "resample")}
    if tracr_available():
        assert {"tracr:reverse", "tracr:frac_prevs", "tracr:sort"} <= set(ground_truth_models())
    with pytest.raises(TypeError, match="include_tracr"):
        ground_truth_models(include_tracr="yes")
